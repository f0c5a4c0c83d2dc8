"""Cache models replayed over a :class:`~prefixplan.simulation.trace.BlockTrace`.

Semantics shared by every capacity-bounded model (and by the reference oracles in the tests):

* A request first looks up its path: the reused prefix is the run of leading blocks that
  are cached (the cache is always prefix-closed), capped by the request's reusable blocks
  (full blocks, last-token rule).
* Then it evicts to make room for the blocks it lacks (*demand eviction*, as vLLM's free
  block queue and SGLang's radix cache): only unpinned leaf blocks not on its own path
  may go while it runs (its own blocks are in use), chosen by the policy key.
* It inserts the missing blocks and touches its whole path. A request longer than the
  cache then gives back its excess blocks by the same policy when it finishes, so the
  cache never holds more than its capacity between requests.

Policy keys (smallest evicted first; only leaves are evictable, so no ties can occur):
``lru`` last use; ``lfu`` (uses since insertion, last use); ``fifo`` insertion;
``priority`` (highest request priority since insertion, last use), as SGLang's
``--radix-eviction-policy priority``.

LRU uses the Mattson stack-distance method on the compressed tree: one pass gives every
capacity, tier split and TTL at once. A node's blocks occupy consecutive stack depths
(deeper blocks are older), so the cached part of a node at capacity ``C`` is
``clip(C - depth_above, 0, weight)``. Tiers under LRU are the same stack cut into
consecutive ranges (GPU, then CPU, then disk): demotion on eviction and promotion on hit
preserve recency order, and a lower tier with free space is taken to hold the most recent
blocks of the tiers below it (a modelling simplification that only moves blocks between
lower tiers, never changes whether a block is cached). TTL expiry removes the oldest
blocks, so it composes with the stack as an age test. LFU, FIFO, priority and
auto-promotion use :class:`GenericCache`, a block-level simulator.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from prefixplan.errors import UsageError
from prefixplan.simulation.trace import BlockTrace
from prefixplan.simulation.tree import NodeTree, build_tree

POLICIES = ("lru", "lfu", "fifo", "priority")
TTL_PRESETS = {"5m": 300.0, "1h": 3600.0, "24h": 86400.0}


def parse_ttl(value: str | float | None) -> float | None:
    """``5m``, ``1h``, ``24h``, ``90s`` or seconds -> seconds (None = no expiry)."""
    if value is None or value == "" or value == "none":
        return None
    text = str(value).strip().lower()
    if text in TTL_PRESETS:
        return TTL_PRESETS[text]
    from prefixplan.core.durations import parse_seconds

    try:
        return parse_seconds(text)
    except ValueError:
        raise UsageError(f"bad cache TTL {value!r}", hint="use 5m, 1h, 24h or seconds (>= 0)") from None


@dataclass(frozen=True, slots=True)
class Tier:
    """A lower cache tier (CPU memory, local disk) below the GPU cache.

    Attributes:
        name: label, e.g. ``cpu`` or ``disk``.
        capacity_tokens: tokens the tier holds.
        bandwidth_bytes_per_s: load bandwidth into GPU memory (0 = free).
        latency_s: fixed latency per request that loads from this tier.
    """

    name: str
    capacity_tokens: float
    bandwidth_bytes_per_s: float = 0.0
    latency_s: float = 0.0


@dataclass(frozen=True, slots=True)
class AutoPromote:
    """Auto-promotion into the pinned partition.

    A cached block is pinned once it was reused in at least ``min_hits`` requests during
    the last ``window_s`` seconds (and its parent is pinned, and the partition has room);
    a pinned block not reused for ``cold_after_s`` seconds goes back to the regular area.
    """

    min_hits: int = 3
    window_s: float = 3600.0
    cold_after_s: float = 3600.0


@dataclass(frozen=True, slots=True)
class CacheSpec:
    """One cache model.

    Attributes:
        policy: ``infinite``, ``lru``, ``lfu``, ``fifo`` or ``priority``.
        capacity_tokens: GPU cache capacity in tokens (None = unbounded).
        ttl_s: hosted-cache expiry after last use (None = none).
        pinned_fraction: share of the capacity reserved for pinned prefixes.
        pins: pinned prefixes as ``(namespace, token ids)``, admitted in order while they fit.
        auto_promote: promote hot blocks into the pinned partition instead of fixed pins.
        tiers: lower tiers (LRU only).
        prewarm_pins: pinned prefixes are resident from the start (warmed).
    """

    policy: str = "lru"
    capacity_tokens: float | None = None
    ttl_s: float | None = None
    pinned_fraction: float = 0.0
    pins: tuple[tuple[str, np.ndarray], ...] = field(default=(), compare=False)
    auto_promote: AutoPromote | None = None
    tiers: tuple[Tier, ...] = ()
    prewarm_pins: bool = False

    def label(self, total_tokens: float | None = None, pinned_share: float | None = None,
              running_share: float = 0.0) -> str:
        """Short human label, e.g. ``lru 1e+06 tok (20% pinned / 60% lru / 20% running)``.

        ``total_tokens``, ``pinned_share`` and ``running_share`` describe the whole capacity
        when part of it is held by running requests (this spec then covers the cache part).
        """
        total = self.capacity_tokens if total_tokens is None else total_tokens
        pinned = self.pinned_fraction if pinned_share is None else pinned_share
        if self.policy == "infinite" or total is None:
            text = "infinite" if self.policy in ("infinite", "lru") else f"{self.policy} unbounded"
        else:
            text = f"{self.policy} {total:.3g} tok"
        if pinned > 0 or running_share > 0:
            parts = []
            if pinned > 0:
                parts.append(f"{pinned:.0%} {'auto-promoted' if self.auto_promote else 'pinned'}")
            parts.append(f"{1 - pinned - running_share:.0%} {self.policy}")
            if running_share > 0:
                parts.append(f"{running_share:.0%} running")
            text += f" ({' / '.join(parts)})"
        for tier in self.tiers:
            text += f" + {tier.name} {tier.capacity_tokens:.3g}"
        if self.ttl_s is not None:
            text += f", ttl {self.ttl_s:g}s"
        return text


@dataclass(slots=True)
class CacheOutcome:
    """Block-level outcome of one model (converted to tokens by the caller).

    Attributes:
        hit_blocks: reused blocks per request.
        tier_blocks: per lower tier, reused blocks per request loaded from it.
        evictions: blocks evicted from the GPU cache (demoted or dropped).
        pinned_blocks: blocks held by the pinned partition at the end.
    """

    hit_blocks: np.ndarray
    tier_blocks: dict[str, np.ndarray]
    evictions: int
    pinned_blocks: int = 0


def capacity_blocks(trace: BlockTrace, tokens: float | None) -> float:
    """Capacity in blocks (floor); ``inf`` when unbounded."""
    if tokens is None or math.isinf(tokens):
        return math.inf
    bt = int(trace.block_tokens.max()) if trace.n_requests else trace.granularity.block_size
    return float(int(tokens // max(1, bt)))


def choose_pins(trace: BlockTrace, pins, budget_blocks: float) -> list[int]:
    """Block ids of the pinned prefixes that fit in ``budget_blocks`` (in order given)."""
    chosen: dict[int, None] = {}
    for namespace, tokens in pins:
        ids = trace.resolve(np.asarray(tokens, dtype=np.uint32), namespace)
        for b in ids:
            if b in chosen:
                continue
            if len(chosen) + 1 > budget_blocks:
                return list(chosen)
            chosen[b] = None
    return list(chosen)


def infinite_hits(trace: BlockTrace) -> np.ndarray:
    """Reused blocks per request with an unbounded persistent cache."""
    return np.minimum(trace.known_blocks, trace.cap_blocks)


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


class GenericCache:
    """Block-level simulator for any policy, pins, auto-promotion and TTL (no tiers).

    Cost is proportional to the blocks each request touches; use :class:`LRUStack` for LRU
    sweeps over large logs.
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
        d = trace.n_distinct_blocks
        self.cached = [False] * d
        self.kids = [0] * d
        self.last = [0] * d
        self.last_time = [0.0] * d
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
        caps = trace.cap_blocks.tolist()
        prios = self.priorities.tolist() if self.priorities is not None else None
        hits = np.zeros(trace.n_requests, dtype=np.int64)
        cached = self.cached
        ins, count, prio, last, last_time, vers = self.ins, self.count, self.prio, self.last, self.last_time, self.ver
        fixed_pin, kids = self.fixed_pin, self.kids
        parent_l = parent.tolist()
        tree = build_tree(trace)  # paths as runs of consecutive block ids
        fb, wt, npar, req_node = (tree.first_block.tolist(), tree.weight.tolist(), tree.node_parent.tolist(),
                                  tree.req_node.tolist())
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
            for b in path:
                last[b] = r
                last_time[b] = now
                count[b] += 1
                if p_r > prio[b]:  # noqa: PLR1730 - hot loop
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
            if self.ttl is not None:
                for b in path:
                    if cached[b] and not self.pinned[b]:
                        heapq.heappush(self.exp_heap, (now, -b, b))
        return CacheOutcome(hits, {}, self.evictions, self.pinned_size)


class NodeCache:
    """Chain-compressed simulator for LRU/LFU/FIFO/priority with fixed pins and TTL (no
    auto-promotion, no tiers); exactly :class:`GenericCache`'s replay, node by node.

    Every request touches whole nodes of the compressed tree (see
    :mod:`prefixplan.simulation.tree`), so all blocks of a node share their last use, and the
    blocks one request inserted into a node (a *segment*) also share their insertion time,
    use count and priority: they have equal policy keys. The cached part of a node is a run
    of its top blocks (the cache is prefix-closed); only its deepest block can be a leaf.
    Evicting the deepest block of a segment makes the next one the smallest key in the heap
    (equal key, the next smaller block id, and no other block id lies between), so a whole
    segment (or the part still needed) is evicted in one step. Cost: path nodes and
    segments per request instead of blocks.
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
        for v in set(self.tree.node_of_block[np.asarray(pins, dtype=np.int64)].tolist()) if pins else ():
            self.pinned[v] = True
        self.prewarm = prewarm_pins

    def run(self) -> CacheOutcome:
        trace, tree = self.trace, self.tree
        n = tree.n_nodes
        fb = tree.first_block.tolist()
        w = tree.weight.tolist()
        npar = tree.node_parent.tolist()
        req_node = tree.req_node.tolist()
        pinned = self.pinned
        times = trace.times.tolist()
        caps = trace.cap_blocks.tolist()
        prios = self.priorities.tolist() if self.priorities is not None else None
        pol = {"lru": 0, "lfu": 1, "fifo": 2, "priority": 3}[self.policy]
        ttl = self.ttl
        cap = self.cap
        c = [0] * n  # cached top blocks of each node
        kids = [0] * n  # child nodes with cached blocks
        last = [0] * n
        ltime = [0.0] * n
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
                ltime[v] = now
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
            if ttl is not None:
                for v in path:
                    if not pinned[v]:
                        push(exp, (now, -fb[v], v))
        hits[:] = hits_l
        return CacheOutcome(hits, {}, evictions, pinned_size)


def run_model(
    trace: BlockTrace,
    spec: CacheSpec,
    *,
    priorities: np.ndarray | None = None,
    kv_bytes_per_token: float | None = None,
    _stack_cache: dict | None = None,
) -> CacheOutcome:
    """Replay ``trace`` through one cache model."""
    if spec.policy == "infinite":
        spec = CacheSpec(policy="lru", ttl_s=spec.ttl_s)
    if spec.capacity_tokens is None and spec.policy == "lru" and spec.ttl_s is None and not spec.tiers:
        return CacheOutcome(infinite_hits(trace), {}, 0)
    cap = capacity_blocks(trace, spec.capacity_tokens)
    pin_cap = math.floor(cap * spec.pinned_fraction) if spec.pinned_fraction > 0 and not math.isinf(cap) else 0
    if spec.pinned_fraction > 0 and math.isinf(cap):
        raise UsageError("a pinned partition needs a finite --capacity")
    reg_cap = cap - pin_cap
    pins = choose_pins(trace, spec.pins, pin_cap) if (spec.pins and pin_cap and spec.auto_promote is None) else []
    if spec.policy == "lru" and spec.auto_promote is None:
        key = tuple(sorted(pins))
        cache = _stack_cache if _stack_cache is not None else {}
        stack = cache.get(key)
        if stack is None:
            tree = build_tree(trace, extra_ends=pins)
            pinned_nodes = np.zeros(tree.n_nodes, dtype=bool)
            if pins:
                pinned_nodes[np.unique(tree.node_of_block[np.asarray(pins, dtype=np.int64)])] = True
            stack = cache[key] = LRUStack(trace, tree, pinned_nodes)
        tier_caps = tuple(capacity_blocks(trace, t.capacity_tokens) for t in spec.tiers)
        _, per_tier, evictions = stack.evaluate(reg_cap, tier_caps, spec.ttl_s, spec.prewarm_pins)
        present = sum(per_tier)
        hits = np.minimum(present, trace.cap_blocks)
        tiers: dict[str, np.ndarray] = {}
        acc = np.minimum(per_tier[0], hits)
        for tier, amount in zip(spec.tiers, per_tier[1:]):
            nxt = np.minimum(acc + amount, hits)
            tiers[tier.name] = nxt - acc
            acc = nxt
        return CacheOutcome(hits, tiers, evictions, len(pins))
    if spec.tiers:
        raise UsageError("tiers are modelled with LRU eviction only", hint="use --policy lru with tiers")
    if spec.auto_promote is None:
        return NodeCache(trace, spec.policy, reg_cap, ttl_s=spec.ttl_s, pinned_blocks=pins, priorities=priorities,
                         prewarm_pins=spec.prewarm_pins).run()
    sim = GenericCache(
        trace,
        spec.policy,
        reg_cap,
        ttl_s=spec.ttl_s,
        pinned_blocks=pins,
        pinned_capacity=pin_cap,
        auto_promote=spec.auto_promote,
        priorities=priorities,
        prewarm_pins=spec.prewarm_pins,
    )
    return sim.run()
