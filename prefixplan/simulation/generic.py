"""A block-level cache simulator for any policy, pins, auto-promotion and TTL (the reference the
faster models are tested against; see :mod:`prefixplan.simulation.models` for the shared
semantics)."""

from __future__ import annotations

import heapq
import math
from collections import deque

import numpy as np

from prefixplan.errors import UsageError
from prefixplan.simulation.spec import POLICIES, AutoPromote, CacheOutcome, finish_times
from prefixplan.trace.blocks import BlockTrace
from prefixplan.trace.nodes import build_tree


class GenericCache:
    """Block-level simulator for any policy, pins, auto-promotion and TTL (no tiers).

    Cost is proportional to the blocks each request touches; use :class:`LRUStack` for LRU
    sweeps over large logs. ``service_s`` (per row; 0 when None) sets when each request stops
    using its blocks: a block's last-use time for the TTL is the latest finish of its users.
    """

    def __init__(
        self,
        trace: BlockTrace,
        policy: str,
        cap_blocks: float,
        *,
        ttl_s: float | None = None,
        pinned_blocks: list[int] | None = None,
        pinned_capacity: float = 0.0,
        auto_promote: AutoPromote | None = None,
        priorities: np.ndarray | None = None,
        prewarm_pins: bool = False,
        service_s: np.ndarray | None = None,
    ) -> None:
        if policy not in POLICIES:
            raise UsageError(f"unknown eviction policy {policy!r}", hint="use lru, lfu, fifo or priority")
        self.trace = trace
        self.policy = policy
        self.cap = cap_blocks
        self.ttl = ttl_s
        self.auto = auto_promote
        self.pin_cap = pinned_capacity
        self.priorities = priorities
        self.service_s = service_s
        d = trace.n_distinct_blocks
        self.cached = [False] * d
        self.kids = [0] * d
        self.last = [0] * d
        self.last_time = [-math.inf] * d  # last use: the latest finish of the requests that used it
        self.count = [0] * d
        self.ins = [0] * d
        self.prio = [0] * d
        self.ver = [0] * d
        self.fixed_pin = [False] * d
        self.pinned = [False] * d
        for b in pinned_blocks or ():
            self.fixed_pin[b] = True
        self.pinned_size = 0
        self.reg_size = 0
        self.heap: list[tuple] = []
        self.exp_heap: list[tuple[float, int, int]] = []
        self.evictions = 0
        self.hits_window: dict[int, deque[float]] = {}
        self.last_hit: dict[int, float] = {}
        self.auto_pinned: set[int] = set()
        self.cold_heap: list[tuple[float, int]] = []  # (last hit, block) of auto-pinned blocks; stale entries skipped
        if prewarm_pins:
            parent = trace.parent
            for b in sorted(pinned_blocks or ()):
                self.cached[b] = True
                self.pinned[b] = True
                self.pinned_size += 1
                p = int(parent[b])
                if p >= 0:
                    self.kids[p] += 1

    def _key(self, b: int) -> tuple:
        pol = self.policy
        if pol == "lru":
            return (self.last[b],)
        if pol == "lfu":
            return (self.count[b], self.last[b])
        if pol == "fifo":
            return (self.ins[b],)
        return (self.prio[b], self.last[b])

    def _push(self, b: int) -> None:
        heapq.heappush(self.heap, (self._key(b), -b, self.ver[b]))

    def _drop(self, b: int, parent: np.ndarray) -> None:
        self.cached[b] = False
        self.reg_size -= 1
        self.ver[b] += 1
        p = int(parent[b])
        if p >= 0:
            self.kids[p] -= 1
            if self.kids[p] == 0 and self.cached[p] and not self.pinned[p]:
                self._push(p)

    def _expire(self, now: float, parent: np.ndarray) -> None:
        limit = now - self.ttl  # type: ignore[operator]
        heap = self.exp_heap
        while heap and heap[0][0] < limit:
            t, _, b = heapq.heappop(heap)
            if self.cached[b] and not self.pinned[b] and self.last_time[b] == t and self.kids[b] == 0:
                self._drop(b, parent)

    def _demote(self, now: float) -> None:
        assert self.auto is not None
        limit = now - self.auto.cold_after_s
        heap = self.cold_heap
        cold = set()
        while heap and heap[0][0] < limit:
            t, b = heapq.heappop(heap)
            if b in self.auto_pinned and self.last_hit[b] == t:
                cold.add(b)
        for b in sorted(cold, reverse=True):  # children (larger ids) first
            self.pinned[b] = False
            self.auto_pinned.discard(b)
            self.pinned_size -= 1
            self.reg_size += 1
            self.ver[b] += 1
            if self.kids[b] == 0:
                self._push(b)
            if self.ttl is not None:
                heapq.heappush(self.exp_heap, (self.last_time[b], -b, b))

    def _promote(self, hit_path: list[int], now: float, parent: np.ndarray) -> None:
        assert self.auto is not None
        window = self.auto.window_s
        for b in hit_path:
            dq = self.hits_window.setdefault(b, deque())
            dq.append(now)
            while dq and dq[0] < now - window:
                dq.popleft()
            self.last_hit[b] = now
            if self.pinned[b]:
                heapq.heappush(self.cold_heap, (now, b))
        for b in hit_path:
            if self.pinned[b]:
                continue
            p = int(parent[b])
            if p >= 0 and not self.pinned[p]:
                break
            if len(self.hits_window[b]) < self.auto.min_hits or self.pinned_size + 1 > self.pin_cap:
                break
            self.pinned[b] = True
            self.auto_pinned.add(b)
            heapq.heappush(self.cold_heap, (now, b))
            self.pinned_size += 1
            self.reg_size -= 1
            self.ver[b] += 1

    def run(self) -> CacheOutcome:
        trace = self.trace
        parent = trace.parent
        times = trace.times.tolist()
        finish = finish_times(trace, self.service_s).tolist()
        caps = trace.cap_blocks.tolist()
        prios = self.priorities.tolist() if self.priorities is not None else None
        hits = np.zeros(trace.n_requests, dtype=np.int64)
        cached = self.cached
        ins, count, prio, last, last_time, vers = self.ins, self.count, self.prio, self.last, self.last_time, self.ver
        fixed_pin, kids = self.fixed_pin, self.kids
        parent_l = parent.tolist()
        tree = build_tree(trace)  # paths as runs of consecutive block ids
        fb, wt, npar, req_node = (
            tree.first_block.tolist(),
            tree.weight.tolist(),
            tree.node_parent.tolist(),
            tree.req_node.tolist(),
        )
        for r in range(trace.n_requests):
            now = times[r]
            if self.auto is not None:
                self._demote(now)
            if self.ttl is not None:
                self._expire(now, parent)
            nodes = []
            v = req_node[r]
            while v >= 0:
                nodes.append(v)
                v = npar[v]
            path: list[int] = []
            for v in reversed(nodes):
                path.extend(range(fb[v], fb[v] + wt[v]))
            m = len(path)
            present = 0
            while present < m and cached[path[present]]:
                present += 1
            hit = min(present, caps[r])
            hits[r] = hit
            if self.auto is not None and hit:
                self._promote(path[:hit], now, parent)
            new_reg = sum(1 for b in path[present:] if not self.fixed_pin[b])
            on_path = set(path)
            stash = []
            while self.reg_size + new_reg > self.cap and self.heap:
                key, nb, ver = heapq.heappop(self.heap)
                b = -nb
                if ver != self.ver[b] or not cached[b] or self.pinned[b] or self.kids[b]:
                    continue
                if b in on_path:
                    stash.append((key, nb, ver))
                    continue
                self._drop(b, parent)
                self.evictions += 1
            for item in stash:
                heapq.heappush(self.heap, item)
            p_r = prios[r] if prios is not None else 0
            for b in path[present:]:  # insert the missing blocks (their parents are cached)
                cached[b] = True
                ins[b] = r
                count[b] = 0
                prio[b] = p_r
                if fixed_pin[b]:
                    self.pinned[b] = True
                    self.pinned_size += 1
                else:
                    self.reg_size += 1
                p = parent_l[b]
                if p >= 0:
                    kids[p] += 1
            f = finish[r]
            for b in path:
                last[b] = r
                if f > last_time[b]:
                    last_time[b] = f
                    if self.ttl is not None:
                        heapq.heappush(self.exp_heap, (f, -b, b))
                count[b] += 1
                if p_r > prio[b]:
                    prio[b] = p_r
                vers[b] += 1
            if m:
                leaf = path[-1]
                if self.kids[leaf] == 0 and not self.pinned[leaf]:
                    self._push(leaf)
            while self.reg_size > self.cap and self.heap:  # an over-long request gives back its excess
                key, nb, ver = heapq.heappop(self.heap)
                b = -nb
                if ver != self.ver[b] or not cached[b] or self.pinned[b] or self.kids[b]:
                    continue
                self._drop(b, parent)
                self.evictions += 1
        return CacheOutcome(hits, {}, self.evictions, self.pinned_size)
