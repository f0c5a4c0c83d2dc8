"""``prefixplan lock`` and ``prefixplan check``: the repository's keys and the CI gate."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from prefixplan.gate.findings import CheckResult, LockResult


def lock(
    recipes: str | os.PathLike[str] = "recipes",
    lock_path: str | os.PathLike[str] = "prefixplan.lock",
    *,
    db: str | None = None,
    store: bool = True,
) -> LockResult:
    """Write ``prefixplan.lock`` from the recipes and register each ``name@vN`` (``prefixplan lock``)."""
    from prefixplan.gate.lock import lock_recipes

    if not store:
        return lock_recipes(recipes, lock_path)
    from prefixplan.store import open_store

    with open_store(db) as opened:
        return lock_recipes(recipes, lock_path, store=opened)


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
    from prefixplan.gate.check import run_check

    return run_check(recipes, lock_path, base_ref=base_ref, fail_on=fail_on, lint=lint)
