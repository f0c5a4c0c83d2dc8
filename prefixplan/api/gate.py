"""``prefixplan lock`` and ``prefixplan check``: the repository's keys and the CI gate, each one
call (:func:`run_lock`, :func:`run_check`) of one request; :func:`lock` and :func:`check` take
keyword arguments."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from prefixplan.gate.findings import CheckResult, LockResult


@dataclass(frozen=True)
class LockRequest:
    """What ``prefixplan lock`` is asked: the recipes, the lock file to write, and whether (and in
    which store, ``db``) to register each ``name@vN``."""

    recipes: str | os.PathLike[str] = "recipes"
    lock_path: str | os.PathLike[str] = "prefixplan.lock"
    db: str | None = None
    store: bool = True


@dataclass(frozen=True)
class CheckRequest:
    """What ``prefixplan check`` is asked: the recipes and lock to compare, the git ref whose lock
    they are compared with (``base_ref``), the lint level that fails (``fail_on``), and whether to
    lint at all."""

    recipes: str | os.PathLike[str] = "recipes"
    lock_path: str | os.PathLike[str] = "prefixplan.lock"
    base_ref: str | None = None
    fail_on: str = "error"
    lint: bool = True


def run_lock(request: LockRequest) -> LockResult:
    """The ``prefixplan lock`` command as one call (:class:`LockRequest`)."""
    from prefixplan.gate.lock import lock_recipes

    if not request.store:
        return lock_recipes(request.recipes, request.lock_path)
    from prefixplan.store import open_store

    with open_store(request.db) as opened:
        return lock_recipes(request.recipes, request.lock_path, store=opened)


def run_check(request: CheckRequest) -> CheckResult:
    """The ``prefixplan check`` command as one call (:class:`CheckRequest`); ``result.exit_code``
    is what the command exits with."""
    from prefixplan.gate.check import run_check as check_recipes

    return check_recipes(
        request.recipes, request.lock_path, base_ref=request.base_ref, fail_on=request.fail_on, lint=request.lint
    )


def lock(
    recipes: str | os.PathLike[str] = "recipes",
    lock_path: str | os.PathLike[str] = "prefixplan.lock",
    *,
    db: str | None = None,
    store: bool = True,
) -> LockResult:
    """Write ``prefixplan.lock`` from the recipes and register each ``name@vN`` (``prefixplan lock``)."""
    return run_lock(LockRequest(recipes, lock_path, db=db, store=store))


def check(
    recipes: str | os.PathLike[str] = "recipes",
    lock_path: str | os.PathLike[str] = "prefixplan.lock",
    *,
    base_ref: str | None = None,
    fail_on: str = "error",
    lint: bool = True,
) -> CheckResult:
    """Compare recipes with the lock (and the lock with ``base_ref``'s), lint them (``prefixplan check``).
    ``result.exit_code`` is what the command exits with."""
    return run_check(CheckRequest(recipes, lock_path, base_ref=base_ref, fail_on=fail_on, lint=lint))
