"""The fleet simulation: N replicas, each its own prefix cache, requests routed by a policy.

``prefixplan simulate --replicas N --router POLICY[,POLICY...]`` replays the block trace once per
policy through :class:`~prefixplan.routing.policies.Router` (the gateway's own router) and
reports the fleet hit rate: cached tokens over prompt tokens, summed over replicas.

Per replica the cache is unbounded, or an LRU of ``capacity_tokens`` each (less the running
requests' share), dropping a prompt's tail before its shared head; with ``--cache-ttl`` a block
expires that long after the last request using it finished. A request reuses the leading blocks
of its path that its replica holds (full blocks, last-token rule), then all its blocks are
resident there. In-flight counts (the load guard, least-loaded ties) come from the
same service-time estimate as the in-batch model: a request is in flight from its arrival until
``arrival + service``.

Keyed traffic (``keyed``): a request whose prompt starts with system messages and tools carries
that prefix as its key (:class:`FleetRequest`). The first request of a key is routed by
``cache-aware`` (the key is registered, not yet warm), then the key's full blocks are warmed on
every replica and it is ready: later requests of the key go to the least-loaded replica, as the
gateway does once the background warm verified every replica.

``residency`` is the gateway's ``--router residency`` serving keyed traffic: keys are warmed as
for ``keyed``, and each keyed request tells the router, per replica, the tokens of its key's
prefix that replica's cache holds (:func:`key_residency`: what the engines' KV events show the
gateway); requests without a warmed key leave it to the router's mirror, as in the gateway.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from prefixplan.errors import UsageError
from prefixplan.routing.content import route_units
from prefixplan.routing.policies import SIM_POLICIES, Router, RouterConfig
from prefixplan.trace.blocks import BlockTrace
from prefixplan.trace.requests import SimRequest


@dataclass(frozen=True, slots=True)
class FleetModel:
    """What ``--replicas`` / ``--router`` ask for."""

    replicas: int = 2
    routers: tuple[str, ...] = ("round-robin", "cache-aware", "keyed")
    capacity_tokens: float | None = None  # per replica; None = unbounded
    ttl_s: float | None = None  # expiry after the last use (finish) of a block; None = never
    router: RouterConfig = field(default_factory=RouterConfig)

    def __post_init__(self) -> None:
        if self.replicas < 1:
            raise UsageError("--replicas must be >= 1")
        for r in self.routers:
            if r not in SIM_POLICIES:
                raise UsageError(f"unknown --router {r!r}", hint=f"use one of {', '.join(SIM_POLICIES)}")


def fleet_unsupported(
    *, provider: str | None = None, pinned_fraction: float = 0.0, tiers: Sequence[object] = ()
) -> None:
    """Refuse cache options the fleet does not model: each replica is an engine's LRU prefix cache
    (capacity per replica, less the running share, TTL included), without pinned partitions or
    lower tiers. Comparing routers under options they would silently ignore would mislead.

    Raises:
        UsageError: naming the options.
    """
    named = [
        flag
        for flag, on in (
            ("--provider", provider is not None),
            ("pins (--analysis / --auto-promote)", pinned_fraction > 0),
            ("--tier", bool(tiers)),
        )
        if on
    ]
    if named:
        raise UsageError(
            f"--replicas models each replica as an engine's LRU prefix cache; {', '.join(named)} "
            f"{'is' if len(named) == 1 else 'are'} not modelled per replica",
            hint="simulate those options without --replicas, and the routers without them",
        )


@dataclass(frozen=True, slots=True)
class FleetRequest:
    """What routing needs of one request: its units, and its key prefix (``key`` identifies the
    leading system/tool content, ``key_tokens`` its length in tokens up to the first user message)."""

    units: tuple[int, ...]
    key: str | None = None
    key_tokens: int = 0


def fleet_request(request: SimRequest) -> FleetRequest:
    """The routing input of a simulated request: its route units (else its token blocks' keys)."""
    units = request.route_units
    if units is None and request.tokens is not None:  # in-memory token streams: 16 token ids per unit
        units = tuple(route_units(np.ascontiguousarray(request.tokens, dtype="<u4").tobytes()))
    elif units is None:  # no request content (Mooncake traces, trace files): the block keys
        units = tuple(int(k) for k in (request.block_keys if request.block_keys is not None else ()))
    return FleetRequest(units=tuple(units), key=request.key, key_tokens=int(request.key_tokens))


@dataclass(frozen=True, slots=True)
class FleetRun:
    """One policy on the fleet."""

    policy: str
    replicas: int
    prompt_tokens: int
    cached_tokens: int
    replica: np.ndarray  # per request: the replica chosen
    cached: np.ndarray  # per request: reused tokens
    decisions: dict[str, int]
    per_replica: tuple[dict[str, int], ...]

    @property
    def hit_rate(self) -> float:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "policy": self.policy,
            "replicas": self.replicas,
            "prompt_tokens": self.prompt_tokens,
            "cached_tokens": self.cached_tokens,
            "hit_rate": round(self.hit_rate, 6),
            "decisions": dict(self.decisions),
            "per_replica": [dict(p) for p in self.per_replica],
            "replica_per_request": self.replica.tolist(),
            "cached_tokens_per_request": self.cached.tolist(),
        }


class _Cache:
    """One replica's block cache: unbounded, or LRU over ``capacity`` blocks; with a TTL a block
    expires ``ttl`` seconds after the last request that used it finished (never while in use), and
    a hit is a prefix of blocks that are all alive."""

    def __init__(self, capacity_blocks: int | None, ttl_s: float | None = None) -> None:
        self.capacity = capacity_blocks
        self.ttl = ttl_s
        self.blocks: OrderedDict[int, float] = OrderedDict()  # block -> latest finish of its users
        self._expiry: list[tuple[float, int]] = []  # (finish + ttl, block), lazily purged

    def _purge(self, now: float) -> None:
        heap, ttl = self._expiry, self.ttl
        assert ttl is not None
        while heap and heap[0][0] < now:
            _, b = heapq.heappop(heap)
            last = self.blocks.get(b)
            if last is not None and last + ttl < now:
                del self.blocks[b]

    def hits(self, path: Sequence[int], now: float = 0.0) -> int:
        if self.ttl is not None:
            self._purge(now)
        n = 0
        for b in path:
            if b not in self.blocks:
                break
            n += 1
        return n

    def add(self, path: Sequence[int], finish: float = 0.0) -> None:
        # Deepest block first, root last: the root is the most recently used, so eviction takes a
        # prompt's unique tail before the shared head it hangs from (as engines free blocks).
        blocks = self.blocks
        for b in reversed(path):
            last = blocks.get(b)
            if last is None or finish > last:
                blocks[b] = finish
                if self.ttl is not None:
                    heapq.heappush(self._expiry, (finish + self.ttl, b))
            blocks.move_to_end(b)
        if self.capacity is not None:
            while len(blocks) > self.capacity:
                blocks.popitem(last=False)


def key_residency(
    caches: Sequence[_Cache], path: Sequence[int], key_tokens: int, block_tokens: int, now: float = 0.0
) -> list[int | None]:
    """Per replica: tokens of a key's prefix (its full blocks, at the head of ``path``) the
    replica's cache holds -- what the gateway's KV-event index answers for the same key."""
    n = min(len(path), key_tokens // block_tokens)
    return [min(c.hits(path[:n], now), n) * block_tokens for c in caches]


def simulate_fleet(
    trace: BlockTrace,
    requests: Sequence[FleetRequest],
    model: FleetModel,
    service_s: np.ndarray,
) -> tuple[FleetRun, ...]:
    """One :class:`FleetRun` per policy of ``model`` (module docstring).

    Args:
        trace: the block trace of the log.
        requests: routing input per request, in trace order.
        service_s: seconds each request stays in flight (load for the router).
    """
    if len(requests) != trace.n_requests:
        raise ValueError("one FleetRequest per trace request is needed")
    paths = [trace.path_blocks(r) for r in range(trace.n_requests)]
    order = np.argsort(trace.times, kind="stable").tolist()
    return tuple(_run(policy, trace, requests, model, service_s, paths, order) for policy in model.routers)


def _run(
    policy: str,
    trace: BlockTrace,
    requests: Sequence[FleetRequest],
    model: FleetModel,
    service_s: np.ndarray,
    paths: list[list[int]],
    order: list[int],
) -> FleetRun:
    from dataclasses import replace

    keyed = policy in ("keyed", "residency")
    config = replace(model.router, policy="cache-aware" if policy == "keyed" else policy)
    router = Router(model.replicas, config)
    bt_max = int(trace.block_tokens.max()) if trace.n_requests else 1
    cap_blocks = None if model.capacity_tokens is None else max(1, int(model.capacity_tokens // bt_max))
    caches = [_Cache(cap_blocks, model.ttl_s) for _ in range(model.replicas)]
    running: list[tuple[float, int, int]] = []
    chosen = np.zeros(trace.n_requests, dtype=np.int64)
    cached = np.zeros(trace.n_requests, dtype=np.int64)
    decisions: dict[str, int] = defaultdict(int)
    warmed: set[str] = set()
    times = trace.times.tolist()
    for r in order:
        now = times[r]
        while running and running[0][0] <= now:
            _, rep, prefill = heapq.heappop(running)
            router.finish(rep, prefill)
        req = requests[r]
        key = req.key if keyed else None
        path = paths[r]
        resident = None
        if policy == "residency" and key in warmed:
            resident = key_residency(caches, path, req.key_tokens, int(trace.block_tokens[r]), now)
        decision = router.choose(req.units, key=key, resident=resident)
        rep = decision.replica
        decisions[decision.reason] += 1
        finish = now + float(service_s[r])
        hit = min(caches[rep].hits(path, now), int(trace.cap_blocks[r]))
        chosen[r] = rep
        cached[r] = hit * int(trace.block_tokens[r])
        caches[rep].add(path, finish)
        router.observe(rep, req.units)
        router.start(rep, decision.prefill)
        heapq.heappush(running, (finish, rep, decision.prefill))
        if key is not None and key not in warmed:
            warmed.add(key)
            n = min(len(path), req.key_tokens // int(trace.block_tokens[r]))
            if n > 0:
                for cache in caches:
                    cache.add(path[:n], finish)
                router.set_ready(key, range(model.replicas))
    per_replica = []
    for i in range(model.replicas):
        mask = chosen == i
        per_replica.append(
            {
                "requests": int(mask.sum()),
                "prompt_tokens": int(trace.prompt_tokens[mask].sum()),
                "cached_tokens": int(cached[mask].sum()),
            }
        )
    return FleetRun(
        policy=policy,
        replicas=model.replicas,
        prompt_tokens=int(trace.prompt_tokens.sum()),
        cached_tokens=int(cached.sum()),
        replica=chosen,
        cached=cached,
        decisions=dict(decisions),
        per_replica=tuple(per_replica),
    )
