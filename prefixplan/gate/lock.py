"""``prefixplan lock``: write ``prefixplan.lock`` from the recipes and register each ``name@vN``."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from prefixplan.core.fileio import clean_stale_temps
from prefixplan.errors import KeyConflictError
from prefixplan.gate.findings import LockResult
from prefixplan.keys.lockfile import LockEntry, read_lock, render_lock, write_lock
from prefixplan.keys.recipe_model import Recipe, display_path
from prefixplan.keys.recipes import load_recipes


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


def _restore(lock_p: Path, previous: str | None) -> None:
    """Put the lock back as it was before this run (remove it when there was none)."""
    from prefixplan.core.fileio import atomic_write_text

    if previous is None:
        lock_p.unlink(missing_ok=True)
    else:
        atomic_write_text(lock_p, previous)


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
            conflicts.append(f"{r.key} ({display_path(r.file)}): locked {e.hash}, content now {r.content_hash}")
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
    clean_stale_temps(lock_p)  # left by a lock killed while writing (file times are wall-clock)
    current = lock_p.read_text(encoding="utf-8") if lock_p.exists() else None
    written = current != text
    # The lock is written first (atomically) and the store registers every version in one
    # transaction after it; when the store fails, the old lock is put back. Either both say
    # bot@v2 or neither does: a failed lock never burns a version or starts v1's retention.
    if written:
        write_lock(lock_p, entries)
    registered = []
    try:
        if store is not None:
            with store.write():
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
    except BaseException:
        if written:
            _restore(lock_p, current)
        raise
    return LockResult(
        path=lock_p,
        written=written,
        added=tuple(sorted(new_keys - old_keys)),
        unchanged=tuple(sorted(new_keys & old_keys)),
        removed=tuple(sorted(old_keys - new_keys)),
        registered=tuple(registered),
    )
