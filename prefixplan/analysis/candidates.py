"""A shared prefix as the analysis reports it (:class:`Candidate`), its label and its segments.

The ranking runs on the block trie (:mod:`prefixplan.analysis.blocktree`); the same rule on a
token-level radix tree is the tests' reference (``tests/oracles``).

Candidate rule (see docs/radix.md):

* A candidate is a non-root tree node whose path is shared (``hits >= min_hits``) and whose
  block-aligned depth ``L = aligned(depth, block_size)`` is at least ``min_tokens``, where
  the node is a branch point or an end point (>= 2 children, or >= 1 sequence ends there,
  or -- the same thing for one child -- its single child has fewer hits).
* Only maximal distinct aligned lengths are kept: a node is skipped when its edge contains
  no block boundary (``aligned(depth_start) == L``). On a chain, the node kept for a length
  ``L`` is the *shallowest* one whose edge contains position ``L``; its ``hits`` is the exact
  number of sequences that share those ``L`` tokens. Deeper nodes aligning to the same ``L``
  are subsets of it (fewer or equal hits) and add no reusable block.
* Value, nesting-aware: ``reusable = (hits - 1) * L`` (first request computes, the others
  reuse); ``marginal = (hits - 1) * (L - L_parent)`` with ``L_parent`` the aligned length of
  the nearest ancestor *candidate* (0 if none). Summing marginals never counts a parent's
  tokens twice. With ``min_hits=2, min_tokens=1`` the sum over all candidates equals
  ``sum(aligned(insert_return_i, block_size))`` over the inserted requests (tested).
* Ranking: marginal desc, then ``L`` desc, then first_seen asc (unknown last), then node id.
  Candidate ids are ranks in the full ranking, so they are stable under ``top``; a parent
  may therefore have an id outside a ``top``-limited output.

Label rule (:func:`label_for`), from the representative request's segments that overlap
``[0, L)`` (a segment counts when ``start < L`` and ``end > start``), ignoring ``template``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from prefixplan.core.types import Segment

UNLABELLED = "unknown"
"""Label of a candidate whose representative's segments are unknown."""

_HISTORY_KINDS = frozenset({"user", "assistant", "tool_result"})


@dataclass(frozen=True, slots=True)
class Candidate:
    """A shared prefix worth caching.

    ``length`` is the block-aligned reusable length ``L``; ``raw_length`` the depth of the
    tree node it came from (>= ``L``). ``hits`` sequences share the first ``raw_length``
    tokens (and so the first ``L``). ``segments`` are ``(kind, start, end, name)`` of the
    representative request's segments clipped to ``[0, L)``; ``kinds`` their distinct kinds
    in order of first appearance (``template`` included).
    """

    id: int
    namespace: str
    length: int
    raw_length: int
    hits: int
    tenants: int
    tenants_capped: bool
    first_seen: float | None
    last_seen: float | None
    request_index: int
    parent: int | None
    reusable_tokens: int
    marginal_tokens: int
    node_id: int
    label: str
    kinds: tuple[str, ...]
    segments: tuple[tuple[str, int, int, str | None], ...]


def label_for(kinds: Iterable[str]) -> str:
    """Label of a prefix from the segment kinds it covers (``template`` is ignored).

    ``doc`` -> "rag"; any of user/assistant/tool_result -> "history"; system and tool ->
    "system+tools"; tool -> "tools"; system -> "system"; raw -> "raw"; block -> "trace";
    otherwise "template".
    """
    ks = set(kinds)
    if "doc" in ks:
        return "rag"
    if ks & _HISTORY_KINDS:
        return "history"
    if "system" in ks and "tool" in ks:
        return "system+tools"
    if "tool" in ks:
        return "tools"
    if "system" in ks:
        return "system"
    if "raw" in ks:
        return "raw"
    if "block" in ks:
        return "trace"
    return "template"


def clip_segments(segments: Sequence[Segment], length: int) -> tuple[tuple[str, int, int, str | None], ...]:
    """Segments overlapping ``[0, length)``, clipped to it, as ``(kind, start, end, name)``."""
    out = []
    for s in segments:
        if s.end > s.start and s.start < length and s.end > 0:
            out.append((s.kind, max(0, s.start), min(s.end, length), s.name))
    return tuple(out)
