"""Shared prefixes counted on the block trace: the candidate rule of docs/radix.md on block ids.

A block of the :class:`~prefixplan.trace.blocks.BlockTrace` stands for one block-aligned prefix
of one namespace, so the block trace *is* the radix tree at the cache granularity: a block's
``hits`` are the requests whose path passes through it, its children are the blocks one deeper
that extend it. Counting on blocks instead of tokens gives the same candidates (every
candidate's length is block-aligned anyway: docs/radix.md), in arrays indexed by block id with
no Python object per block, and from a trace file as well as from a log.

* ``hits[b]``: requests whose path includes ``b`` (their deepest full block is in ``b``'s
  subtree), summed bottom-up one depth at a time from the requests whose path ends at each block.
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
from dataclasses import dataclass

import numpy as np

from prefixplan.analysis.candidates import Candidate, clip_segments, label_for
from prefixplan.core.types import Segment
from prefixplan.errors import UsageError
from prefixplan.trace.blocks import BlockTrace

DEFAULT_TENANT_CAP = 1024
"""Distinct tenants counted per candidate; beyond it a candidate reports "at least" this many."""


class BlockTree:
    """Per-block counts of a block trace (module docstring), 9 bytes per block: ``hits`` and
    ``by_depth`` (block ids by depth) as int32, ``branch`` (no child has all the block's hits) as
    bool, ``depth`` shared with the trace; ``block_tokens`` per block unless
    every request has the same."""

    def __init__(self, trace: BlockTrace) -> None:
        self.trace = trace
        n = trace.n_distinct_blocks
        parent = trace.parent
        self.depth = trace.block_depth
        rows = np.flatnonzero(trace.end_block >= 0)
        ends = trace.end_block[rows]
        hits = np.zeros(n, dtype=np.int32)
        np.add.at(hits, ends, 1)
        del rows, ends
        # block ids by depth (shallowest first), and where each depth starts
        self.by_depth = stable_order(self.depth)
        self.level_starts = np.flatnonzero(np.diff(self.depth[self.by_depth])) + 1
        # one depth at a time, deepest first: children pass their counts to their parents
        for level in reversed(self.levels()):
            up = parent[level]
            keep = up >= 0
            if not keep.any():
                continue
            np.add.at(hits, up[keep], hits[level[keep]])
        # a branch or end point: no child has all of the block's hits (a child never has more),
        # marked a slice of ids at a time: a bool per block, no index array of every block
        full_child = np.zeros(n, dtype=bool)
        step = 1 << 22
        for lo in range(0, n, step):
            up = parent[lo : lo + step]
            has = up >= 0
            up = up[has]
            full_child[up[hits[lo : lo + step][has] == hits[up]]] = True
        self.branch = np.logical_not(full_child, out=full_child)
        self.hits = hits
        self.block_tokens: np.ndarray | int = self._block_tokens()

    def _block_tokens(self) -> np.ndarray | int:
        """Real tokens per block of each block id (its first arrival's block size), or that size
        when every request has the same."""
        t = self.trace
        if not t.n_requests:
            return 1
        lo, hi = int(t.block_tokens.min()), int(t.block_tokens.max())
        if lo == hi:
            return lo
        brought = np.diff(np.append(t.block_start, t.n_distinct_blocks))  # blocks each row brought
        return np.repeat(t.block_tokens.astype(np.int32), brought)

    def levels(self) -> list[np.ndarray]:
        """Block ids of each depth, shallowest first (views of ``by_depth``)."""
        return np.split(self.by_depth, self.level_starts) if self.by_depth.shape[0] else []

    def long_enough(self, min_tokens: int) -> np.ndarray:
        """Per block: is its prefix at least ``min_tokens`` long."""
        bt = self.block_tokens
        if isinstance(bt, int):
            return self.depth >= -(-int(min_tokens) // max(1, bt))
        return self.lengths() >= min_tokens

    @property
    def n_blocks(self) -> int:
        return self.trace.n_distinct_blocks

    def tokens_of(self, blocks: np.ndarray) -> np.ndarray:
        """Real tokens per block of ``blocks``."""
        bt = self.block_tokens
        if isinstance(bt, int):
            return np.full(blocks.shape[0], bt, dtype=np.int64)
        return bt[blocks].astype(np.int64)

    def lengths(self, blocks: np.ndarray | None = None) -> np.ndarray:
        """Prefix length in real tokens of ``blocks`` (default: every block)."""
        if blocks is None:
            return self.depth.astype(np.int64) * self.block_tokens
        return self.depth[blocks].astype(np.int64) * self.tokens_of(blocks)

    def arena_tokens(self) -> int:
        """Real tokens of all distinct blocks together."""
        bt = self.block_tokens
        return self.n_blocks * bt if isinstance(bt, int) else int(bt.sum())

    def last_rows(self, blocks: np.ndarray) -> np.ndarray:
        """The latest arrival (row) through each of ``blocks``: each request walks up through
        the given blocks above its deepest one, all requests a step at a time (rows are
        arrivals, so the largest row is the latest)."""
        blocks = np.asarray(blocks, dtype=np.int64)
        last = np.full(blocks.shape[0], -1, dtype=np.int64)
        if not blocks.shape[0]:
            return last
        wanted = np.zeros(self.n_blocks, dtype=bool)
        wanted[blocks] = True
        at = nearest_candidate_at_or_above(self, wanted)
        del wanted
        sorter = np.argsort(blocks)
        end = self.trace.end_block
        rows = np.flatnonzero(end >= 0)
        cur = at[end[rows]].astype(np.int64)
        parent = self.trace.parent
        while rows.shape[0]:
            keep = cur >= 0
            rows, cur = rows[keep], cur[keep]
            if not rows.shape[0]:
                break
            np.maximum.at(last, sorter[np.searchsorted(blocks, cur, sorter=sorter)], rows)
            up = parent[cur]
            cur = np.where(up >= 0, at[np.maximum(up, 0)], -1).astype(np.int64)
        return last

    def namespace(self, b: int) -> str:
        t = self.trace
        return t.namespaces[int(t.ns[int(t.first_rows(np.array([b]))[0])])]


def stable_order(values: np.ndarray, step: int = 1 << 22) -> np.ndarray:
    """``np.argsort(values, kind="stable")`` of small non-negative integers as int32, sorted a
    slice at a time (no int64 index array of the whole length)."""
    n = values.shape[0]
    out = np.empty(n, dtype=np.int32)
    if not n:
        return out
    counts = np.bincount(values)
    fill = np.concatenate(([0], np.cumsum(counts)[:-1]))  # next free place of each value
    for lo in range(0, n, step):
        part = values[lo : lo + step]
        order = np.argsort(part, kind="stable")
        ranked = part[order]
        c = np.bincount(ranked, minlength=counts.shape[0])
        first = np.concatenate(([0], np.cumsum(c)[:-1]))
        out[fill[ranked] + (np.arange(ranked.shape[0]) - first[ranked])] = order + lo
        fill += c
    return out


@dataclass(frozen=True)
class Ranking:
    """The ranked candidates: the first ``limit`` as :class:`Candidate` records, and totals over
    all of them (a log of a million requests has hundreds of thousands)."""

    candidates: list[Candidate]
    count: int
    marginal_tokens: int


def find_block_candidates(
    tree: BlockTree,
    *,
    min_tokens: int = 32,
    min_hits: int = 2,
    segments_of: Callable[[int], Sequence[Segment]] | None = None,
) -> list[Candidate]:
    """Every shared prefix, ranked (:func:`rank_blocks` without a limit)."""
    return rank_blocks(tree, min_tokens=min_tokens, min_hits=min_hits, segments_of=segments_of).candidates


def rank_blocks(
    tree: BlockTree,
    *,
    min_tokens: int = 32,
    min_hits: int = 2,
    segments_of: Callable[[int], Sequence[Segment]] | None = None,
    limit: int | None = None,
) -> Ranking:
    """Shared prefixes ranked by marginal reusable tokens (module docstring); records for the
    first ``limit`` (None: all).

    ``segments_of`` maps a trace row (arrival) to that request's segments, for labels. Returned
    candidates have ``request_index`` = the representative's row and ``tenants`` 0 (filled for
    the shown ones by :func:`count_tenants`); ``parent`` is the rank of the nearest candidate
    above, whether or not it is within the limit.

    Raises:
        UsageError: a parameter is out of range.
    """
    if min_tokens < 1:
        raise UsageError(f"min_tokens must be >= 1, got {min_tokens}")
    if min_hits < 1:
        raise UsageError(f"min_hits must be >= 1, got {min_hits}")
    trace = tree.trace
    is_cand = (tree.hits >= min_hits) & tree.branch
    is_cand &= tree.long_enough(min_tokens)
    at_or_above = nearest_candidate_at_or_above(tree, is_cand)
    cands = np.flatnonzero(is_cand)
    del is_cand
    parent_cand = above(tree, at_or_above, cands)
    del at_or_above
    clen = tree.lengths(cands)
    l_parent = np.zeros(cands.shape[0], dtype=np.int64)
    has_up = parent_cand >= 0
    l_parent[has_up] = tree.lengths(parent_cand[has_up])
    marginal = (tree.hits[cands].astype(np.int64) - 1) * (clen - l_parent)
    first_row = trace.first_rows(cands)
    first_seen = trace.times[first_row]
    order = np.lexsort((cands, first_seen, -clen, -marginal))
    total_marginal = int(marginal.sum())
    count = int(cands.shape[0])
    shown = order if limit is None else order[: max(0, int(limit))]
    by_block = np.argsort(cands)  # rank of a candidate block: searchsorted in cands, then rank_of
    rank_of = np.empty(count, dtype=np.int64)
    rank_of[order] = np.arange(count)
    last_rows = tree.last_rows(cands[shown])
    out: list[Candidate] = []
    for i, k in enumerate(shown.tolist()):
        b = int(cands[k])
        length = int(clen[k])
        row = int(first_row[k])
        if segments_of is None:
            segs: tuple[tuple[str, int, int, str | None], ...] = ()
            kinds: tuple[str, ...] = ()
            label = "unknown"
        else:
            # segment offsets are in units (token ids, or Mooncake hash ids of unit_tokens each)
            segs = clip_segments(segments_of(row), length // int(trace.unit_tokens[row]))
            kinds = tuple(dict.fromkeys(s[0] for s in segs))
            label = label_for(kinds)
        pc = int(parent_cand[k])
        parent = None
        if pc >= 0:
            at = int(np.searchsorted(cands, pc, sorter=by_block))
            parent = int(rank_of[by_block[at]])
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
                last_seen=float(trace.times[int(last_rows[i])]),
                request_index=row,
                parent=parent,
                reusable_tokens=(int(tree.hits[b]) - 1) * length,
                marginal_tokens=int(marginal[k]),
                node_id=b,
                label=label,
                kinds=kinds,
                segments=segs,
            )
        )
    return Ranking(out, count, total_marginal)


def nearest_candidate_at_or_above(tree: BlockTree, is_cand: np.ndarray) -> np.ndarray:
    """For every block, the nearest candidate at or above it (-1 if none), one depth at a time."""
    parent = tree.trace.parent
    at_or_above = np.full(tree.n_blocks, -1, dtype=np.int32)
    for level in tree.levels():
        up = parent[level]
        inherited = np.where(up >= 0, at_or_above[np.maximum(up, 0)], -1)
        at_or_above[level] = np.where(is_cand[level], level, inherited)
    return at_or_above


def above(tree: BlockTree, at_or_above: np.ndarray, blocks: np.ndarray) -> np.ndarray:
    """The nearest candidate strictly above each of ``blocks`` (-1 if none)."""
    up = tree.trace.parent[blocks]
    return np.where(up >= 0, at_or_above[np.maximum(up, 0)], -1).astype(np.int64)


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
    at_or_above = nearest_candidate_at_or_above(tree, wanted)
    parent = tree.trace.parent

    def up_of(b: int) -> int:
        p = int(parent[b])
        return int(at_or_above[p]) if p >= 0 else -1

    seen: dict[int, set[str]] = {int(b): set() for b in ids.tolist()}
    capped: dict[int, bool] = dict.fromkeys(seen, False)
    end = trace.end_block
    for row in range(trace.n_requests):
        b = int(end[row])
        if b < 0:
            continue
        b = int(at_or_above[b])
        tenant = None
        while b >= 0:
            if tenant is None:
                tenant = tenant_of(row)
            s = seen[b]
            if len(s) < cap:
                s.add(tenant)
            elif tenant not in s:
                capped[b] = True
            b = up_of(b)
    return {b: (len(s), capped[b]) for b, s in seen.items()}
