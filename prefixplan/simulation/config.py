"""What a simulation is told, in three parts: the cache model, the workload model, the savings model.

* :class:`CacheModel` -- what the engine (or hosted API) caches: granularity, eviction policies,
  capacities, TTL, the pinned / running partition, pins and auto-promotion, lower tiers.
* :class:`Workload` -- how the requests behave beyond their tokens: in-flight time for in-batch
  sharing, hot prefixes of the eviction-risk table, per-request priorities.
* :class:`SavingsModel` -- what the hits are worth: KV bytes per token, the prefill-time
  profile, prices.

:class:`SimConfig` holds one of each plus which run the headline savings refer to.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from prefixplan.core.granularity import Granularity, engine_granularity, provider_granularity
from prefixplan.savings.kvsize import KVShape
from prefixplan.savings.prefill import PrefillProfile
from prefixplan.simulation.batch import DEFAULT_DECODE_TPS, DEFAULT_OUTPUT_TOKENS, DEFAULT_PREFILL_TPS
from prefixplan.simulation.engine_counts import EngineCounts
from prefixplan.simulation.fleet import FleetModel
from prefixplan.simulation.load import LoadModel
from prefixplan.simulation.spec import AutoPromote, Tier


@dataclass(frozen=True, slots=True)
class CacheModel:
    """The prefix cache being modelled. Capacities are in tokens (see
    :func:`prefixplan.simulation.capacity.tokens_from_bytes`).

    Attributes:
        engine: ``vllm``, ``sglang``, ``lmcache`` or ``custom`` (ignored when ``provider`` is set).
        provider: ``openai`` or ``anthropic`` for hosted prompt caching.
        block_size: overrides the engine's block size.
        model: model name (Anthropic minimum cacheable length; hosted prices).
        policies: eviction policies to run at every capacity.
        capacities: GPU cache capacities in tokens (empty: unbounded only).
        ttl: cache expiry after last use (``5m``, ``1h``, ``24h``, seconds); hosted default 5m.
        pinned_fraction: share of the whole capacity reserved for pinned prefixes.
        running_fraction: share of every capacity held by running requests (not cache), as in
            the partition "20% pinned / 60% LRU / 20% running".
        pins: pinned prefixes ``(namespace, token ids)``, admitted in order while they fit.
        auto_promote: promote hot blocks into the pinned partition instead of fixed pins.
        prewarm_pins: pinned prefixes are resident from the start (warmed).
        tiers: lower tiers below the GPU cache (LRU runs only).
        anthropic_breakpoints: ``request`` (the log's ``cache_control``) or ``auto``.
    """

    engine: str = "vllm"
    provider: str | None = None
    block_size: int | None = None
    model: str | None = None
    policies: tuple[str, ...] = ("lru",)
    capacities: tuple[float, ...] = ()
    ttl: str | float | None = None
    pinned_fraction: float = 0.0
    running_fraction: float = 0.0
    pins: tuple[tuple[str, np.ndarray], ...] = field(default=(), compare=False)
    auto_promote: AutoPromote | None = None
    prewarm_pins: bool = False
    tiers: tuple[Tier, ...] = ()
    anthropic_breakpoints: str = "request"

    def partition(self, capacity_tokens: float) -> tuple[float, float]:
        """(cache tokens, pinned share of the cache) for a total capacity."""
        keep = 1.0 - self.running_fraction
        return capacity_tokens * keep, (self.pinned_fraction / keep if self.pinned_fraction else 0.0)

    def granularity(self) -> Granularity:
        """What prefixes this cache can serve (block size, minimums, breakpoints)."""
        if self.provider:
            return provider_granularity(self.provider, self.model, self.anthropic_breakpoints)
        return engine_granularity(self.engine, self.block_size)


@dataclass(frozen=True, slots=True)
class Workload:
    """How requests behave beyond their tokens.

    Attributes:
        batch_window: fixed in-flight seconds for the in-batch model (else estimated from
            ``prefill_tps``, ``decode_tps`` and output lengths, ``default_output`` when unknown).
        hot_prefixes: ``(label, namespace, tokens)`` for the eviction-risk table.
        priorities: per-request priority for the ``priority`` policy (default: 1 for requests
            containing a hot prefix or pin, else 0).
    """

    batch_window: float | None = None
    prefill_tps: float = DEFAULT_PREFILL_TPS
    decode_tps: float = DEFAULT_DECODE_TPS
    default_output: int = DEFAULT_OUTPUT_TOKENS
    hot_prefixes: tuple[tuple[str, str, np.ndarray], ...] = field(default=(), compare=False)
    priorities: np.ndarray | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class SavingsModel:
    """What hits are worth.

    Attributes:
        kv: KV shape (bytes per token) for tier load times and memory figures.
        profile: prefill-time profile (default: the built-in assumption).
        prices_file: a price table overriding the shipped one.
        gpu_hour_price: self-hosted USD per GPU-hour (default: the profile's).
    """

    kv: KVShape | None = None
    profile: PrefillProfile | None = None
    prices_file: str | None = None
    gpu_hour_price: float | None = None


@dataclass(frozen=True, slots=True)
class WaterfallModel:
    """What the waterfall needs besides the runs: the tokens fixing the log's cache breakers would
    return (``analyze``'s breaker findings, summed) and where that estimate comes from."""

    breaker_tokens: int | None = None
    breaker_source: str | None = None
    engine: EngineCounts | None = None  # --achieved-from-status: the engines' counters


@dataclass(frozen=True, slots=True)
class IsolationModel:
    """``--isolate-by``: per-tenant ``cache_salt`` (:mod:`prefixplan.simulation.isolation`); ``by``
    names the option's value: ``user`` or ``tenant`` (both the log's tenant id), or a field of the
    log record (a dotted path such as ``metadata.org_id``) that the reader takes the id from."""

    by: str = "tenant"

    @property
    def field(self) -> str | None:
        """The log field the tenant id is read from; None for the log's usual tenant id."""
        return None if self.by in ("user", "tenant") else self.by


@dataclass(frozen=True, slots=True)
class SimConfig:
    """What to simulate: the cache, the workload and the savings models.

    Attributes:
        headline_capacity: the savings refer to this capacity (first policy) ...
        headline_unbounded: ... or to the unbounded cache (default: the first capacity).
        notes: passed through to the result (e.g. skipped pins).
    """

    cache: CacheModel = field(default_factory=CacheModel)
    workload: Workload = field(default_factory=Workload)
    savings: SavingsModel = field(default_factory=SavingsModel)
    headline_capacity: float | None = None
    headline_unbounded: bool = False
    notes: tuple[str, ...] = ()
    fleet: FleetModel | None = None  # --replicas N --router ...: each replica its own cache
    load: LoadModel | None = None  # --rate-scale X: TTFT under load (simulation.load)
    waterfall: WaterfallModel | None = None  # where the hits go (simulation.waterfall)
    isolation: IsolationModel | None = None  # --isolate-by: what per-tenant salting costs

    def granularity(self) -> Granularity:
        return self.cache.granularity()
