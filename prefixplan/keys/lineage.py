"""Stable names for prefixes found in logs (the lineage rule, see docs/keys.md).

A *lineage* is one named prefix whose content evolves as versions: an edited system prompt
should show up as ``support-bot@v3 -> v4``, not as an unrelated key. The rule:

1. Only prefixes of the same *kind* (``system``, ``tools``, ``system+tools``, ``rag``, ...)
   can share a lineage.
2. ``tools``: the same **set** of tool names (sorted, order ignored) is the same lineage.
3. Kinds containing ``system`` (and any other kind with text): the same lineage when the
   *signature* of the text is equal -- the first :data:`HEAD_CHARS` characters after
   collapsing whitespace and masking volatile runs (digits, UUIDs, hex ids) -- or when the
   text is highly similar (``difflib`` ratio >= :data:`SIMILARITY` of the words and punctuation
   in the first :data:`COMPARE_CHARS` characters). For ``system+tools`` the tool-name set must also match.
   The best-scoring existing lineage wins; ties go to the alphabetically first name.
4. Otherwise a new name derived from the content: ``system-<first words>``,
   ``tools-<sorted names>`` (``-and-N-more`` plus a short hash when there are many), or
   ``<kind>-<hash8>``; a numeric suffix ``-2``, ``-3`` avoids clashing with existing names.

Users can override any name by declaring the prefix in a recipe.
"""

from __future__ import annotations

import difflib
import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

HEAD_CHARS = 160
COMPARE_CHARS = 2000
SIMILARITY = 0.8
MAX_SLUG_WORDS = 4
MAX_TOOL_NAMES = 3
STORED_HEAD_CHARS = COMPARE_CHARS

_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_HEX = re.compile(r"\b[0-9a-fA-F]{12,}\b")
_DIGITS = re.compile(r"\d+")
_WS = re.compile(r"\s+")
_WORDS = re.compile(r"\w+|[^\w\s]")


@dataclass(frozen=True, slots=True)
class LineageRow:
    """What the lineage rule needs to know of an existing prefix (latest version)."""

    name: str
    kind: str
    version: int
    system_head: str | None = None
    tool_names: tuple[str, ...] = ()


def normalise_text(text: str) -> str:
    """Whitespace collapsed; UUIDs, long hex ids and digit runs masked (for matching only)."""
    text = _UUID.sub("<uuid>", text)
    text = _HEX.sub("<hex>", text)
    text = _DIGITS.sub("0", text)
    return _WS.sub(" ", text).strip()


def system_signature(text: str) -> str:
    """The head of the normalised text that decides "same lineage" by equality."""
    return normalise_text(text)[:HEAD_CHARS]


def similarity(a: str, b: str) -> float:
    """``difflib`` ratio of the words and punctuation of the normalised heads of two texts (0..1).

    Words, not characters: a character-level ratio of two 2,000-character heads costs ~0.15 s in
    difflib (seconds per analysis with a few dozen stored prompts); over ~300 words it is ~1 ms
    and tells an edit from an unrelated prompt the same way."""
    na, nb = _WORDS.findall(normalise_text(a)[:COMPARE_CHARS]), _WORDS.findall(normalise_text(b)[:COMPARE_CHARS])
    if not na and not nb:
        return 1.0
    sm = difflib.SequenceMatcher(None, na, nb, autojunk=False)
    if sm.real_quick_ratio() < SIMILARITY or sm.quick_ratio() < SIMILARITY:
        return sm.quick_ratio()  # an upper bound below the threshold: cheap and decisive
    return sm.ratio()


def slug(text: str, words: int = MAX_SLUG_WORDS) -> str:
    """Lower-case ``a-z0-9`` words joined by ``-`` (first ``words`` words)."""
    parts = re.findall(r"[a-z0-9]+", normalise_text(text).lower().replace("<uuid>", "").replace("<hex>", ""))
    parts = [p for p in parts if not p.isdigit()]
    return "-".join(parts[:words])[:60].strip("-")


def lineage_data(system_text: str | None, tool_names: Sequence[str]) -> dict[str, Any]:
    """What to store with a version so later analyses can match it (``Store.record_version(lineage=...)``)."""
    data: dict[str, Any] = {}
    if system_text is not None:
        data["system_head"] = system_text[:STORED_HEAD_CHARS]
    if tool_names:
        data["tool_names"] = sorted(set(tool_names))
    return data


def _new_name(kind: str, system_text: str | None, tool_names: Sequence[str]) -> str:
    base_kind = re.sub(r"[^a-z0-9]+", "-", kind.lower()).strip("-") or "prefix"
    names = sorted(set(tool_names))
    if "system" in kind and system_text:
        s = slug(system_text)
        if s:
            return f"{base_kind}-{s}"
    if kind == "tools" and names:
        tool_slug = [re.sub(r"[^a-z0-9]+", "-", n.lower()).strip("-") or "tool" for n in names]
        if len(tool_slug) <= MAX_TOOL_NAMES:
            return ("tools-" + "-".join(tool_slug))[:100]
        digest = hashlib.sha256("\x00".join(names).encode()).hexdigest()[:6]
        head = "-".join(tool_slug[:2])[:60]
        return f"tools-{head}-and-{len(names) - 2}-more-{digest}"
    basis = (system_text or "") + "\x00" + "\x00".join(names)
    return f"{base_kind}-{hashlib.sha256(basis.encode('utf-8', 'surrogatepass')).hexdigest()[:8]}"


def assign_lineage(
    kind: str,
    *,
    system_text: str | None,
    tool_names: Sequence[str],
    existing: Sequence[LineageRow],
) -> str:
    """Name for a prefix by the lineage rule (module docstring; docs/keys.md).

    Args:
        kind: the candidate label (``system``, ``tools``, ``system+tools``, ``rag``, ...).
        system_text: the prefix's system text (or other leading text), when known.
        tool_names: names of the tools the prefix covers (any order).
        existing: latest versions of known prefixes (``Store.lineage_names()``).

    Returns:
        An existing lineage name when the rule matches one, else a new stable name.
    """
    names = tuple(sorted(set(tool_names)))
    same_kind = [row for row in existing if row.kind == kind]
    if kind == "tools" or (not system_text and names):
        for row in sorted(same_kind, key=lambda r: r.name):
            if tuple(sorted(set(row.tool_names))) == names:
                return row.name
    elif system_text:
        best: tuple[float, str] | None = None
        sig = system_signature(system_text)
        for row in same_kind:
            if row.system_head is None:
                continue
            if names and tuple(sorted(set(row.tool_names))) != names:
                continue
            score = 1.0 if system_signature(row.system_head) == sig else similarity(system_text, row.system_head)
            if score >= SIMILARITY and (best is None or score > best[0] or (score == best[0] and row.name < best[1])):
                best = (score, row.name)
        if best is not None:
            return best[1]
    base = _new_name(kind, system_text, names)
    taken = {row.name for row in existing}
    name, n = base, 2
    while name in taken:
        name = f"{base}-{n}"
        n += 1
    return name
