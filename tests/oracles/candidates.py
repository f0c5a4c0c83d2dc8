"""The candidate rule on the token-level radix tree (:mod:`oracles.radix`): the reference the block
trie's ranking (:mod:`prefixplan.analysis.blocktree`) is tested against."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from oracles.radix import NodeView, RadixTree
from prefixplan.analysis.candidates import UNLABELLED, Candidate, clip_segments, label_for
from prefixplan.core.granularity import aligned
from prefixplan.core.types import Segment
from prefixplan.errors import UsageError


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
