"""Shared prefixes counted on the block trace: the candidate rule of docs/radix.md on block ids.

A block of the :class:`~prefixplan.trace.blocks.BlockTrace` stands for one block-aligned prefix
of one namespace, so the block trace *is* the radix tree at the cache granularity: a block's
``hits`` are the requests whose path passes through it, its children are the blocks one deeper
that extend it. Counting on blocks instead of tokens gives the same candidates (every
candidate's length is block-aligned anyway: docs/radix.md), in arrays indexed by block id with
no Python object per block, and from a trace file as well as from a log.

* ``hits[b]``: requests whose path includes ``b`` (their deepest full block is in ``b``'s
  subtree), summed bottom-up one depth at a time; ``ends[b]``: requests whose path ends at ``b``.
* A block is a candidate when ``hits >= min_hits``, its length ``L = depth * block_tokens`` is at
  least ``min_tokens``, and no child has as many hits (a branch point or an end point).
* ``marginal = (hits - 1) * (L - L_parent)``, ``L_parent`` the length of the nearest candidate
  above it; ranking as in :mod:`prefixplan.analysis.candidates` (block id for ties: first
  arrival). The representative request is the block's first arrival; ``first_seen`` its time,
  ``last_seen`` the latest arrival through the block.
* ``raw_length`` equals ``length``: only whole blocks are counted.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from prefixplan.analysis.candidates import Candidate, clip_segments, label_for
from prefixplan.core.types import Segment
from prefixplan.errors import UsageError
from prefixplan.trace.blocks import BlockTrace

DEFAULT_TENANT_CAP = 1024
"""Distinct tenants counted per candidate; beyond it a candidate reports "at least" this many."""


class BlockTree:
    """Per-block counts of a block trace (module docstring)."""

    def __init__(self, trace: BlockTrace) -> None:
        self.trace = trace
        n = trace.n_distinct_blocks
        parent = trace.parent
        depth = trace.block_depth.astype(np.int64)
        ends = np.zeros(n, dtype=np.int64)
        has = trace.end_block >= 0
        np.add.at(ends, trace.end_block[has], 1)
        hits = ends.copy()
        times = trace.times
        last = np.full(n, -np.inf)
        np.maximum.at(last, trace.end_block[has], times[has])
        # one depth at a time, deepest first: children pass their counts to their parents
        by_depth = np.argsort(-depth, kind="stable")
        bounds = np.flatnonzero(np.diff(depth[by_depth])) + 1
        for level in np.split(by_depth, bounds):
            if not level.shape[0]:
                continue
            up = parent[level]
            keep = up >= 0
            np.add.at(hits, up[keep], hits[level[keep]])
            np.maximum.at(last, up[keep], last[level[keep]])
        max_child = np.zeros(n, dtype=np.int64)
        child = np.flatnonzero(parent >= 0)
        np.maximum.at(max_child, parent[child], hits[child])
        self.depth = depth
        self.hits = hits
        self.ends = ends
        self.max_child = max_child
        self.last_seen = last
        self.block_tokens = self._block_tokens()

    def _block_tokens(self) -> np.ndarray:
        """Real tokens per block of each block id (its first arrival's block size)."""
        t = self.trace
        if not t.n_distinct_blocks:
            return np.zeros(0, dtype=np.int64)
        return t.block_tokens[t.block_first_row]

    @property
    def n_blocks(self) -> int:
        return self.trace.n_distinct_blocks

    def length(self, b: int) -> int:
        return int(self.depth[b] * self.block_tokens[b])

    def namespace(self, b: int) -> str:
        t = self.trace
        return t.namespaces[int(t.ns[int(t.block_first_row[b])])]


def find_block_candidates(
    tree: BlockTree,
    *,
    min_tokens: int = 32,
    min_hits: int = 2,
    segments_of: Callable[[int], Sequence[Segment]] | None = None,
) -> list[Candidate]:
    """Shared prefixes ranked by marginal reusable tokens (module docstring).

    ``segments_of`` maps a trace row (arrival) to that request's segments, for labels. Returned
    candidates have ``request_index`` = the representative's row and ``tenants`` 0 (filled for
    the shown ones by :func:`count_tenants`).

    Raises:
        UsageError: a parameter is out of range.
    """
    if min_tokens < 1:
        raise UsageError(f"min_tokens must be >= 1, got {min_tokens}")
    if min_hits < 1:
        raise UsageError(f"min_hits must be >= 1, got {min_hits}")
    trace = tree.trace
    lengths = tree.depth * tree.block_tokens
    is_cand = (tree.hits >= min_hits) & (lengths >= min_tokens) & (tree.max_child < tree.hits)
    up = nearest_candidate_above(tree, is_cand)
    cands = np.flatnonzero(is_cand)
    parent_cand = up[cands]
    l_parent = np.where(parent_cand >= 0, lengths[np.maximum(parent_cand, 0)], 0)
    marginal = (tree.hits[cands] - 1) * (lengths[cands] - l_parent)
    first_row = trace.block_first_row[cands]
    first_seen = trace.times[first_row]
    order = np.lexsort((cands, first_seen, -lengths[cands], -marginal))
    cands, marginal, parent_cand, first_row = cands[order], marginal[order], parent_cand[order], first_row[order]
    rank = {int(b): i for i, b in enumerate(cands.tolist())}
    out: list[Candidate] = []
    for i, b in enumerate(cands.tolist()):
        length = int(lengths[b])
        row = int(first_row[i])
        if segments_of is None:
            segs: tuple[tuple[str, int, int, str | None], ...] = ()
            kinds: tuple[str, ...] = ()
            label = "unknown"
        else:
            # segment offsets are in units (token ids, or Mooncake hash ids of unit_tokens each)
            segs = clip_segments(segments_of(row), length // int(trace.unit_tokens[row]))
            kinds = tuple(dict.fromkeys(s[0] for s in segs))
            label = label_for(kinds)
        pc = int(parent_cand[i])
        out.append(
            Candidate(
                id=i,
                namespace=tree.namespace(b),
                length=length,
                raw_length=length,
                hits=int(tree.hits[b]),
                tenants=0,
                tenants_capped=False,
                first_seen=float(trace.times[row]),
                last_seen=float(tree.last_seen[b]),
                request_index=row,
                parent=rank[pc] if pc >= 0 else None,
                reusable_tokens=int((tree.hits[b] - 1) * length),
                marginal_tokens=int(marginal[i]),
                node_id=b,
                label=label,
                kinds=kinds,
                segments=segs,
            )
        )
    return out


def nearest_candidate_above(tree: BlockTree, is_cand: np.ndarray) -> np.ndarray:
    """For every block, the nearest candidate strictly above it (-1 if none), one depth at a time."""
    parent = tree.trace.parent
    n = tree.n_blocks
    at_or_above = np.full(n, -1, dtype=np.int64)  # nearest candidate at or above
    above = np.full(n, -1, dtype=np.int64)
    order = np.argsort(tree.depth, kind="stable")
    bounds = np.flatnonzero(np.diff(tree.depth[order])) + 1
    for level in np.split(order, bounds):
        if not level.shape[0]:
            continue
        up = parent[level]
        inherited = np.where(up >= 0, at_or_above[np.maximum(up, 0)], -1)
        above[level] = inherited
        at_or_above[level] = np.where(is_cand[level], level, inherited)
    return above


def count_tenants(
    tree: BlockTree,
    shown: Sequence[Candidate],
    tenant_of: Callable[[int], str],
    cap: int = DEFAULT_TENANT_CAP,
) -> dict[int, tuple[int, bool]]:
    """Distinct tenants of the requests through each shown candidate: ``{node_id: (count, capped)}``.

    Each request walks up from its deepest block through the shown candidates above it
    (``tenant_of(row)`` names its tenant; anonymous requests count as distinct)."""
    trace = tree.trace
    wanted = np.zeros(tree.n_blocks, dtype=bool)
    ids = np.asarray([c.node_id for c in shown], dtype=np.int64)
    if not ids.shape[0]:
        return {}
    wanted[ids] = True
    up = nearest_candidate_above(tree, wanted)
    seen: dict[int, set[str]] = {int(b): set() for b in ids.tolist()}
    capped: dict[int, bool] = dict.fromkeys(seen, False)
    end = trace.end_block
    for row in range(trace.n_requests):
        b = int(end[row])
        if b < 0:
            continue
        if not wanted[b]:
            b = int(up[b])
        tenant = None
        while b >= 0:
            if tenant is None:
                tenant = tenant_of(row)
            s = seen[b]
            if len(s) < cap:
                s.add(tenant)
            elif tenant not in s:
                capped[b] = True
            b = int(up[b])
    return {b: (len(s), capped[b]) for b, s in seen.items()}
