"""``prefixplan.lock``: the committed content hash of every recipe key.

The file is YAML written in one fixed layout (keys sorted by name then version, one line
per part), so diffs are small and reviewable::

    # prefixplan.lock ...
    lock_version: 1
    scheme: pp1
    keys:
      support-bot@v3:
        hash: pp1:sha256:c8f7...
        recipe: recipes/support-bot.yaml
        retain: 604800
        pin: true
        parts:
          "system parts/support/system.md": sha256:0b1c...
          "tool[0] parts/support/tools/lookup_order.json": sha256:77aa...

``hash`` is the key's identity (:func:`prefixplan.keys.content_hash`); the per-part hashes
let ``check`` say which part changed. Writes are atomic (temp file + rename).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from prefixplan.core import yamlsafe
from prefixplan.errors import InputError, UsageError
from prefixplan.keys import KEY_SCHEME, CacheKey, is_content_hash, parse_key

LOCK_VERSION = 1
DEFAULT_LOCK = "prefixplan.lock"
HEADER = (
    "# prefixplan.lock: content hash of every recipe key (name@vN) and of each of its parts.\n"
    "# Written by `prefixplan lock` and committed; `prefixplan check` compares recipes with it.\n"
    "# Do not edit by hand: change a recipe, bump its version, run `prefixplan lock`.\n"
)
_PART_HASH = re.compile(r"^sha256:[0-9a-f]{64}$")


@dataclass(frozen=True, slots=True)
class LockEntry:
    """One ``name@vN`` of the lock file (``line``: where it starts, 0 if not from a file)."""

    key: CacheKey
    hash: str
    recipe: str
    retain: int
    pin: bool
    parts: tuple[tuple[str, str], ...] = ()
    line: int = 0


@dataclass(frozen=True, slots=True)
class Lock:
    """A parsed lock file: entries by ``str(key)``."""

    entries: dict[str, LockEntry] = field(default_factory=dict)
    path: Path | None = None
    exists: bool = True

    def by_name(self, name: str) -> list[LockEntry]:
        """Entries of one name, by version."""
        return sorted((e for e in self.entries.values() if e.key.name == name), key=lambda e: e.key.version)


def _q(s: str) -> str:
    """A YAML double-quoted scalar (JSON string syntax is valid YAML)."""
    return json.dumps(s, ensure_ascii=False)


def render_lock(entries: Iterable[LockEntry]) -> str:
    """The lock file text for ``entries`` (deterministic: sorted, fixed layout)."""
    out = [HEADER, f"lock_version: {LOCK_VERSION}\n", f"scheme: {KEY_SCHEME}\n"]
    items = sorted(entries, key=lambda e: (e.key.name, e.key.version))
    if not items:
        out.append("keys: {}\n")
        return "".join(out)
    out.append("keys:\n")
    for e in items:
        out.append(f"  {_q(str(e.key))}:\n")
        out.append(f"    hash: {e.hash}\n")
        out.append(f"    recipe: {_q(e.recipe)}\n")
        out.append(f"    retain: {int(e.retain)}\n")
        out.append(f"    pin: {'true' if e.pin else 'false'}\n")
        if e.parts:
            out.append("    parts:\n")
            for ident, h in e.parts:
                out.append(f"      {_q(ident)}: {h}\n")
        else:
            out.append("    parts: {}\n")
    return "".join(out)


def parse_lock_text(text: str, where: str = DEFAULT_LOCK) -> Lock:
    """Parse lock text; raises :class:`InputError` naming the field on any problem."""
    import yaml

    try:
        doc = yamlsafe.load(text) if text.strip() else {}
    except yaml.YAMLError as exc:
        raise InputError(f"{where}: invalid YAML: {exc}", hint="regenerate it with `prefixplan lock`") from exc
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        raise InputError(f"{where}: expected a mapping")
    unknown = set(doc) - {"lock_version", "scheme", "keys"}
    if unknown:
        raise InputError(f"{where}: {sorted(unknown)[0]}: unknown field")
    if doc.get("lock_version", LOCK_VERSION) != LOCK_VERSION:
        raise InputError(f"{where}: lock_version: unsupported {doc.get('lock_version')!r} (expected {LOCK_VERSION})")
    if doc.get("scheme", KEY_SCHEME) != KEY_SCHEME:
        raise InputError(f"{where}: scheme: unsupported {doc.get('scheme')!r} (expected {KEY_SCHEME})")
    keys = doc.get("keys") or {}
    if not isinstance(keys, dict):
        raise InputError(f"{where}: keys: expected a mapping")
    lines = _entry_lines(text)
    entries: dict[str, LockEntry] = {}
    for k, v in keys.items():
        path = f"keys.{k}"
        try:
            key = parse_key(str(k))
        except UsageError as exc:
            raise InputError(f"{where}: {path}: {exc}") from exc
        if not isinstance(v, dict):
            raise InputError(f"{where}: {path}: expected a mapping")
        bad = set(v) - {"hash", "recipe", "retain", "pin", "parts"}
        if bad:
            raise InputError(f"{where}: {path}.{sorted(bad)[0]}: unknown field")
        h = v.get("hash")
        if not isinstance(h, str) or not is_content_hash(h):
            raise InputError(f"{where}: {path}.hash: expected pp1:sha256:<64 hex>")
        parts_raw = v.get("parts") or {}
        if not isinstance(parts_raw, dict):
            raise InputError(f"{where}: {path}.parts: expected a mapping")
        parts = []
        for ident, ph in parts_raw.items():
            if not isinstance(ph, str) or not _PART_HASH.match(ph):
                raise InputError(f"{where}: {path}.parts.{ident}: expected sha256:<64 hex>")
            parts.append((str(ident), ph))
        retain = v.get("retain", 0)
        if isinstance(retain, bool) or not isinstance(retain, int) or retain < 0:
            raise InputError(f"{where}: {path}.retain: expected seconds >= 0")
        entries[str(key)] = LockEntry(
            key=key,
            hash=h,
            recipe=str(v.get("recipe") or ""),
            retain=retain,
            pin=bool(v.get("pin", False)),
            parts=tuple(parts),
            line=lines.get(str(key), 0),
        )
    return Lock(entries=entries)


def _entry_lines(text: str) -> dict[str, int]:
    lines: dict[str, int] = {}
    for i, line in enumerate(text.splitlines(), start=1):
        m = re.match(r'^  "?([^"\s:][^"]*?)"?:\s*$', line)
        if m:
            lines.setdefault(m.group(1), i)
    return lines


def read_lock(path: str | os.PathLike[str]) -> Lock:
    """Read a lock file; a missing file is an empty lock with ``exists=False``."""
    p = Path(path)
    if not p.exists():
        return Lock(entries={}, path=p, exists=False)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{p}: cannot read: {exc}") from exc
    lock = parse_lock_text(text, str(p))
    return Lock(entries=lock.entries, path=p, exists=True)


def write_lock(path: str | os.PathLike[str], entries: Iterable[LockEntry]) -> str:
    """Atomically write the lock file (temp file in the same folder, fsync, rename)."""
    from prefixplan.core.fileio import atomic_write_text

    text = render_lock(entries)
    atomic_write_text(Path(path), text)
    return text
