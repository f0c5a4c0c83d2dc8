"""Compressed view of the block trie: chains of blocks that are always touched together.

A block and its only child belong to the same node unless a request (or a pin) ends at the
block. Every request's path is then a root-to-node chain of whole nodes, so cache models
that treat a node's blocks alike (LRU stack distances, in-batch sharing) work on a handful
of nodes per request instead of hundreds of blocks. Block ids inside a node are consecutive.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np

from prefixplan.trace.blockids import runs_of
from prefixplan.trace.blocks import BlockTrace
from prefixplan.trace.storage.mapped import GATHER_WINDOW, drop_resident, mapped_empty


@dataclass(slots=True)
class NodeTree:
    """Compressed trie over a :class:`BlockTrace`.

    Attributes:
        first_block: first (shallowest) block id of each node.
        weight: blocks per node.
        node_parent: parent node id (-1 at a namespace root).
        req_node: deepest node of each request (-1 when it has no full block).
    """

    first_block: np.ndarray
    weight: np.ndarray
    node_parent: np.ndarray
    req_node: np.ndarray

    @property
    def n_nodes(self) -> int:
        return int(self.weight.shape[0])

    def nodes_of(self, blocks: np.ndarray) -> np.ndarray:
        """Node id of each of ``blocks`` (a node is a run of consecutive ids from its first
        block: a binary search, no node id kept per block)."""
        return runs_of(self.first_block, blocks)

    @property
    def node_of_block(self) -> np.ndarray:
        """:meth:`nodes_of` every block id (8 bytes per block: for small trees and tests)."""
        n = int(self.first_block[-1] + self.weight[-1]) if self.first_block.shape[0] else 0
        return self.nodes_of(np.arange(n, dtype=np.int64))

    def path(self, r: int) -> list[int]:
        """Node ids of request ``r``, root first."""
        out: list[int] = []
        v = int(self.req_node[r])
        while v >= 0:
            out.append(v)
            v = int(self.node_parent[v])
        out.reverse()
        return out

    def depths(self) -> np.ndarray:
        """Nodes on each node's path to its root, itself included, by pointer jumping: each
        round adds the depth gathered at a node's current ancestor and jumps to that ancestor's,
        so a path of d nodes takes about log2(d) numpy rounds and no Python value per node."""
        depth = np.ones(self.n_nodes, dtype=np.int64)  # nodes from v up to, not including, up[v]
        up = self.node_parent.astype(np.int64, copy=True)
        live = np.flatnonzero(up >= 0)
        while live.shape[0]:
            at = up[live]
            depth[live] += depth[at]  # both right-hand sides read before either write
            up[live] = up[at]
            live = live[up[live] >= 0]
        return depth

    def path_lengths(self, out: np.ndarray | None = None) -> np.ndarray:
        """Nodes on each request's path (0 where it has no full block), as int64, into ``out``
        when given (zeros, one per request)."""
        ends = self.req_node
        lengths = out if out is not None else np.zeros(ends.shape[0], dtype=np.int64)
        if self.n_nodes:
            has = ends >= 0
            lengths[has] = self.depths()[ends[has]]
        return lengths

    def paths(self, ends: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """Each of ``ends``' path to its root, deepest node first, one path after another
        (``lengths``: nodes on each path, :meth:`depths` of its end, 0 where the end is -1), as
        int32, walked one numpy step per level."""
        out = np.empty(int(lengths.sum()), dtype=np.int32)
        has = lengths > 0
        pos = (np.cumsum(lengths) - lengths)[has]
        cur = ends[has]
        while cur.shape[0]:
            out[pos] = cur
            cur = self.node_parent[cur]
            keep = cur >= 0
            cur = cur[keep]
            pos = pos[keep] + 1
        return out

    def dfs_intervals(self) -> tuple[np.ndarray, np.ndarray]:
        """(tin, tout) per node: ``u`` is an ancestor-or-self of ``v`` iff tin[u] <= tin[v] < tout[u]."""
        n = self.n_nodes
        parent = self.node_parent
        children: list[list[int]] = [[] for _ in range(n)]
        for v, p in enumerate(parent.tolist()):
            if p >= 0:
                children[p].append(v)
        tin = np.zeros(n, dtype=np.int64)
        tout = np.zeros(n, dtype=np.int64)
        clock = 0
        for root in np.flatnonzero(parent < 0).tolist():
            stack = [(root, False)]
            while stack:
                v, done = stack.pop()
                if done:
                    tout[v] = clock
                    continue
                tin[v] = clock
                clock += 1
                stack.append((v, True))
                stack.extend((c, False) for c in reversed(children[v]))
        return tin, tout


def build_tree(trace: BlockTrace, extra_ends: Iterable[int] = ()) -> NodeTree:
    """Compress ``trace``'s block trie; ``extra_ends`` (block ids, e.g. pinned ones) never share a
    node with other blocks: a node starts where membership changes between a block and its parent
    (so a pinned prefix of 100 blocks is one node, not 100).

    A block continues its parent's node when it is the parent's only child and the parent is no
    request's end. The blocks a row brought are a path of consecutive ids whose last one is that
    row's end (:mod:`prefixplan.trace.blocks`), so a node starts only at a row's first block,
    right after a request's end, right after a block another row attached to, or where
    membership changes: the node starts are found from per-row ids and the extra ends alone,
    with nothing kept per block, and a block's node is the number of node starts at or before
    it, less one.
    """
    d = trace.n_distinct_blocks
    if d == 0:
        empty = np.zeros(0, dtype=np.int64)
        return NodeTree(empty, empty, empty, np.full(trace.n_requests, -1, dtype=np.int64))
    end = trace.end_block
    attach = trace.attach
    member = np.unique(np.asarray(list(extra_ends), dtype=np.int64))
    # where membership changes along a run: a member after a non-member, or the reverse
    after = np.setdiff1d(member + 1, member)
    changes = np.concatenate((np.setdiff1d(member, member + 1), after[after < d]))

    def starts() -> Iterator[np.ndarray]:
        """Node starts, one kind at a time (repeats and ids >= d included)."""
        yield trace.block_start[trace.brought() > 0]  # a row's first block: its parent is a branch or an end
        yield end[end >= 0] + 1  # after a request's end
        yield attach[attach >= 0] + 1  # after a block with another child
        yield changes

    most = trace.block_start.shape[0] + end.shape[0] + attach.shape[0] + changes.shape[0]
    first_block = _sorted_unique_below(d, starts(), most)
    weight = np.diff(np.append(first_block, d)).astype(np.int64)
    node_parent = runs_of(first_block, trace.parents_of(first_block))  # -1 stays -1: ids start at 0
    req_node = mapped_empty(end.shape[0], np.int64)  # per request: file-backed (trace.storage.mapped)
    for lo in range(0, end.shape[0], GATHER_WINDOW):
        req_node[lo : lo + GATHER_WINDOW] = runs_of(first_block, end[lo : lo + GATHER_WINDOW])
    drop_resident(req_node, end)
    return NodeTree(first_block, weight, node_parent, req_node)


def _sorted_unique_below(limit: int, parts: Iterator[np.ndarray], most: int) -> np.ndarray:
    """The distinct values below ``limit`` of the arrays ``parts`` yields (``most`` values at most
    in all), sorted: each part is copied into one buffer as it comes, which is sorted and
    deduplicated in place, so the only temporaries are one part and the buffer (``np.unique`` of
    their concatenation would hold them all plus a sorted copy: ~40 MB more at a million
    requests). The buffer is sized for ``most``; pages past what the parts fill are never
    touched (large allocations are mapped: :func:`prefixplan.core.memory.map_large_allocations`)."""
    buf = np.empty(most, dtype=np.int64)
    at = 0
    for part in parts:
        buf[at : at + part.shape[0]] = part
        at += part.shape[0]
    buf = buf[:at]
    buf.sort()
    buf = buf[: int(np.searchsorted(buf, limit, side="left"))]
    if not buf.shape[0]:
        return buf.copy()
    keep = np.empty(buf.shape[0], dtype=bool)
    keep[0] = True
    np.not_equal(buf[1:], buf[:-1], out=keep[1:])
    return buf[keep]
