"""Replica routing policies, shared by ``prefixplan gateway`` and ``simulate --replicas N --router``.

Pure logic, no I/O: the gateway and the fleet simulation drive the same :class:`Router`, so a
policy's decisions on a log are the same whether they are predicted or served.

What a request is, for routing: a list of *units*, chained 64-bit hashes of its content cut in
fixed-size pieces (:func:`route_units`); unit ``i`` stands for the whole content up to the end of
piece ``i``, as a cache block stands for its whole prefix. The gateway computes them from the
bytes of the request it forwards (:func:`request_route_bytes`: tools, then every message, in
order); the simulation from the same fields of the logged request, so both see the same units
without tokenizing.

Policies for requests without a ready key:

``round-robin``
    replicas in turn.
``prefix-hash``
    consistent hashing (a ring with :attr:`RouterConfig.vnodes` points per replica) of the unit
    that covers the first :attr:`RouterConfig.prefix_units` pieces: requests sharing their start
    go to the same replica, and adding a replica moves only its share.
``cache-aware``
    a per-replica mirror of the units recently sent there (bounded, least recently used dropped
    first). The replica holding the longest match wins when the match covers at least
    :attr:`RouterConfig.cache_threshold` of the request; otherwise the least-loaded replica.
    Load guard: when the in-flight counts are imbalanced (max - min > ``balance_abs`` and
    max > ``balance_rel`` x min) the least-loaded replica wins whatever the match.

``residency``
    scores every replica by the request's prefix resident there against its load, and picks the
    lowest cost (ties in turn)::

        cost = prefill_weight x (pending prefill tokens + prompt tokens - resident tokens)
               + request_weight x requests in flight

    *Resident tokens* come from the caller per replica (the gateway: a keyed request's prefix as
    the engines' KV events show it, or the warm's verification where a replica has no events;
    the simulation: its per-replica caches, the same view); where the caller knows nothing, the
    mirror's match stands in, at :attr:`RouterConfig.bytes_per_token` bytes per token (an
    estimate: routing does not tokenize). *Pending prefill tokens* are the uncached tokens of the
    requests sent to the replica and not finished. The prompt's own length (estimated from its
    content the same way unless given) is the same on every replica and only caps its resident
    tokens. Keyed requests are scored like the rest: the key's residency is in their resident tokens.

Keyed requests (a ``name@vN`` marked ready, :meth:`Router.set_ready`) go to the least-loaded
replica among those verified for exactly that ``name@vN``; a replica verified for another
version of the name is never chosen by affinity. A key that is not ready uses the policy above.
Ties between equally loaded replicas are broken in turn (a rotating counter), never by chance,
so a replay is deterministic.
"""

from __future__ import annotations

import bisect
import hashlib
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from prefixplan.errors import UsageError
from prefixplan.routing.content import UNIT_BYTES

POLICIES = ("cache-aware", "round-robin", "prefix-hash", "residency")
"""Policies for requests without a ready key (the gateway's ``--router``)."""
SIM_POLICIES = (*POLICIES, "keyed")
"""What ``simulate --router`` compares: the policies, and keyed traffic (affinity to warm replicas)."""


@dataclass(frozen=True, slots=True)
class RouterConfig:
    """How a :class:`Router` decides (defaults follow SGLang's cache-aware router)."""

    policy: str = "cache-aware"
    cache_threshold: float = 0.3
    balance_abs: int = 64
    balance_rel: float = 1.5
    prefix_units: int = 16
    mirror_units: int = 1_000_000
    vnodes: int = 64
    prefill_weight: float = 1.0  # residency: cost per uncached prompt token to prefill
    request_weight: float = 256.0  # residency: cost per request in flight, in prefill tokens
    bytes_per_token: float = 4.0  # residency: content bytes per token where tokens are estimated

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise UsageError(f"unknown router policy {self.policy!r}", hint=f"use one of {', '.join(POLICIES)}")
        if not 0 <= self.cache_threshold <= 1:
            raise UsageError("the cache threshold must be between 0 and 1")
        if self.prefix_units < 1 or self.mirror_units < 1 or self.vnodes < 1:
            raise UsageError("prefix units, mirror size and virtual nodes must be >= 1")
        if self.prefill_weight < 0 or self.request_weight < 0 or self.bytes_per_token <= 0:
            raise UsageError("router weights must be >= 0 and bytes per token > 0")


_WEIGHTS = {"prefill": "prefill_weight", "request": "request_weight", "bytes_per_token": "bytes_per_token"}


def parse_weights(text: str | None) -> dict[str, float]:
    """``prefill=1,request=256,bytes_per_token=4`` (``--router-weights``) as :class:`RouterConfig`
    fields.

    Raises:
        UsageError: an unknown name or a value that is not a number.
    """
    out: dict[str, float] = {}
    for item in (text or "").split(","):
        if not item.strip():
            continue
        name, _, value = item.partition("=")
        field = _WEIGHTS.get(name.strip())
        if field is None:
            raise UsageError(f"unknown router weight {name.strip()!r}", hint=f"use {', '.join(_WEIGHTS)}")
        try:
            out[field] = float(value)
        except ValueError:
            raise UsageError(f"router weight {name.strip()}: {value!r} is not a number") from None
    return out


@dataclass(frozen=True, slots=True)
class Decision:
    """Where a request goes and why.

    ``reason``: ``affinity`` (a ready key), ``cache-match``, ``least-loaded`` (no match above the
    threshold), ``load-guard`` (imbalance overrode a match), ``round-robin`` or ``prefix-hash``.
    ``matched``: units of the request found in the chosen replica's mirror (cache-aware), or its
    resident tokens (residency). ``prefill``: the tokens it leaves to prefill there (residency:
    pass it to :meth:`Router.start` and :meth:`Router.finish`).
    """

    replica: int
    reason: str
    matched: int = 0
    prefill: int = 0


def _h64(data: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


class _Mirror:
    """Units recently sent to one replica, least recently used dropped first."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._units: OrderedDict[int, None] = OrderedDict()

    def match(self, units: Sequence[int]) -> int:
        n = 0
        for u in units:
            if u not in self._units:
                break
            n += 1
        return n

    def add(self, units: Iterable[int]) -> None:
        d = self._units
        for u in reversed(list(units)):  # the shared head is the most recent: tails are dropped first
            if u in d:
                d.move_to_end(u)
            else:
                d[u] = None
        while len(d) > self.capacity:
            d.popitem(last=False)

    def __len__(self) -> int:
        return len(self._units)


class Router:
    """Routing state of a fleet of ``n_replicas`` (module docstring). Not thread-safe: the gateway
    calls it from its one event loop."""

    def __init__(self, n_replicas: int, config: RouterConfig | None = None) -> None:
        if n_replicas < 1:
            raise UsageError("a router needs at least one replica")
        self.n = n_replicas
        self.config = config or RouterConfig()
        self.in_flight = [0] * n_replicas
        self.pending_tokens = [0] * n_replicas
        self._turn = 0
        self._mirrors = [_Mirror(self.config.mirror_units) for _ in range(n_replicas)]
        self._ready: dict[str, frozenset[int]] = {}
        ring = sorted(
            (_h64(f"replica-{r}#{v}".encode()), r) for r in range(n_replicas) for v in range(self.config.vnodes)
        )
        self._ring_points = [p for p, _ in ring]
        self._ring_owner = [r for _, r in ring]

    # -- keys ---------------------------------------------------------------------------------
    def set_ready(self, key: str, replicas: Iterable[int]) -> None:
        """Mark ``key`` (an exact ``name@vN``) verified resident on ``replicas``."""
        self._ready[key] = frozenset(int(r) for r in replicas)

    def clear_ready(self, key: str) -> None:
        self._ready.pop(key, None)

    def ready_replicas(self, key: str) -> frozenset[int]:
        return self._ready.get(key, frozenset())

    # -- load ---------------------------------------------------------------------------------
    def start(self, replica: int, prefill: int = 0) -> None:
        """A request was sent to ``replica``, leaving ``prefill`` tokens to compute there."""
        self.in_flight[replica] += 1
        self.pending_tokens[replica] += prefill

    def finish(self, replica: int, prefill: int = 0) -> None:
        """A request of ``replica`` completed (or failed); ``prefill`` as given to :meth:`start`."""
        if self.in_flight[replica] > 0:
            self.in_flight[replica] -= 1
        self.pending_tokens[replica] = max(0, self.pending_tokens[replica] - prefill)

    def observe(self, replica: int, units: Sequence[int]) -> None:
        """Record that ``units`` were sent to ``replica`` (the cache-aware mirror)."""
        self._mirrors[replica].add(units)

    def _least_loaded(self, candidates: Sequence[int]) -> int:
        low = min(self.in_flight[r] for r in candidates)
        tied = [r for r in candidates if self.in_flight[r] == low]
        choice = tied[self._turn % len(tied)]
        self._turn += 1
        return choice

    def _imbalanced(self, candidates: Sequence[int]) -> bool:
        loads = [self.in_flight[r] for r in candidates]
        hi, lo = max(loads), min(loads)
        return hi - lo > self.config.balance_abs and hi > self.config.balance_rel * lo

    # -- the decision ---------------------------------------------------------------------------
    def choose(
        self,
        units: Sequence[int],
        key: str | None = None,
        exclude: Iterable[int] = (),
        *,
        prompt_tokens: int | None = None,
        resident: Sequence[int | None] | None = None,
    ) -> Decision:
        """Pick a replica for a request of ``units`` (and ``key``), never one in ``exclude``
        (replicas that already failed this request). ``prompt_tokens`` and ``resident`` (tokens
        per replica, None where unknown) feed the residency policy.

        Raises:
            UsageError: every replica is excluded.
        """
        skip = set(exclude)
        candidates = [r for r in range(self.n) if r not in skip]
        if not candidates:
            raise UsageError("no replica left to try")
        policy = self.config.policy
        if policy == "residency":
            return self._residency(candidates, units, prompt_tokens, resident)
        if key is not None:
            ready = [r for r in candidates if r in self._ready.get(key, ())]
            if ready:
                return Decision(self._least_loaded(ready), "affinity")
        if policy == "round-robin":
            choice = candidates[self._turn % len(candidates)]
            self._turn += 1
            return Decision(choice, "round-robin")
        if policy == "prefix-hash":
            return Decision(self._ring_choice(units, skip), "prefix-hash")
        if self._imbalanced(candidates):
            return Decision(self._least_loaded(candidates), "load-guard")
        matches = {r: self._mirrors[r].match(units) for r in candidates}
        best = max(matches.values()) if matches else 0
        if units and best > 0 and best / len(units) >= self.config.cache_threshold:
            top = [r for r in candidates if matches[r] == best]
            choice = top[0] if len(top) == 1 else self._least_loaded(top)
            return Decision(choice, "cache-match", best)
        choice = self._least_loaded(candidates)
        return Decision(choice, "least-loaded", matches.get(choice, 0))

    def unit_tokens(self, units: int) -> int:
        """Tokens of ``units`` routing units, estimated at ``bytes_per_token``."""
        return int(units * UNIT_BYTES / self.config.bytes_per_token)

    def _residency(
        self,
        candidates: Sequence[int],
        units: Sequence[int],
        prompt_tokens: int | None,
        resident: Sequence[int | None] | None,
    ) -> Decision:
        c = self.config
        held = {}
        for r in candidates:
            known = resident[r] if resident is not None else None
            held[r] = known if known is not None else self.unit_tokens(self._mirrors[r].match(units))
        tokens = prompt_tokens if prompt_tokens is not None else self.unit_tokens(len(units))
        tokens = max(tokens, max(held.values()))
        cost = {
            r: c.prefill_weight * (self.pending_tokens[r] + tokens - held[r]) + c.request_weight * self.in_flight[r]
            for r in candidates
        }
        low = min(cost.values())
        tied = [r for r in candidates if cost[r] == low]
        choice = tied[0] if len(tied) == 1 else self._least_loaded(tied)
        reason = "residency" if held[choice] > 0 else "least-cost"
        return Decision(choice, reason, held[choice], tokens - held[choice])

    def _ring_choice(self, units: Sequence[int], skip: set[int]) -> int:
        point = units[min(len(units), self.config.prefix_units) - 1] if units else 0
        i = bisect.bisect_left(self._ring_points, point)
        n = len(self._ring_points)
        for step in range(n):
            owner = self._ring_owner[(i + step) % n]
            if owner not in skip:
                return owner
        raise UsageError("no replica left to try")  # pragma: no cover - choose() checked candidates
