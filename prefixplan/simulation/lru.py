"""LRU by stack distances on the compressed tree: one pass evaluates every capacity and tier split
(see :mod:`prefixplan.simulation.models` for the shared semantics, TTL included)."""

from __future__ import annotations

import heapq
import math
from array import array
from itertools import pairwise

import numpy as np

from prefixplan.simulation.spec import finish_times
from prefixplan.simulation.stackdist import fits, stack_distances
from prefixplan.trace.blocks import BlockTrace
from prefixplan.trace.nodes import NodeTree
from prefixplan.trace.storage.mapped import drop_resident, mapped_empty


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


TOUCHES_PER_STEP = 1 << 18
"""Touches :meth:`LRUStack.evaluate` takes at a time (numpy temporaries)."""
BUILD_TOUCHES = 1 << 16
"""Touches whose nodes and weights :class:`LRUStack` turns into Python values at a time (a few
MB of lists: the build keeps no Python list over every touch or node but the stack's own)."""
DROP_STEPS = 16
"""Build steps between hand-backs of the touch columns' resident pages (about 1M touches, 8 MB)."""


STACK_SLACK = 0.5
"""Stack positions kept beyond the nodes and the longest path, as a fraction of the nodes: when
they run out, the positions in use are renumbered 1..m in stack order (:func:`_renumber`), so the
Fenwick tree holds ``nodes + longest path + STACK_SLACK * nodes`` slots (about 1.5 per node),
not one per touch."""


NARROW_LIMIT = 2**31
"""Below this many stack positions (blocks in the tree), :class:`LRUStack` keeps stack positions
(Fenwick sums) in 4-byte ints, 8-byte ones from it on."""


OFFLINE_TOUCHES = 1 << 21
"""Without a TTL, up to this many touches (570k on the 100k benchmark trace) are measured by
:func:`stack_distances` (numpy, about 150 bytes a touch in temporaries while it runs: 300 MB at the
limit); more go through the loop (8 bytes a touch, file-backed), so memory stays flat on bigger
logs."""


RENUMBER_STEP = 1 << 16
"""Fenwick slots rebuilt at a time when positions are renumbered (a few MB of temporaries)."""


def _renumber(fen: array, last_ts: array, regular: np.ndarray, weight: np.ndarray) -> int:
    """Give the regular nodes in the stack positions 1..m in their stack order and rebuild the
    Fenwick tree ``fen`` over them, in place; returns m. Stack distances only depend on the
    order of positions, so nothing a touch records changes. Pinned nodes keep their mark."""
    pos = np.frombuffer(last_ts, dtype=f"i{last_ts.itemsize}")  # views: written in place
    slots = np.frombuffer(fen, dtype=f"i{fen.itemsize}")
    live = np.flatnonzero((pos > 0) & regular)
    order = live[np.argsort(pos[live], kind="stable")]
    m = int(order.shape[0])
    pos[order] = np.arange(1, m + 1)
    cum = np.zeros(slots.shape[0], dtype=np.int64)  # cum[i]: weight at positions 1..i
    cum[1 : m + 1] = weight[order]
    np.cumsum(cum, out=cum)
    for lo in range(0, slots.shape[0], RENUMBER_STEP):
        idx = np.arange(lo, min(slots.shape[0], lo + RENUMBER_STEP), dtype=np.int64)
        # a Fenwick slot i holds the weights of positions (i - lowbit(i), i]
        slots[idx] = cum[idx] - cum[idx - (idx & -idx)]
    del pos, slots  # no view may outlive the call: the arrays stay resizable
    return m


def _zeros(typecode: str, n: int) -> array:
    """An ``array`` of ``n`` zeros of ``typecode`` (no Python int per slot)."""
    return array(typecode, bytes(array(typecode).itemsize * n))


def _request_steps(touch_end: np.ndarray, step: int) -> list[tuple[int, int]]:
    """``(r0, r1)`` request ranges of about ``step`` touches each (at least one request), covering
    every request in order (``touch_end``: cumulative touches at each request's end)."""
    out: list[tuple[int, int]] = []
    n = int(touch_end.shape[0])
    r0 = 0
    while r0 < n:
        start = int(touch_end[r0 - 1]) if r0 else 0
        r1 = int(np.searchsorted(touch_end, start + max(1, step), side="left")) + 1
        r1 = min(n, max(r1, r0 + 1))
        out.append((r0, r1))
        r0 = r1
    return out


class LRUStack:
    """LRU stack distances of every (request, node) touch; evaluates any capacity.

    With ``ttl_s`` the stack is built for that TTL: at each arrival, nodes whose last-use time
    (the latest finish of the requests that used them; ``service_s`` seconds after arrival)
    lies more than ``ttl_s`` before it leave the stack, as if never seen. Exact at every
    capacity when :func:`stack_exact` holds, and at unbounded capacity always.

    Kept per touch (request after request, each request's nodes deepest first): ``t_node``
    (int32) and ``t_above``, the regular blocks above the node in the stack before the request
    (uint32, or uint64 for a tree of 2**32 blocks or more; ``none_mark``, the type's maximum,
    when the node is not in the stack, ``pin_mark``, one less, for a resident pin): 8 bytes a
    touch.
    ``touch_end`` holds each request's cumulative touches. A window of requests' paths is walked
    in numpy (:meth:`NodeTree.paths`) and turned into Python values :data:`BUILD_TOUCHES` at a
    time. Each node's stack position and the Fenwick tree over positions are ``array``s of
    4-byte ints (8 bytes past :data:`NARROW_LIMIT` positions or blocks), no Python int object:
    a list of ints would take 40 bytes a slot, ~60 MB more on the 1M-request benchmark trace,
    and leave its freed ints scattered over the allocator's arenas. Positions are renumbered
    when they run out (:data:`STACK_SLACK`), so both grow with the nodes, not with the touches.
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
        nreq = trace.n_requests
        pinned = pinned_nodes if pinned_nodes is not None else np.zeros(n, dtype=bool)
        ttl = ttl_s if ttl_s is not None and not math.isinf(ttl_s) else None
        finish_all = finish_times(trace, service_s) if ttl is not None else trace.times
        ends = tree.req_node
        lengths = tree.path_lengths(mapped_empty(nreq, np.int64))  # per request: file-backed (trace.storage.mapped)
        touch_end = np.cumsum(lengths, out=mapped_empty(nreq, np.int64))
        total_touch = int(touch_end[-1]) if nreq else 0
        small = int(tree.weight.sum()) < int(np.iinfo(np.uint32).max) - 1  # below both marks
        dtype = np.uint32 if small else np.uint64
        none_mark = int(np.iinfo(dtype).max)
        pin_mark = none_mark - 1
        longest = int(lengths.max()) if nreq else 0
        size = min(total_touch, n + longest + int(STACK_SLACK * n)) + 1
        if ttl is None and total_touch <= OFFLINE_TOUCHES and fits(total_touch):
            self._offline(trace, tree, pinned, touch_end, lengths, dtype, none_mark)
            return
        # Fenwick tree over stack positions; 4-byte slots while every sum fits
        fen = _zeros("i" if int(tree.weight.sum()) < NARROW_LIMIT else "q", size + 1)
        regular = np.logical_not(pinned)
        renumbered = 0
        # stack position (0: not in the stack), no object per node
        last_ts = _zeros("i" if size < NARROW_LIMIT else "q", n)
        last_use = [-math.inf] * n if ttl is not None else []  # latest finish of the requests that used the node
        exp: list[tuple[float, int]] = []  # (last use, node); stale entries skipped
        e_above: list[float] = []  # per expiry: regular blocks above the node, and its weight
        e_w: list[int] = []
        # written once in touch order and read in windows: file-backed, resident only as read
        t_node = mapped_empty(total_touch, np.int32)
        t_above = mapped_empty(total_touch, dtype)
        m_reg = mapped_empty(nreq, np.int64)
        node_weight = tree.weight
        inf = math.inf
        total = 0
        ts = 0
        steps = 0
        for lo, hi in _request_steps(touch_end, BUILD_TOUCHES):
            a = int(touch_end[lo - 1]) if lo else 0
            b = int(touch_end[hi - 1])
            nodes = tree.paths(ends[lo:hi], lengths[lo:hi])
            t_node[a:b] = nodes
            vs = nodes.tolist()
            ws = node_weight[nodes].tolist()
            ps = pinned[nodes].tolist()
            del nodes
            above = [0] * len(vs)
            regs = [0] * (hi - lo)
            k = 0
            for j, c, now_r, f in zip(
                range(hi - lo),
                lengths[lo:hi].tolist(),
                trace.times[lo:hi].tolist(),
                finish_all[lo:hi].tolist(),
                strict=True,
            ):
                if not c:
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
                        e_w.append(int(node_weight[v]))
                    for v in gone:
                        w = int(node_weight[v])
                        i = last_ts[v]
                        while i <= size:
                            fen[i] -= w
                            i += i & -i
                        total -= w
                        last_ts[v] = 0
                if ts + c > size:  # out of positions: the live ones become 1..m
                    ts = _renumber(fen, last_ts, regular, node_weight)
                    renumbered += 1
                end = k + c
                reg = 0
                for x in range(k, end):
                    v = vs[x]
                    o = last_ts[v]
                    if ps[x]:
                        above[x] = pin_mark if o else none_mark
                    elif o:
                        s = 0
                        i = o
                        while i:
                            s += fen[i]
                            i &= i - 1
                        above[x] = total - s
                        reg += ws[x]
                    else:
                        above[x] = none_mark
                        reg += ws[x]
                regs[j] = reg
                for x in range(k, end):
                    v = vs[x]
                    if ps[x]:
                        last_ts[v] = 1
                        continue
                    o = last_ts[v]
                    w = ws[x]
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
                k = end
            t_above[a:b] = above
            m_reg[lo:hi] = regs
            steps += 1
            if not steps % DROP_STEPS:
                drop_resident(t_node, t_above, lengths, touch_end, m_reg, trace.times, finish_all, ends)
        drop_resident(t_node, t_above, lengths, touch_end, m_reg, trace.times, finish_all, ends)
        self.touch_end = touch_end  # touches of requests 0..r: touch_end[r]
        self.t_node = t_node
        self.t_above = t_above
        self.none_mark = none_mark
        self.pin_mark = pin_mark
        self.node_weight = tree.weight
        self.node_pinned = pinned
        self.m_reg = m_reg
        self.e_above = np.asarray(e_above, dtype=np.float64)
        self.e_w = np.asarray(e_w, dtype=np.float64)
        self.resident_regular = total  # regular blocks in the stack after the last request
        self.renumbered = renumbered  # times the stack positions ran out and were renumbered

    def _offline(
        self,
        trace: BlockTrace,
        tree: NodeTree,
        pinned: np.ndarray,
        touch_end: np.ndarray,
        lengths: np.ndarray,
        dtype: type,
        none_mark: int,
    ) -> None:
        """The same stack distances without a TTL, found for every touch at once
        (:mod:`prefixplan.simulation.stackdist`)."""
        t_node = tree.paths(tree.req_node, lengths)
        found = stack_distances(t_node, touch_end, tree.weight, pinned, dtype)
        self.touch_end = touch_end
        self.t_node = t_node
        self.t_above = found.above
        self.none_mark = none_mark
        self.pin_mark = none_mark - 1
        self.node_weight = tree.weight
        self.node_pinned = pinned
        self.m_reg = found.m_reg
        self.e_above = np.zeros(0, dtype=np.float64)
        self.e_w = np.zeros(0, dtype=np.float64)
        self.resident_regular = found.resident
        self.renumbered = 0

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
        touch_end = self.touch_end
        for step, (r0, r1) in enumerate(_request_steps(touch_end, TOUCHES_PER_STEP)):
            lo = int(touch_end[r0 - 1]) if r0 else 0
            hi = int(touch_end[r1 - 1])
            if step:
                drop_resident(self.t_node, self.t_above)  # the window before this one
            if hi == lo:
                continue
            counts = np.diff(touch_end[r0:r1], prepend=lo)
            local = np.repeat(np.arange(r1 - r0), counts)
            node = self.t_node[lo:hi]
            w = self.node_weight[node].astype(np.float64)
            pin = self.node_pinned[node]
            raw = self.t_above[lo:hi]
            unplaced = pin | (raw == self.none_mark)
            if prewarm_pins:
                pin_present = np.where(pin, w, 0.0)
            else:
                pin_present = np.where(pin & (raw == self.pin_mark), w, 0.0)
            above = raw.astype(np.float64)
            for cum, bound in zip(cums, bounds, strict=True):
                present = np.where(unplaced, 0.0, np.clip(bound - above, 0.0, w))
                # Pinned blocks sit on the GPU: they are present within every bound, so the
                # difference of two cumulative totals (a lower tier's share) never counts them.
                present += pin_present
                cum[r0:r1] += np.bincount(local, weights=present, minlength=r1 - r0).astype(np.int64)
            pinned_present[r0:r1] += np.bincount(local, weights=pin_present, minlength=r1 - r0).astype(np.int64)
        drop_resident(self.t_node, self.t_above)
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
