"""LRU by stack distances on the compressed tree: one pass evaluates every capacity, tier split and TTL
(see :mod:`prefixplan.simulation.models` for the shared semantics)."""

from __future__ import annotations

import math

import numpy as np

from prefixplan.simulation.trace import BlockTrace
from prefixplan.simulation.tree import NodeTree


class LRUStack:
    """LRU stack distances of every (request, node) touch; evaluates any capacity."""

    def __init__(self, trace: BlockTrace, tree: NodeTree, pinned_nodes: np.ndarray | None = None) -> None:
        self.trace = trace
        self.tree = tree
        n = tree.n_nodes
        pinned = pinned_nodes if pinned_nodes is not None else np.zeros(n, dtype=bool)
        node_parent = tree.node_parent.tolist()
        weight = tree.weight.tolist()
        is_pin = pinned.tolist()
        req_node = tree.req_node.tolist()
        times = trace.times.tolist()
        depth = [0] * n
        for v in range(n):  # parents have smaller ids
            p = node_parent[v]
            depth[v] = depth[p] + 1 if p >= 0 else 1
        total_touch = sum(depth[v] for v in req_node if v >= 0)
        size = total_touch + 1
        fen = [0] * (size + 1)
        last_ts = [0] * n
        last_time = [0.0] * n
        t_req = np.zeros(total_touch, dtype=np.int64)
        t_node = np.zeros(total_touch, dtype=np.int64)
        t_above = np.zeros(total_touch, dtype=np.float64)
        t_age = np.zeros(total_touch, dtype=np.float64)
        m_reg = np.zeros(trace.n_requests, dtype=np.int64)
        inf = math.inf
        total = 0
        ts = 0
        k = 0
        for r, end in enumerate(req_node):
            if end < 0:
                continue
            now = times[r]
            path = []
            v = end
            while v >= 0:
                path.append(v)
                v = node_parent[v]
            reg = 0
            for v in path:
                t_req[k] = r
                t_node[k] = v
                o = last_ts[v]
                if is_pin[v]:
                    t_above[k] = -1.0 if o else inf  # -1: pinned and resident
                    t_age[k] = 0.0
                elif o:
                    s = 0
                    i = o
                    while i:
                        s += fen[i]
                        i &= i - 1
                    t_above[k] = total - s
                    t_age[k] = now - last_time[v]
                    reg += weight[v]
                else:
                    t_above[k] = inf
                    t_age[k] = inf
                    reg += weight[v]
                k += 1
            m_reg[r] = reg
            for v in path:
                o = last_ts[v]
                w = weight[v]
                if is_pin[v]:
                    last_ts[v] = 1
                    continue
                if o:
                    i = o
                    while i <= size:
                        fen[i] -= w
                        i += i & -i
                else:
                    total += w
                ts += 1
                i = ts
                while i <= size:
                    fen[i] += w
                    i += i & -i
                last_ts[v] = ts
                last_time[v] = now
        self.t_req = t_req[:k]
        self.t_node = t_node[:k]
        self.t_above = t_above[:k]
        self.t_age = t_age[:k]
        self.t_w = tree.weight[self.t_node]
        self.t_pin = pinned[self.t_node]
        self.m_reg = m_reg
        self.distinct_regular = total

    def evaluate(
        self,
        cap_blocks: float,
        tier_blocks: tuple[float, ...] = (),
        ttl_s: float | None = None,
        prewarm_pins: bool = False,
    ) -> tuple[np.ndarray, list[np.ndarray], int]:
        """Present blocks per request (uncapped): (total, per tier incl. GPU first, evictions)."""
        nreq = self.trace.n_requests
        ceff = np.full(self.t_req.shape[0], float(cap_blocks))
        w = self.t_w.astype(np.float64)
        above = self.t_above
        alive = np.ones(above.shape[0], dtype=bool)
        if ttl_s is not None:
            alive = self.t_age <= ttl_s
        pin_present = np.where(self.t_pin, w if prewarm_pins else np.where(above < 0, w, 0.0), 0.0)
        bounds = [ceff]
        acc = ceff
        for extra in tier_blocks:
            acc = acc + extra
            bounds.append(acc)
        per_tier: list[np.ndarray] = []
        prev_present = np.zeros(nreq, dtype=np.int64)
        for j, bound in enumerate(bounds):
            with np.errstate(invalid="ignore"):
                present = np.where(self.t_pin | np.isinf(above), 0.0, np.clip(bound - above, 0.0, w))
            present = np.where(alive, present, 0.0)
            if j == 0:
                present = present + pin_present
            cum = np.bincount(self.t_req, weights=present, minlength=nreq).astype(np.int64)
            per_tier.append(cum - prev_present)
            prev_present = cum
        gpu_reg = per_tier[0] - np.bincount(self.t_req, weights=pin_present, minlength=nreq).astype(np.int64)
        inserted = int((self.m_reg - gpu_reg).sum())
        final = min(cap_blocks, self.distinct_regular)
        evictions = max(0, inserted - int(final)) if ttl_s is None else 0
        return prev_present, per_tier, evictions
