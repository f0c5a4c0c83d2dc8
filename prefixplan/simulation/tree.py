"""Compressed view of the block trie: chains of blocks that are always touched together.

A block and its only child belong to the same node unless a request (or a pin) ends at the
block. Every request's path is then a root-to-node chain of whole nodes, so cache models
that treat a node's blocks alike (LRU stack distances, in-batch sharing) work on a handful
of nodes per request instead of hundreds of blocks. Block ids inside a node are consecutive.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from prefixplan.simulation.trace import BlockTrace


@dataclass(slots=True)
class NodeTree:
    """Compressed trie over a :class:`BlockTrace`.

    Attributes:
        node_of_block: node id of each block id.
        first_block: first (shallowest) block id of each node.
        weight: blocks per node.
        node_parent: parent node id (-1 at a namespace root).
        req_node: deepest node of each request (-1 when it has no full block).
    """

    node_of_block: np.ndarray
    first_block: np.ndarray
    weight: np.ndarray
    node_parent: np.ndarray
    req_node: np.ndarray

    @property
    def n_nodes(self) -> int:
        return int(self.weight.shape[0])

    def path(self, r: int) -> list[int]:
        """Node ids of request ``r``, root first."""
        out: list[int] = []
        v = int(self.req_node[r])
        while v >= 0:
            out.append(v)
            v = int(self.node_parent[v])
        out.reverse()
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
    (so a pinned prefix of 100 blocks is one node, not 100)."""
    parent = trace.parent
    d = parent.shape[0]
    if d == 0:
        empty = np.zeros(0, dtype=np.int64)
        return NodeTree(empty, empty, empty, empty, np.full(trace.n_requests, -1, dtype=np.int64))
    has_parent = parent >= 0
    nchild = np.bincount(parent[has_parent], minlength=d)
    is_end = np.zeros(d, dtype=bool)
    ends = trace.end_block[trace.end_block >= 0]
    is_end[ends] = True
    extra = np.asarray(list(extra_ends), dtype=np.int64)
    safe_parent = np.where(has_parent, parent, 0)
    start = ~has_parent | (nchild[safe_parent] != 1) | is_end[safe_parent]
    if extra.size:
        member = np.zeros(d, dtype=bool)
        member[extra] = True
        start |= member != member[safe_parent]
    ids = np.arange(d, dtype=np.int64)
    head = np.where(start, ids, parent)
    while True:
        nxt = head[head]
        if np.array_equal(nxt, head):
            break
        head = nxt
    rank = np.cumsum(start) - 1
    node_of_block = rank[head]
    first_block = np.flatnonzero(start).astype(np.int64)
    weight = np.bincount(node_of_block, minlength=first_block.shape[0]).astype(np.int64)
    pf = parent[first_block]
    node_parent = np.where(pf >= 0, node_of_block[np.where(pf >= 0, pf, 0)], -1).astype(np.int64)
    req_node = np.where(trace.end_block >= 0, node_of_block[np.where(trace.end_block >= 0, trace.end_block, 0)], -1)
    return NodeTree(node_of_block, first_block, weight, node_parent, req_node.astype(np.int64))
