"""LRU by stack distances on the compressed tree: one pass evaluates every capacity and tier split
(see :mod:`prefixplan.simulation.models` for the shared semantics, TTL included)."""

from __future__ import annotations

import heapq
import math
from itertools import pairwise

import numpy as np

from prefixplan.simulation.spec import finish_times, request_values
from prefixplan.simulation.trace import BlockTrace
from prefixplan.simulation.tree import NodeTree


def stack_exact(trace: BlockTrace, ttl_s: float | None, service_s: np.ndarray | None = None) -> bool:
    """Whether :class:`LRUStack` is exact at every finite capacity for this TTL and these service times.

    Without a TTL it always is. With one, expiry must only ever remove the bottom of the stack:
    a block used more recently (a later arrival) must never expire before one used earlier,
    which holds when finishes are non-decreasing in arrival order (no service times, or a fixed
    batch window). Otherwise a block expiring above an older one frees room the older one may
    keep, which no stack distance sees. At unbounded capacity the stack is exact regardless.
    """
    if ttl_s is None or math.isinf(ttl_s):
        return True
    finish = finish_times(trace, service_s)
    return bool(np.all(finish[1:] >= finish[:-1]))


TOUCHES_PER_STEP = 1 << 20


def _request_steps(t_req: np.ndarray, step: int) -> list[tuple[int, int]]:
    """``(lo, hi)`` touch ranges of about ``step`` touches that never cut a request's touches
    (``t_req`` is non-decreasing)."""
    out: list[tuple[int, int]] = []
    n = int(t_req.shape[0])
    lo = 0
    while lo < n:
        hi = min(n, lo + max(1, step))
        if hi < n:
            cut = int(np.searchsorted(t_req, t_req[hi], side="left"))  # the first touch of that request
            hi = cut if cut > lo else int(np.searchsorted(t_req, t_req[lo], side="right"))
        out.append((lo, hi))
        lo = hi
    return out


class LRUStack:
    """LRU stack distances of every (request, node) touch; evaluates any capacity.

    With ``ttl_s`` the stack is built for that TTL: at each arrival, nodes whose last-use time
    (the latest finish of the requests that used them; ``service_s`` seconds after arrival)
    lies more than ``ttl_s`` before it leave the stack, as if never seen. Exact at every
    capacity when :func:`stack_exact` holds, and at unbounded capacity always.
    """

    def __init__(
        self,
        trace: BlockTrace,
        tree: NodeTree,
        pinned_nodes: np.ndarray | None = None,
        *,
        ttl_s: float | None = None,
        service_s: np.ndarray | None = None,
    ) -> None:
        self.trace = trace
        self.tree = tree
        self.ttl_s = ttl_s
        n = tree.n_nodes
        pinned = pinned_nodes if pinned_nodes is not None else np.zeros(n, dtype=bool)
        node_parent = tree.node_parent.tolist()
        weight = tree.weight.tolist()
        is_pin = pinned.tolist()
        ttl = ttl_s if ttl_s is not None and not math.isinf(ttl_s) else None
        finish_all = finish_times(trace, service_s) if ttl is not None else trace.times
        depth = [0] * n
        for v in range(n):  # parents have smaller ids
            p = node_parent[v]
            depth[v] = depth[p] + 1 if p >= 0 else 1
        ends = tree.req_node[tree.req_node >= 0]
        total_touch = int(np.asarray(depth, dtype=np.int64)[ends].sum()) if ends.shape[0] else 0
        del ends
        size = total_touch + 1
        # Fenwick tree over stack positions (a list: an array("q") is smaller but 23% slower here)
        fen = [0] * (size + 1)
        last_ts = [0] * n  # stack position (0: not in the stack)
        last_use = [-math.inf] * n  # latest finish of the requests that used the node
        exp: list[tuple[float, int]] = []  # (last use, node); stale entries skipped
        e_above: list[float] = []  # per expiry: regular blocks above the node, and its weight
        e_w: list[int] = []
        # per touch: 16 bytes (a million-request log has millions of touches); a touch's weight
        # and pin flag are its node's, looked up as evaluate() goes
        t_req = np.zeros(total_touch, dtype=np.int32)
        t_node = np.zeros(total_touch, dtype=np.int32)
        t_above = np.zeros(total_touch, dtype=np.float64)
        m_reg = np.zeros(trace.n_requests, dtype=np.int64)
        inf = math.inf
        total = 0
        ts = 0
        k = 0
        for r, end, now_r, f in request_values(tree.req_node, trace.times, finish_all):
            if end < 0:
                continue
            if ttl is not None and exp and exp[0][0] < now_r - ttl:
                limit = now_r - ttl
                gone = []
                while exp and exp[0][0] < limit:
                    t, v = heapq.heappop(exp)
                    if last_ts[v] and last_use[v] == t:
                        gone.append(v)
                        last_use[v] = -inf  # out once, whatever stale entries remain
                for v in gone:  # measured against the stack before any of them leaves it
                    s = 0
                    i = last_ts[v]
                    while i:
                        s += fen[i]
                        i &= i - 1
                    e_above.append(total - s)
                    e_w.append(weight[v])
                for v in gone:
                    w = weight[v]
                    i = last_ts[v]
                    while i <= size:
                        fen[i] -= w
                        i += i & -i
                    total -= w
                    last_ts[v] = 0
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
                elif o:
                    s = 0
                    i = o
                    while i:
                        s += fen[i]
                        i &= i - 1
                    t_above[k] = total - s
                    reg += weight[v]
                else:
                    t_above[k] = inf
                    reg += weight[v]
                k += 1
            m_reg[r] = reg
            for v in path:
                if is_pin[v]:
                    last_ts[v] = 1
                    continue
                o = last_ts[v]
                w = weight[v]
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
                if ttl is not None and f > last_use[v]:
                    last_use[v] = f
                    heapq.heappush(exp, (f, v))
        self.t_req = t_req[:k]  # non-decreasing: touches come request after request
        self.t_node = t_node[:k]
        self.t_above = t_above[:k]
        self.node_weight = tree.weight
        self.node_pinned = pinned
        self.m_reg = m_reg
        self.e_above = np.asarray(e_above, dtype=np.float64)
        self.e_w = np.asarray(e_w, dtype=np.float64)
        self.resident_regular = total  # regular blocks in the stack after the last request

    def evaluate(
        self,
        cap_blocks: float,
        tier_blocks: tuple[float, ...] = (),
        prewarm_pins: bool = False,
    ) -> tuple[np.ndarray, list[np.ndarray], int]:
        """Present blocks per request (uncapped): (total, per tier incl. GPU first, evictions).

        Touches are evaluated ``TOUCHES_PER_STEP`` at a time, cut between requests (temporaries
        stay bounded; each request's sums are the same as in one step)."""
        nreq = self.trace.n_requests
        bounds = [float(cap_blocks)]  # the same bound for every touch: scalars, not arrays
        acc = float(cap_blocks)
        for extra in tier_blocks:
            acc = acc + extra
            bounds.append(acc)
        cums = [np.zeros(nreq, dtype=np.int64) for _ in bounds]
        pinned_present = np.zeros(nreq, dtype=np.int64)
        for lo, hi in _request_steps(self.t_req, TOUCHES_PER_STEP):
            node = self.t_node[lo:hi]
            req = self.t_req[lo:hi]
            r0, r1 = int(req[0]), int(req[-1]) + 1
            local = req - r0
            w = self.node_weight[node].astype(np.float64)
            pin = self.node_pinned[node]
            above = self.t_above[lo:hi]
            pin_present = np.where(pin, w if prewarm_pins else np.where(above < 0, w, 0.0), 0.0)
            unplaced = pin | np.isinf(above)
            for cum, bound in zip(cums, bounds, strict=True):
                with np.errstate(invalid="ignore"):
                    present = np.where(unplaced, 0.0, np.clip(bound - above, 0.0, w))
                # Pinned blocks sit on the GPU: they are present within every bound, so the
                # difference of two cumulative totals (a lower tier's share) never counts them.
                present += pin_present
                cum[r0:r1] += np.bincount(local, weights=present, minlength=r1 - r0).astype(np.int64)
            pinned_present[r0:r1] += np.bincount(local, weights=pin_present, minlength=r1 - r0).astype(np.int64)
        per_tier = [cums[0], *(b - a for a, b in pairwise(cums))]
        prev_present = cums[-1]
        if math.isinf(cap_blocks):
            return prev_present, per_tier, 0
        gpu_reg = per_tier[0] - pinned_present
        inserted = int((self.m_reg - gpu_reg).sum())
        # blocks leave the GPU cache by eviction, by expiry while cached, or stay to the end
        expired = int(np.clip(float(cap_blocks) - self.e_above, 0.0, self.e_w).sum()) if self.e_w.size else 0
        final = min(cap_blocks, self.resident_regular)
        evictions = max(0, inserted - expired - int(final))
        return prev_present, per_tier, evictions
