"""Shared prefixes counted on the block trace: the candidate rule of docs/radix.md on block ids.

A block of the :class:`~prefixplan.trace.blocks.BlockTrace` stands for one block-aligned prefix
of one namespace, so the block trace *is* the radix tree at the cache granularity: a block's
``hits`` are the requests whose path passes through it, its children are the blocks one deeper
that extend it. Counting on blocks instead of tokens gives the same candidates (every
candidate's length is block-aligned anyway: docs/radix.md), with no Python object per block,
and from a trace file as well as from a log. The counts are kept per node of the compressed
trie (a run of blocks always passed through together), not per block: a million-request log
has tens of millions of distinct blocks but a few million nodes.

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
from prefixplan.trace.nodes import build_tree

ROW_WINDOW = 1 << 18
"""Requests walked up the tree at a time (the latest arrival, the tenants of shown candidates):
their temporaries stay a few MB however long the log."""
DEFAULT_TENANT_CAP = 1024
"""Distinct tenants counted per candidate; beyond it a candidate reports "at least" this many."""


class BlockTree:
    """Per-node counts of a block trace (module docstring).

    Counting runs on the compressed trie (:func:`~prefixplan.trace.nodes.build_tree`): the
    blocks of a node are always passed through by the same requests, so they share ``hits``,
    and only a node's deepest block can be a branch or end point. Every array is per node
    (a few per request), none per block: ``hits`` and ``depth`` (of the node's deepest
    block) as int64, ``branch`` (no child node has all the node's hits) as bool, ``by_depth``
    (node ids by depth) as int32."""

    def __init__(self, trace: BlockTrace) -> None:
        self.trace = trace
        self.nodes = nodes = build_tree(trace)
        n = nodes.n_nodes
        parent = nodes.node_parent
        # a node's deepest block: where a candidate is (the others have a child with all its hits)
        self.last_block = nodes.first_block + nodes.weight - 1
        self.depth = trace.depths_of(self.last_block)
        hits = np.bincount(nodes.req_node[nodes.req_node >= 0], minlength=n)
        # node ids by depth (shallowest first), and where each depth starts
        self.by_depth = stable_order(self.depth)
        self.level_starts = np.flatnonzero(np.diff(self.depth[self.by_depth])) + 1
        # one depth at a time, deepest first: children pass their counts to their parents
        for level in reversed(self.levels()):
            up = parent[level]
            keep = up >= 0
            if not keep.any():
                continue
            np.add.at(hits, up[keep], hits[level[keep]])
        # a branch or end point: no child has all of the node's hits (a child never has more)
        full_child = np.zeros(n, dtype=bool)
        has = parent >= 0
        up = parent[has]
        full_child[up[hits[has] == hits[up]]] = True
        self.branch = np.logical_not(full_child, out=full_child)
        self.hits = hits
        self.block_tokens: np.ndarray | int = self._block_tokens()

    def _block_tokens(self) -> np.ndarray | int:
        """Real tokens per block of each node (its first arrival's block size), or that size
        when every request has the same."""
        t = self.trace
        if not t.n_requests:
            return 1
        lo, hi = int(t.block_tokens.min()), int(t.block_tokens.max())
        if lo == hi:
            return lo
        return t.block_tokens[t.first_rows(self.last_block)]

    def levels(self) -> list[np.ndarray]:
        """Node ids of each depth, shallowest first (views of ``by_depth``)."""
        return np.split(self.by_depth, self.level_starts) if self.by_depth.shape[0] else []

    def long_enough(self, min_tokens: int) -> np.ndarray:
        """Per node: is its prefix at least ``min_tokens`` long."""
        bt = self.block_tokens
        if isinstance(bt, int):
            return self.depth >= -(-int(min_tokens) // max(1, bt))
        return self.lengths() >= min_tokens

    @property
    def n_blocks(self) -> int:
        return self.trace.n_distinct_blocks

    @property
    def n_nodes(self) -> int:
        return self.nodes.n_nodes

    def lengths(self, nodes: np.ndarray | None = None) -> np.ndarray:
        """Prefix length in real tokens of ``nodes`` (default: every node)."""
        bt = self.block_tokens
        if nodes is None:
            return self.depth * bt
        return self.depth[nodes] * (bt if isinstance(bt, int) else bt[nodes])

    def arena_tokens(self) -> int:
        """Real tokens of all distinct blocks together."""
        bt = self.block_tokens
        if isinstance(bt, int):
            return self.n_blocks * bt
        t = self.trace
        return int((t.brought() * t.block_tokens).sum())

    def last_rows(self, blocks: np.ndarray) -> np.ndarray:
        """The latest arrival (row) through each of ``blocks``: each request walks up through
        the nodes of the given blocks above its deepest one, all requests a step at a time
        (rows are arrivals, so the largest row is the latest)."""
        blocks = np.asarray(blocks, dtype=np.int64)
        if not blocks.shape[0]:
            return np.full(0, -1, dtype=np.int64)
        of = self.nodes.nodes_of(blocks)
        wanted = np.zeros(self.n_nodes, dtype=bool)
        wanted[of] = True
        at = nearest_candidate_at_or_above(self, wanted)
        del wanted
        last = np.full(self.n_nodes, -1, dtype=np.int64)
        req_node = self.nodes.req_node
        parent = self.nodes.node_parent
        for lo in range(0, req_node.shape[0], ROW_WINDOW):  # a window of requests at a time
            ends = req_node[lo : lo + ROW_WINDOW]
            rows = np.flatnonzero(ends >= 0)
            cur = at[ends[rows]].astype(np.int64)
            rows += lo
            while rows.shape[0]:
                keep = cur >= 0
                rows, cur = rows[keep], cur[keep]
                if not rows.shape[0]:
                    break
                np.maximum.at(last, cur, rows)
                up = parent[cur]
                cur = np.where(up >= 0, at[np.maximum(up, 0)], -1).astype(np.int64)
        return last[of]

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
    cands = np.flatnonzero(is_cand)  # node ids, ascending
    del is_cand
    parent_cand = above(tree, at_or_above, cands)
    del at_or_above
    blocks = tree.last_block[cands]  # a candidate is its node's deepest block
    clen = tree.lengths(cands)
    l_parent = np.zeros(cands.shape[0], dtype=np.int64)
    has_up = parent_cand >= 0
    l_parent[has_up] = tree.lengths(parent_cand[has_up])
    marginal = (tree.hits[cands] - 1) * (clen - l_parent)
    first_row = trace.first_rows(blocks)
    first_seen = trace.times[first_row]
    order = np.lexsort((blocks, first_seen, -clen, -marginal))
    total_marginal = int(marginal.sum())
    count = int(cands.shape[0])
    shown = order if limit is None else order[: max(0, int(limit))]
    rank_of = np.empty(count, dtype=np.int64)
    rank_of[order] = np.arange(count)
    last_rows = tree.last_rows(blocks[shown])
    out: list[Candidate] = []
    for i, k in enumerate(shown.tolist()):
        b = int(blocks[k])
        hits = int(tree.hits[cands[k]])
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
            parent = int(rank_of[int(np.searchsorted(cands, pc))])
        out.append(
            Candidate(
                id=i,
                namespace=tree.namespace(b),
                length=length,
                raw_length=length,
                hits=hits,
                tenants=0,
                tenants_capped=False,
                first_seen=float(trace.times[row]),
                last_seen=float(trace.times[int(last_rows[i])]),
                request_index=row,
                parent=parent,
                reusable_tokens=(hits - 1) * length,
                marginal_tokens=int(marginal[k]),
                node_id=b,
                label=label,
                kinds=kinds,
                segments=segs,
            )
        )
    return Ranking(out, count, total_marginal)


def nearest_candidate_at_or_above(tree: BlockTree, is_cand: np.ndarray) -> np.ndarray:
    """For every node, the nearest candidate node at or above it (-1 if none), one depth at a
    time."""
    parent = tree.nodes.node_parent
    at_or_above = np.full(tree.n_nodes, -1, dtype=np.int32)
    for level in tree.levels():
        up = parent[level]
        inherited = np.where(up >= 0, at_or_above[np.maximum(up, 0)], -1)
        at_or_above[level] = np.where(is_cand[level], level, inherited)
    return at_or_above


def above(tree: BlockTree, at_or_above: np.ndarray, nodes: np.ndarray) -> np.ndarray:
    """The nearest candidate node strictly above each of ``nodes`` (-1 if none)."""
    up = tree.nodes.node_parent[nodes]
    return np.where(up >= 0, at_or_above[np.maximum(up, 0)], -1).astype(np.int64)


def count_tenants(
    tree: BlockTree,
    shown: Sequence[Candidate],
    tenants: np.ndarray,
    cap: int = DEFAULT_TENANT_CAP,
) -> dict[int, tuple[int, bool]]:
    """Distinct tenants of the requests through each shown candidate: ``{node_id: (count, capped)}``,
    the count at most ``cap`` (``capped`` when there were more).

    ``tenants``: per row (replay order) a 64-bit tenant identity, 0 for an anonymous request
    (each counts as its own tenant). Each request walks up from its deepest node through the
    shown candidates above it, a window of requests and one candidate level at a time, and the
    distinct (candidate, tenant) pairs are counted by sorting."""
    ids = np.asarray([c.node_id for c in shown], dtype=np.int64)
    if not ids.shape[0]:
        return {}
    of = tree.nodes.nodes_of(ids)
    wanted = np.zeros(tree.n_nodes, dtype=bool)
    wanted[of] = True
    at_or_above = nearest_candidate_at_or_above(tree, wanted)
    del wanted
    req_node = tree.nodes.req_node
    pairs: list[np.ndarray] = []  # (candidate node, anonymous, tenant or row), distinct per window
    for lo in range(0, req_node.shape[0], ROW_WINDOW):
        ends = req_node[lo : lo + ROW_WINDOW]
        cur = np.where(ends >= 0, at_or_above[np.maximum(ends, 0)], -1).astype(np.int64)
        rows = np.flatnonzero(cur >= 0)  # requests through a shown candidate
        cur = cur[rows]
        t = np.asarray(tenants[lo : lo + ROW_WINDOW], dtype=np.uint64)[rows]
        anon = t == 0
        who = np.where(anon, (rows + lo).astype(np.uint64), t)
        while cur.shape[0]:
            pairs.append(_distinct_rows(np.stack([cur.astype(np.uint64), anon.astype(np.uint64), who])))
            cur = above(tree, at_or_above, cur)
            keep = cur >= 0
            cur, anon, who = cur[keep], anon[keep], who[keep]
    both = _distinct_rows(np.concatenate(pairs, axis=1)) if pairs else np.zeros((3, 0), dtype=np.uint64)
    nodes, counts = np.unique(both[0].astype(np.int64), return_counts=True)
    found = dict(zip(nodes.tolist(), counts.tolist(), strict=True))
    return {
        b: (min(found.get(v, 0), cap), found.get(v, 0) > cap) for b, v in zip(ids.tolist(), of.tolist(), strict=True)
    }


def _distinct_rows(cols: np.ndarray) -> np.ndarray:
    """The distinct columns of a ``(3, n)`` array (as triples), sorted."""
    if not cols.shape[1]:
        return cols
    order = np.lexsort(cols[::-1])
    cols = cols[:, order]
    new = np.ones(cols.shape[1], dtype=bool)
    new[1:] = np.any(cols[:, 1:] != cols[:, :-1], axis=0)
    return cols[:, new]
