"""The CI gate: ``prefixplan lock`` and ``prefixplan check``.

``lock_recipes`` writes ``prefixplan.lock`` from the recipes and registers each ``name@vN``
in the store; it refuses to change the hash of a ``name@vN`` that is already locked or
registered. ``run_check`` compares recipes with the lock (and, with ``base_ref``, the lock
with the lock of a git ref) without a tokenizer or a database, and lints the recipe
content for cache breakers.

Exit codes (:class:`prefixplan.errors.ExitCode`), most severe first:
2 a recipe or the lock is malformed; 1 content changed under an unchanged ``name@vN``, the
lock was hand-edited against the base, a version went backwards, or lint findings at the
``fail_on`` level; 3 a version was bumped (or a key added) but ``prefixplan lock`` was not
run; 0 recipes and lock agree.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from prefixplan.errors import ExitCode, InputError, RecipeError, UsageError
from prefixplan.gate.content import content_findings
from prefixplan.gate.findings import FAIL_LEVELS, CheckResult, Finding, exit_code_of
from prefixplan.gate.git import git_ref_exists, git_show
from prefixplan.gate.lint import recipe_lint_findings
from prefixplan.keys.lockfile import Lock, parse_lock_text, read_lock
from prefixplan.keys.recipe_model import display_path
from prefixplan.keys.recipes import load_recipes


def run_check(
    recipes_dir: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    lock_path: str | os.PathLike[str],
    *,
    base_ref: str | None = None,
    fail_on: str = "error",
    lint: bool = True,
    diff_ref: str | None = "HEAD",
    counter: Any = None,
) -> CheckResult:
    """Compare recipes with the lock (and the lock with ``base_ref``'s lock); lint recipes.

    Args:
        recipes_dir: the recipes folder (``*.yaml``) or recipe files.
        lock_path: the lock file (missing: every key is "not locked").
        base_ref: a git ref (``origin/main``); a ``name@vN`` whose hash differs between the
            base lock and the current lock is a hand edit (exit 1).
        fail_on: ``error`` (default) or ``warning`` (lint warnings fail too).
        lint: run the cache-breaker lint.
        diff_ref: where to read the previous content of a changed part for the line diff
            (``base_ref`` when given, else this; None: no diffs).
        counter: optional token counter for lint costs (default chars/4, approximate).
    """
    if fail_on not in FAIL_LEVELS:
        raise UsageError(f"--fail-on must be one of {', '.join(FAIL_LEVELS)}, got {fail_on!r}")
    lock_p = Path(lock_path)
    findings: list[Finding] = []
    try:
        recipes = load_recipes(recipes_dir)
    except RecipeError as exc:
        for prob in getattr(exc, "errors", None) or []:
            findings.append(
                Finding(
                    code="recipe-invalid",
                    severity="error",
                    file=prob.file,
                    line=prob.line,
                    message=str(prob),
                    exit_code=ExitCode.USAGE,
                )
            )
        if not findings:
            findings.append(
                Finding(code="recipe-invalid", severity="error", message=str(exc), exit_code=ExitCode.USAGE)
            )
        return CheckResult(tuple(findings), ExitCode.USAGE, (), base_ref, fail_on)
    try:
        lock = read_lock(lock_p)
    except InputError as exc:
        f = Finding(
            code="lock-invalid",
            severity="error",
            file=display_path(lock_p),
            line=1,
            message=f"{exc} (regenerate it with `prefixplan lock`)",
            exit_code=ExitCode.USAGE,
        )
        return CheckResult((f,), ExitCode.USAGE, tuple(str(r.key) for r in recipes), base_ref, fail_on)
    if base_ref is not None and not git_ref_exists(base_ref, lock_p.resolve().parent):
        raise UsageError(f"--base {base_ref}: not a git commit here", hint="fetch it first, e.g. git fetch origin main")
    ref_for_diff = base_ref or diff_ref
    names = {r.name for r in recipes}
    for r in recipes:
        key = str(r.key)
        entry = lock.entries.get(key)
        if entry is not None:
            if entry.hash != r.content_hash:
                findings.extend(content_findings(r, entry, ref_for_diff))
            continue
        others = lock.by_name(r.name)
        newer = [e for e in others if e.key.version > r.version]
        if newer:
            findings.append(
                Finding(
                    code="version-decreased",
                    severity="error",
                    key=key,
                    file=display_path(r.file),
                    line=r.line,
                    message=(
                        f"{key}: the lock already has {newer[-1].key}; versions only go up "
                        f"(set version: {newer[-1].key.version + 1} and run `prefixplan lock`)"
                    ),
                )
            )
            continue
        what = f"bumped from {others[-1].key}" if others else "new"
        findings.append(
            Finding(
                code="not-locked",
                severity="error",
                key=key,
                file=display_path(r.file),
                line=r.line,
                exit_code=ExitCode.NOT_LOCKED,
                message=(
                    f"{key} is {what} but not in {display_path(lock_p)}: run `prefixplan lock` and commit the lock file"
                ),
            )
        )
    if lock.exists:
        for e in lock.entries.values():
            if e.key.name not in names:
                findings.append(
                    Finding(
                        code="stale-lock-entry",
                        severity="notice",
                        key=str(e.key),
                        file=display_path(lock_p),
                        line=e.line or None,
                        message=f"{e.key} is locked but no recipe declares {e.key.name}; `prefixplan lock` removes it",
                    )
                )
    if base_ref is not None:
        findings.extend(_base_findings(lock, lock_p, base_ref))
    if lint:
        findings.extend(recipe_lint_findings(recipes, counter))
    return CheckResult(
        tuple(findings), exit_code_of(findings, fail_on), tuple(str(r.key) for r in recipes), base_ref, fail_on
    )


def _base_findings(lock: Lock, lock_p: Path, base_ref: str) -> list[Finding]:
    raw = git_show(base_ref, lock_p)
    if raw is None:
        return [
            Finding(
                code="no-base-lock",
                severity="notice",
                file=display_path(lock_p),
                message=f"{display_path(lock_p)} does not exist at {base_ref}; nothing to compare",
            )
        ]
    try:
        base = parse_lock_text(raw.decode("utf-8"), f"{display_path(lock_p)}@{base_ref}")
    except (InputError, UnicodeDecodeError) as exc:
        return [
            Finding(
                code="no-base-lock",
                severity="notice",
                file=display_path(lock_p),
                message=f"the lock at {base_ref} cannot be read ({exc}); nothing to compare",
            )
        ]
    out = []
    for k, be in sorted(base.entries.items()):
        cur = lock.entries.get(k)
        if cur is not None and cur.hash != be.hash:
            out.append(
                Finding(
                    code="lock-edited",
                    severity="error",
                    key=k,
                    file=display_path(lock_p),
                    line=cur.line or None,
                    diff=(f"-    hash: {be.hash}", f"+    hash: {cur.hash}"),
                    message=(
                        f"{k} has hash {cur.hash} in {display_path(lock_p)} but {be.hash} at {base_ref}: "
                        "a locked name@vN must never change its content; restore the entry and bump the "
                        "version instead"
                    ),
                )
            )
    # The lock keeps only each name's current version, so a version set back (v2 at the base, v1
    # now, possibly with other content) shares no key with the base: compare each name's highest.
    for name in sorted({e.key.name for e in base.entries.values()}):
        before, now = base.by_name(name), lock.by_name(name)
        if not now or now[-1].key.version >= before[-1].key.version:
            continue
        cur = now[-1]
        out.append(
            Finding(
                code="version-decreased",
                severity="error",
                key=str(cur.key),
                file=display_path(lock_p),
                line=cur.line or None,
                diff=(f"-  {before[-1].key}", f"+  {cur.key}"),
                message=(
                    f"{name} is at {cur.key} in {display_path(lock_p)} but was at {before[-1].key} at {base_ref}: "
                    f"versions only go up, and {cur.key} may already name other content in caches and stores "
                    f"(set version: {before[-1].key.version + 1} and run `prefixplan lock`)"
                ),
            )
        )
    return out
