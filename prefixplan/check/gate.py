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

import difflib
import os
import subprocess
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prefixplan.errors import ExitCode, InputError, KeyConflictError, RecipeError, UsageError
from prefixplan.keys.lockfile import Lock, LockEntry, parse_lock_text, read_lock, render_lock, write_lock
from prefixplan.keys.recipes import Part, Recipe, display_path, load_recipes, parse_recipe_text

FAIL_LEVELS = ("error", "warning")
MAX_DIFF_LINES = 40


@dataclass(frozen=True, slots=True)
class Finding:
    """One result of ``check``.

    ``exit_code`` is what the finding makes ``check`` return when it counts as failing
    (lint warnings count only with ``fail_on="warning"``).
    """

    code: str
    severity: str  # error | warning | notice
    message: str
    key: str | None = None
    part: str | None = None
    file: str | None = None
    line: int | None = None
    column: int | None = None
    diff: tuple[str, ...] = ()
    cost_tokens: int | None = None
    exit_code: int = ExitCode.FINDINGS

    def to_dict(self) -> dict[str, Any]:
        d = {f: getattr(self, f) for f in self.__dataclass_fields__}
        d["diff"] = list(self.diff)
        return d


@dataclass(frozen=True, slots=True)
class CheckResult:
    """Findings of one ``check`` run and the exit code they imply."""

    findings: tuple[Finding, ...]
    exit_code: int
    keys: tuple[str, ...] = ()
    base_ref: str | None = None
    fail_on: str = "error"

    @property
    def ok(self) -> bool:
        return self.exit_code == ExitCode.OK

    def to_dict(self) -> dict[str, Any]:
        return {
            "exit_code": self.exit_code,
            "ok": self.ok,
            "keys": list(self.keys),
            "base_ref": self.base_ref,
            "fail_on": self.fail_on,
            "findings": [f.to_dict() for f in self.findings],
        }


@dataclass(frozen=True, slots=True)
class LockResult:
    """What ``lock_recipes`` did."""

    path: Path
    written: bool
    added: tuple[str, ...]
    unchanged: tuple[str, ...]
    removed: tuple[str, ...]
    registered: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "written": self.written,
            "added": list(self.added),
            "unchanged": list(self.unchanged),
            "removed": list(self.removed),
            "registered": list(self.registered),
        }


# -- git -----------------------------------------------------------------------------------


def git_show(ref: str, path: Path) -> bytes | None:
    """Bytes of ``path`` at git ``ref`` (``git show REF:./path``), or None when absent."""
    path = Path(path).resolve()
    folder = path.parent
    while not folder.exists():  # pragma: no cover - a deleted folder
        folder = folder.parent
    rel = os.path.relpath(path, folder)
    try:
        proc = subprocess.run(
            ["git", "-C", str(folder), "show", f"{ref}:./{Path(rel).as_posix()}"],
            capture_output=True,
            check=False,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout if proc.returncode == 0 else None


def git_ref_exists(ref: str, cwd: Path) -> bool:
    try:
        proc = subprocess.run(
            ["git", "-C", str(cwd), "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"],
            capture_output=True,
            check=False,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0


# -- helpers --------------------------------------------------------------------------------


def recipe_kind(recipe: Recipe) -> str:
    """``system``, ``tools``, ``rag`` joined by ``+`` in that order (the candidate labels)."""
    kinds = {p.kind for p in recipe.parts}
    labels = [lab for k, lab in (("system", "system"), ("tool", "tools"), ("document", "rag")) if k in kinds]
    return "+".join(labels) or "prefix"


def _rel_to(path: Path, folder: Path) -> str:
    try:
        return Path(os.path.relpath(path.resolve(), folder.resolve())).as_posix()
    except ValueError:  # pragma: no cover
        return path.as_posix()


def lock_entry(recipe: Recipe, lock_dir: Path) -> LockEntry:
    """The lock entry a recipe should have."""
    return LockEntry(
        key=recipe.key,
        hash=recipe.content_hash,
        recipe=_rel_to(recipe.file, lock_dir),
        retain=recipe.retain,
        pin=recipe.pin,
        parts=tuple((p.ident, p.hash) for p in recipe.parts),
    )


def _part_file(recipe: Recipe, part: Part) -> tuple[str, int]:
    if part.path is not None:
        return display_path(part.path), part.line
    return display_path(recipe.file), part.line


def _old_part_bytes(recipe: Recipe, part: Part, ref: str) -> bytes | None:
    if part.path is not None:
        return git_show(ref, part.path)
    old_recipe = git_show(ref, recipe.file)
    if old_recipe is None:
        return None
    try:
        olds = parse_recipe_text(old_recipe.decode("utf-8"), recipe.file)
    except (RecipeError, UnicodeDecodeError):
        return None
    for r in olds:
        if r.name == recipe.name:
            for p in r.parts:
                if p.label == part.label:
                    return p.data
    return None


def _line_diff(old: bytes, new: bytes, name: str, ref: str) -> tuple[tuple[str, ...], int]:
    a = old.decode("utf-8", "replace").splitlines()
    b = new.decode("utf-8", "replace").splitlines()
    first = 1
    for tag, _i1, _i2, j1, _j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag != "equal":
            first = j1 + 1
            break
    lines = list(difflib.unified_diff(a, b, f"{name} ({ref})", f"{name} (working tree)", n=1, lineterm=""))
    if not lines and old != new:
        lines = [
            f"--- {name} ({ref})",
            f"+++ {name} (working tree)",
            "(only bytes that are not line text differ,"
            " e.g. whitespace at the end of the file or line endings)",
        ]
    if len(lines) > MAX_DIFF_LINES:
        lines = lines[:MAX_DIFF_LINES] + [f"... {len(lines) - MAX_DIFF_LINES} more diff lines"]
    return tuple(lines), first


def _changed_parts(entry: LockEntry, recipe: Recipe) -> list[tuple[str, Part | None, str | None]]:
    """(what, current part or None, locked part hash or None) for each differing part."""
    old = list(entry.parts)
    new = list(recipe.parts)
    sm = difflib.SequenceMatcher(None, [h for _, h in old], [p.hash for p in new], autojunk=False)
    out: list[tuple[str, Part | None, str | None]] = []
    for tag, i1, i2, j1, j2 in sm.get_opcodes():
        if tag == "equal":
            continue
        pairs = max(i2 - i1, j2 - j1)
        for k in range(pairs):
            o = old[i1 + k] if i1 + k < i2 else None
            n = new[j1 + k] if j1 + k < j2 else None
            if o is not None and n is not None:
                out.append(("changed", n, o[1]))
            elif n is not None:
                out.append(("added", n, None))
            elif o is not None:
                out.append((f"removed {o[0]}", None, o[1]))
    return out


def _content_findings(recipe: Recipe, entry: LockEntry, diff_ref: str | None) -> list[Finding]:
    key = str(recipe.key)
    changes = _changed_parts(entry, recipe)
    nxt = max(recipe.version, entry.key.version) + 1
    fix = (
        f"bump `version:` to {nxt} for {recipe.name} in {display_path(recipe.file)} and run `prefixplan lock`"
    )
    if not changes:  # parts equal, key hash differs: the lock itself was altered
        return [
            Finding(
                code="content-changed",
                severity="error",
                key=key,
                file=display_path(recipe.file),
                line=recipe.line,
                message=f"{key}: the locked hash does not match the recipe content; {fix}",
            )
        ]
    findings = []
    for what, part, old_hash in changes:
        if part is None:
            findings.append(
                Finding(
                    code="content-changed",
                    severity="error",
                    key=key,
                    part=what.split(" ", 1)[1],
                    file=display_path(recipe.file),
                    line=recipe.line,
                    message=f"{key}: part {what.split(' ', 1)[1]} was removed but the version did not change; {fix}",
                )
            )
            continue
        file, line = _part_file(recipe, part)
        diff: tuple[str, ...] = ()
        if what == "changed" and diff_ref is not None:
            old = _old_part_bytes(recipe, part, diff_ref)
            if old is not None and part.path is not None and "#chunk" in part.source:
                diff, first = _line_diff(old, part.path.read_bytes(), part.source.split("#")[0], diff_ref)
                line = first
            elif old is not None and (old_hash is None or _hash(old) == old_hash):
                diff, first = _line_diff(old, part.data, part.source, diff_ref)
                line = part.line + first - 1 if part.path is not None else part.line
            else:
                diff = (f"(the locked content of this part is not committed at {diff_ref}; no line diff)",)
        verb = "changed" if what == "changed" else "was added"
        findings.append(
            Finding(
                code="content-changed",
                severity="error",
                key=key,
                part=part.ident,
                file=file,
                line=line,
                diff=diff,
                message=f"{key}: part {part.ident} {verb} but the version did not change; {fix}",
            )
        )
    return findings


def _hash(data: bytes) -> str:
    from prefixplan.keys import part_hash

    return part_hash(data)


def _lint_findings(recipes: Sequence[Recipe], counter: Any = None) -> list[Finding]:
    from prefixplan.analysis.dynamic import lint_prefix, lint_tool_variants, tool_name

    out: list[Finding] = []
    for r in recipes:
        texts = [(p.ident, p.data.decode("utf-8", "replace")) for p in r.parts]
        lint = lint_prefix(
            texts,
            counter=counter,
            ignore=r.lint_ignore,
            first_lines=[p.line if p.path is not None else 1 for p in r.parts],
        )
        by_ident = {p.ident: p for p in r.parts}
        for f in lint:
            part = by_ident[f.part]
            file, _ = _part_file(r, part)
            line = f.line if part.path is not None else part.line
            out.append(
                Finding(
                    code=f.code,
                    severity="warning",
                    key=str(r.key),
                    part=f.part,
                    file=file,
                    line=line,
                    column=f.column if part.path is not None else None,
                    cost_tokens=f.cost_tokens,
                    message=f"{r.key}: {f.message}",
                )
            )
    groups: dict[tuple[str, ...], list[Recipe]] = defaultdict(list)
    for r in recipes:
        tools = [p for p in r.parts if p.kind == "tool"]
        names = tuple(sorted(str(tool_name(p.data.decode("utf-8", "replace"))) for p in tools))
        if tools:
            groups[names].append(r)
    for rs in groups.values():
        if len(rs) < 2:
            continue
        variants = {
            str(r.key): [p.data.decode("utf-8", "replace") for p in r.parts if p.kind == "tool"] for r in rs
        }
        by_key = {str(r.key): r for r in rs}
        for f in lint_tool_variants(variants, lineage="recipes with the same tool set", counter=counter):
            key = f.part.split(" ")[0]
            r = by_key[key]
            out.append(
                Finding(
                    code=f.code,
                    severity="warning",
                    key=key,
                    part=f.part,
                    file=display_path(r.file),
                    line=r.line,
                    cost_tokens=f.cost_tokens,
                    message=f.message,
                )
            )
    return out


def _exit_code(findings: Sequence[Finding], fail_on: str) -> int:
    codes = set()
    for f in findings:
        if f.severity == "error" or (fail_on == "warning" and f.severity == "warning"):
            codes.add(f.exit_code)
    for code in (ExitCode.USAGE, ExitCode.FINDINGS, ExitCode.NOT_LOCKED):
        if code in codes:
            return code
    return ExitCode.OK


# -- check ----------------------------------------------------------------------------------


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
        raise UsageError(
            f"--base {base_ref}: not a git commit here", hint="fetch it first, e.g. git fetch origin main"
        )
    ref_for_diff = base_ref or diff_ref
    names = {r.name for r in recipes}
    for r in recipes:
        key = str(r.key)
        entry = lock.entries.get(key)
        if entry is not None:
            if entry.hash != r.content_hash:
                findings.extend(_content_findings(r, entry, ref_for_diff))
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
                    f"{key} is {what} but not in {display_path(lock_p)}: run `prefixplan lock` "
                    "and commit the lock file"
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
        findings.extend(_lint_findings(recipes, counter))
    return CheckResult(
        tuple(findings), _exit_code(findings, fail_on), tuple(str(r.key) for r in recipes), base_ref, fail_on
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
    return out


# -- lock ------------------------------------------------------------------------------------


def lock_recipes(
    recipes_dir: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    lock_path: str | os.PathLike[str],
    *,
    store: Any = None,
    now: float | None = None,
) -> LockResult:
    """Write the lock for the current recipes and register their versions in ``store``.

    Raises:
        RecipeError: a recipe is malformed (nothing is written).
        KeyConflictError: a ``name@vN`` already locked or registered has different content
            (nothing is written; the message says to bump the version).
    """
    lock_p = Path(lock_path)
    recipes = load_recipes(recipes_dir)
    lock = read_lock(lock_p)
    conflicts = []
    for r in recipes:
        e = lock.entries.get(str(r.key))
        if e is not None and e.hash != r.content_hash:
            conflicts.append(
                f"{r.key} ({display_path(r.file)}): locked {e.hash}, content now {r.content_hash}"
            )
        newer = [x for x in lock.by_name(r.name) if x.key.version > r.version]
        if newer:
            conflicts.append(
                f"{r.key} ({display_path(r.file)}): {newer[-1].key} is already locked; versions only go up"
            )
        if store is not None:
            rec = store.get(r.name, r.version)
            if rec is not None and rec.content_hash != r.content_hash:
                conflicts.append(
                    f"{r.key} ({display_path(r.file)}): registered in the store as {rec.content_hash}, "
                    f"content now {r.content_hash}"
                )
    if conflicts:
        first = next(r for r in recipes if any(c.startswith(f"{r.key} ") for c in conflicts))
        raise KeyConflictError(
            "content changed under an existing key; bump the version instead:\n  " + "\n  ".join(conflicts),
            hint=(
                f"bump the version instead (e.g. `version: {first.version + 1}` for {first.name} in "
                f"{display_path(first.file)}), then run `prefixplan lock` again"
            ),
        )
    lock_dir = lock_p.resolve().parent
    entries = [lock_entry(r, lock_dir) for r in recipes]
    new_keys = {str(e.key) for e in entries}
    old_keys = set(lock.entries)
    text = render_lock(entries)
    current = lock_p.read_text(encoding="utf-8") if lock_p.exists() else None
    registered = []
    if store is not None:  # register first: a store conflict leaves the lock untouched
        for r in recipes:
            rec = store.record_version(
                r.name,
                version=r.version,
                content_hash=r.content_hash,
                kind=recipe_kind(r),
                source=f"recipe:{_rel_to(r.file, lock_dir)}",
                namespace=r.model,
                retain_seconds=r.retain,
                pinned=r.pin,
                now=now,
            )
            registered.append(str(rec.key))
    written = current != text
    if written:
        write_lock(lock_p, entries)
    return LockResult(
        path=lock_p,
        written=written,
        added=tuple(sorted(new_keys - old_keys)),
        unchanged=tuple(sorted(new_keys & old_keys)),
        removed=tuple(sorted(old_keys - new_keys)),
        registered=tuple(registered),
    )


# -- rendering helpers (pure; used by the CLI) -------------------------------------------------


def _esc_data(s: str) -> str:
    return s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _esc_prop(s: str) -> str:
    return _esc_data(s).replace(":", "%3A").replace(",", "%2C")


def github_annotations(result: CheckResult) -> list[str]:
    """GitHub Actions workflow commands (``::error file=F,line=L,title=T::message``), one per finding."""
    out = []
    for f in result.findings:
        level = {"error": "error", "warning": "warning"}.get(f.severity, "notice")
        props = []
        if f.file:
            props.append(f"file={_esc_prop(f.file)}")
        if f.line:
            props.append(f"line={int(f.line)}")
        if f.column:
            props.append(f"col={int(f.column)}")
        title = f.code + (f" {f.key}" if f.key else "")
        props.append(f"title={_esc_prop(title)}")
        body = f.message + ("\n" + "\n".join(f.diff) if f.diff else "")
        out.append(f"::{level} {','.join(props)}::{_esc_data(body)}")
    return out
