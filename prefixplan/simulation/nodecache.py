"""A chain-compressed cache simulator (LRU/LFU/FIFO/priority, fixed pins, TTL): the block-level
replay, node by node (see :mod:`prefixplan.simulation.models` for the shared semantics)."""

from __future__ import annotations

import heapq
import math

import numpy as np

from prefixplan.errors import UsageError
from prefixplan.simulation.spec import POLICIES, CacheOutcome, finish_times
from prefixplan.trace.blocks import BlockTrace
from prefixplan.trace.nodes import NodeTree, build_tree


class NodeCache:
    """Chain-compressed simulator for LRU/LFU/FIFO/priority with fixed pins and TTL (no
    auto-promotion, no tiers); exactly :class:`GenericCache`'s replay, node by node.

    Every request touches whole nodes of the compressed tree (see
    :mod:`prefixplan.trace.nodes`), so all blocks of a node share their last use, and the
    blocks one request inserted into a node (a *segment*) also share their insertion time,
    use count and priority: they have equal policy keys. The cached part of a node is a run
    of its top blocks (the cache is prefix-closed); only its deepest block can be a leaf.
    Evicting the deepest block of a segment makes the next one the smallest key in the heap
    (equal key, the next smaller block id, and no other block id lies between), so a whole
    segment (or the part still needed) is evicted in one step. Cost: path nodes and
    segments per request instead of blocks.

    ``service_s`` (per row; 0 when None) sets when each request stops using its blocks: a
    node's last-use time for the TTL is the latest finish of the requests that used it.
    """

    def __init__(
        self,
        trace: BlockTrace,
        policy: str,
        cap_blocks: float,
        *,
        ttl_s: float | None = None,
        pinned_blocks: list[int] | None = None,
        priorities: np.ndarray | None = None,
        prewarm_pins: bool = False,
        tree: NodeTree | None = None,
        service_s: np.ndarray | None = None,
    ) -> None:
        if policy not in POLICIES:
            raise UsageError(f"unknown eviction policy {policy!r}", hint="use lru, lfu, fifo or priority")
        pins = list(pinned_blocks or ())
        self.trace = trace
        self.policy = policy
        self.cap = cap_blocks
        self.ttl = ttl_s
        self.priorities = priorities
        self.tree = tree if tree is not None and not pins else build_tree(trace, extra_ends=pins)
        n = self.tree.n_nodes
        self.pinned = [False] * n
        for v in set(self.tree.nodes_of(np.asarray(pins, dtype=np.int64)).tolist()) if pins else ():
            self.pinned[v] = True
        self.prewarm = prewarm_pins
        self.service_s = service_s

    def run(self) -> CacheOutcome:
        trace, tree = self.trace, self.tree
        n = tree.n_nodes
        fb = tree.first_block.tolist()
        w = tree.weight.tolist()
        npar = tree.node_parent.tolist()
        req_node = tree.req_node.tolist()
        pinned = self.pinned
        times = trace.times.tolist()
        finish = finish_times(trace, self.service_s).tolist()
        caps = trace.cap_blocks.tolist()
        prios = self.priorities.tolist() if self.priorities is not None else None
        pol = {"lru": 0, "lfu": 1, "fifo": 2, "priority": 3}[self.policy]
        ttl = self.ttl
        cap = self.cap
        c = [0] * n  # cached top blocks of each node
        kids = [0] * n  # child nodes with cached blocks
        last = [0] * n
        ltime = [-math.inf] * n  # last use: the latest finish of the requests that used the node
        ver = [0] * n
        segs: list[list[list]] = [[] for _ in range(n)]  # [start offset, ins request, uses, max priority]
        heap: list[tuple] = []
        exp: list[tuple[float, int, int]] = []
        push, pop = heapq.heappush, heapq.heappop
        reg_size = 0
        pinned_size = 0
        evictions = 0
        hits = np.zeros(trace.n_requests, dtype=np.int64)
        hits_l = [0] * trace.n_requests
        if self.prewarm:
            for v in range(n):
                if pinned[v]:
                    c[v] = w[v]
                    segs[v].append([0, -1, 0, 0])
                    pinned_size += w[v]
                    if npar[v] >= 0:
                        kids[npar[v]] += 1

        def key(v: int) -> tuple:
            s = segs[v][-1]
            if pol == 0:
                return (last[v],)
            if pol == 1:
                return (s[2], last[v])
            if pol == 2:
                return (s[1],)
            return (s[3], last[v])

        def evict(v: int, need: int) -> int:
            """Drop up to ``need`` blocks from the tail segment of leaf node ``v``."""
            nonlocal reg_size
            seg = segs[v]
            s = seg[-1]
            size = c[v] - s[0]
            k = min(size, need)
            c[v] -= k
            reg_size -= k
            if k == size:
                seg.pop()
            ver[v] += 1
            if c[v]:
                push(heap, (key(v), -(fb[v] + c[v] - 1), ver[v], v))
            else:
                p = npar[v]
                if p >= 0:
                    kids[p] -= 1
                    if kids[p] == 0 and c[p] and not pinned[p]:
                        push(heap, (key(p), -(fb[p] + c[p] - 1), ver[p], p))
            return k

        def valid(v: int, vv: int) -> bool:
            return vv == ver[v] and c[v] > 0 and not pinned[v] and (kids[v] == 0 or c[v] < w[v])

        for r, end in enumerate(req_node):
            now = times[r]
            if ttl is not None:
                limit = now - ttl
                while exp and exp[0][0] < limit:
                    t, _, v = pop(exp)
                    if c[v] and not pinned[v] and ltime[v] == t and kids[v] == 0:
                        evict_all = c[v]
                        c[v] = 0
                        reg_size -= evict_all
                        segs[v].clear()
                        ver[v] += 1
                        p = npar[v]
                        if p >= 0:
                            kids[p] -= 1
                            if kids[p] == 0 and c[p] and not pinned[p]:
                                push(heap, (key(p), -(fb[p] + c[p] - 1), ver[p], p))
            if end < 0:
                continue
            path = []
            v = end
            while v >= 0:
                path.append(v)
                v = npar[v]
            path.reverse()
            present = 0
            new_reg = 0
            full = True
            for v in path:
                if full:
                    cv = c[v]
                    present += cv
                    if cv < w[v]:
                        full = False
                        if not pinned[v]:
                            new_reg += w[v] - cv
                elif not pinned[v]:
                    new_reg += w[v]
            hit = min(caps[r], present)
            hits_l[r] = hit
            over = reg_size + new_reg - cap
            if over > 0 and heap:
                on_path = set(path)
                stash = []
                while reg_size + new_reg > cap and heap:
                    item = pop(heap)
                    v = item[3]
                    if not valid(v, item[2]):
                        continue
                    if v in on_path:
                        stash.append(item)
                        continue
                    evictions += evict(v, int(reg_size + new_reg - cap))
                for item in stash:
                    push(heap, item)
            p_r = prios[r] if prios is not None else 0
            f = finish[r]
            prev = -1
            for v in path:
                cv = c[v]
                wv = w[v]
                if cv < wv:
                    segs[v].append([cv, r, 0, p_r])
                    if cv == 0 and prev >= 0:
                        kids[prev] += 1
                    if pinned[v]:
                        pinned_size += wv - cv
                    else:
                        reg_size += wv - cv
                    c[v] = wv
                last[v] = r
                if f > ltime[v]:
                    ltime[v] = f
                    if ttl is not None and not pinned[v]:
                        push(exp, (f, -fb[v], v))
                for s in segs[v]:
                    s[2] += 1
                    s[3] = max(s[3], p_r)
                ver[v] += 1
                prev = v
            if kids[end] == 0 and not pinned[end]:
                push(heap, (key(end), -(fb[end] + w[end] - 1), ver[end], end))
            while reg_size > cap and heap:  # an over-long request gives back its excess
                item = pop(heap)
                v = item[3]
                if not valid(v, item[2]):
                    continue
                evictions += evict(v, int(reg_size - cap))
        hits[:] = hits_l
        return CacheOutcome(hits, {}, evictions, pinned_size)
