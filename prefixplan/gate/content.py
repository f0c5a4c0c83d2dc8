"""Content that changed under an unchanged ``name@vN``: which parts, where, and the line diff."""

from __future__ import annotations

import difflib

from prefixplan.errors import RecipeError
from prefixplan.gate.findings import Finding
from prefixplan.gate.git import git_show
from prefixplan.keys import part_hash
from prefixplan.keys.lockfile import LockEntry
from prefixplan.keys.recipe_model import Part, Recipe, display_path
from prefixplan.keys.recipes import parse_recipe_text

MAX_DIFF_LINES = 40


def part_file(recipe: Recipe, part: Part) -> tuple[str, int]:
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
            "(only bytes that are not line text differ, e.g. whitespace at the end of the file or line endings)",
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


def content_findings(recipe: Recipe, entry: LockEntry, diff_ref: str | None) -> list[Finding]:
    key = str(recipe.key)
    changes = _changed_parts(entry, recipe)
    nxt = max(recipe.version, entry.key.version) + 1
    fix = f"bump `version:` to {nxt} for {recipe.name} in {display_path(recipe.file)} and run `prefixplan lock`"
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
        file, line = part_file(recipe, part)
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
    return part_hash(data)
