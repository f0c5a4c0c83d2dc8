"""Shared prefixes of the radix tree, ranked by the tokens a prefix cache would reuse.

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

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from prefixplan.analysis.radix import NodeView, RadixTree
from prefixplan.core.granularity import aligned
from prefixplan.core.types import Segment
from prefixplan.errors import UsageError

UNLABELLED = "unknown"
"""Label used when :func:`find_candidates` gets no ``segments_of``."""

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


def _is_branch_or_end(v: NodeView) -> bool:
    # One child with no sequence ending here would mean the child has the same hits; the
    # tree never builds such a node, but the rule is checked rather than assumed.
    return len(v.children) != 1 or v.ends > 0


def find_candidates(
    tree: RadixTree,
    *,
    block_size: int,
    min_tokens: int = 32,
    min_hits: int = 2,
    top: int | None = None,
    segments_of: Callable[[int], Sequence[Segment]] | None = None,
) -> list[Candidate]:
    """Shared prefixes ranked by marginal reusable tokens.

    Args:
        tree: The radix tree built from the analysed prompts.
        block_size: Cache granularity in tokens (vLLM block size, SGLang page size, ...).
        min_tokens: Smallest aligned length ``L`` kept (>= 1).
        min_hits: Smallest number of sequences sharing the prefix (>= 1).
        top: Keep only the first ``top`` candidates of the ranking (None: all).
        segments_of: Request index -> that request's segments, for labels; when None every
            candidate is labelled ``"unknown"`` with no segments.

    Returns:
        Candidates in rank order; ``Candidate.id`` is the rank.

    Raises:
        UsageError: a parameter is out of range.
    """
    if block_size < 1:
        raise UsageError(f"block size must be >= 1, got {block_size}", hint="vLLM uses 16, SGLang 1 (its page size)")
    if min_tokens < 1:
        raise UsageError(f"min_tokens must be >= 1, got {min_tokens}")
    if min_hits < 1:
        raise UsageError(f"min_hits must be >= 1, got {min_hits}")
    if top is not None and top < 0:
        raise UsageError(f"top must be >= 0, got {top}")

    # nearest[node] = (node id of the nearest candidate at or above node, its L) or None.
    nearest: dict[int, tuple[int, int] | None] = {}
    picked: list[tuple[NodeView, int, int | None, int]] = []  # view, L, parent node, L_parent
    for v in tree.nodes():
        up = nearest[v.parent] if v.parent is not None else None
        length = aligned(v.depth, block_size)
        if (
            v.parent is not None
            and v.hits >= min_hits
            and length >= min_tokens
            and length > aligned(v.depth_start, block_size)
            and _is_branch_or_end(v)
        ):
            picked.append((v, length, up[0] if up else None, up[1] if up else 0))
            nearest[v.id] = (v.id, length)
        else:
            nearest[v.id] = up

    def rank_key(item: tuple[NodeView, int, int | None, int]) -> tuple:
        v, length, _, l_parent = item
        marginal = (v.hits - 1) * (length - l_parent)
        fs = v.first_seen
        return (-marginal, -length, fs is None, fs if fs is not None else 0.0, v.id)

    picked.sort(key=rank_key)
    rank = {item[0].id: i for i, item in enumerate(picked)}
    if top is not None:
        picked = picked[:top]

    out: list[Candidate] = []
    for i, (v, length, parent_node, l_parent) in enumerate(picked):
        if segments_of is None:
            segs: tuple[tuple[str, int, int, str | None], ...] = ()
            label = UNLABELLED
            kinds: tuple[str, ...] = ()
        else:
            segs = clip_segments(segments_of(v.request_index), length)
            kinds = tuple(dict.fromkeys(s[0] for s in segs))
            label = label_for(kinds)
        out.append(
            Candidate(
                id=i,
                namespace=v.namespace,
                length=length,
                raw_length=v.depth,
                hits=v.hits,
                tenants=v.tenants,
                tenants_capped=v.tenants_capped,
                first_seen=v.first_seen,
                last_seen=v.last_seen,
                request_index=v.request_index,
                parent=rank[parent_node] if parent_node is not None else None,
                reusable_tokens=(v.hits - 1) * length,
                marginal_tokens=(v.hits - 1) * (length - l_parent),
                node_id=v.id,
                label=label,
                kinds=kinds,
                segments=segs,
            )
        )
    return out
