"""What a simulation returns: one :class:`CacheRun` per cache model, the :class:`SimResult`, and
their JSON form.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from prefixplan.savings.prefill import (
    TimeSavings,
)
from prefixplan.savings.pricing import (
    Money,
)
from prefixplan.simulation.fleet import FleetRun
from prefixplan.simulation.load import LoadResult
from prefixplan.simulation.risk import PrefixRisk
from prefixplan.trace.storage.spill import ShelvedArray

if TYPE_CHECKING:
    from prefixplan.simulation.attribution import Waterfall


@dataclass(frozen=True, slots=True)
class CacheRun:
    """Outcome of one cache model, in real tokens."""

    label: str
    policy: str
    capacity_tokens: float | None
    granularity: str
    prompt_tokens: int
    hit_tokens: int
    requests: int
    requests_hit: int
    evictions: int
    # per-request reused prefix tokens (:attr:`cached`); a sweep's other runs keep theirs on disk
    per_request: np.ndarray | ShelvedArray
    loaded: dict[str, int] = field(default_factory=dict)  # lower tier -> tokens loaded
    write_tokens: int = 0  # Anthropic cache writes
    partition: dict[str, Any] | None = None  # tokens per share of the capacity (pinned / policy / running)

    @property
    def cached(self) -> np.ndarray:
        """Reused prefix tokens of each request (replay order)."""
        values = self.per_request
        return values.load() if isinstance(values, ShelvedArray) else values

    @property
    def computed_tokens(self) -> int:
        return self.prompt_tokens - self.hit_tokens

    @property
    def hit_rate_tokens(self) -> float:
        return self.hit_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    @property
    def hit_rate_requests(self) -> float:
        return self.requests_hit / self.requests if self.requests else 0.0


@dataclass(frozen=True, slots=True)
class SimResult:
    """Everything :func:`simulate` computed."""

    granularity: str
    n_requests: int
    prompt_tokens: int
    runs: tuple[CacheRun, ...]
    headline: str  # label of the run the savings refer to
    in_batch: str | None  # label of the generation (a) run, when modelled
    persistent: str  # label of the generation (b) unbounded run
    curves: dict[str, list[tuple[float, float, float]]]  # policy -> (capacity, token rate, request rate)
    savings: TimeSavings | None
    money: Money | None
    self_hosted_usd: float | None
    kv_bytes_per_token: int | None
    risk: tuple[PrefixRisk, ...]
    notes: tuple[str, ...]
    risk_capacity_tokens: float | None = None  # total capacity of the eviction-risk runs
    fleet: tuple[FleetRun, ...] = ()  # --replicas/--router: one run per routing policy
    load: LoadResult | None = None  # --rate-scale: TTFT under load
    tier_load_s: np.ndarray | None = None  # per request: the headline run's lower-tier load seconds
    waterfall: Waterfall | None = None  # where the hits go (simulation.waterfall)
    isolation: dict[str, Any] | None = None  # --isolate-by (simulation.isolation)

    def run(self, label: str) -> CacheRun:
        for r in self.runs:
            if r.label == label:
                return r
        raise KeyError(label)


def _run_json(run: CacheRun, per_request: bool) -> dict[str, Any]:
    out: dict[str, Any] = {
        "label": run.label,
        "policy": run.policy,
        "capacity_tokens": run.capacity_tokens,
        "granularity": run.granularity,
        "prompt_tokens": run.prompt_tokens,
        "hit_tokens": run.hit_tokens,
        "prefill_tokens_computed": run.computed_tokens,
        "hit_rate_tokens": run.hit_rate_tokens,
        "hit_rate_requests": run.hit_rate_requests,
        "requests_hit": run.requests_hit,
        "evictions_blocks": run.evictions,
    }
    if run.loaded:
        out["loaded_tokens"] = run.loaded
    if run.write_tokens:
        out["cache_write_tokens"] = run.write_tokens
    if run.partition:
        out["partition"] = run.partition
    if per_request:
        out["cached_tokens_per_request"] = run.cached.tolist()
    return out


def to_json(result: SimResult) -> dict[str, Any]:
    """JSON-ready dict (per-request cached lengths for in-batch, unbounded and headline runs)."""
    main = {result.headline, result.persistent, result.in_batch}
    sav = result.savings
    return {
        "granularity": result.granularity,
        "requests": result.n_requests,
        "prompt_tokens": result.prompt_tokens,
        "headline": result.headline,
        "in_batch": result.in_batch,
        "persistent": result.persistent,
        "runs": [_run_json(r, r.label in main) for r in result.runs],
        "curves": {
            p: [{"capacity_tokens": c, "hit_rate_tokens": t, "hit_rate_requests": q} for c, t, q in pts]
            for p, pts in result.curves.items()
        },
        "savings": None
        if sav is None
        else {
            "profile": sav.profile,
            "profile_is_assumption": sav.assumed,
            "profile_provenance": sav.provenance,
            "gpu_seconds_without": sav.gpu_seconds_without,
            "gpu_seconds_with": sav.gpu_seconds_with,
            "gpu_seconds_saved": sav.gpu_seconds_saved,
            "ttft_p50_without_s": sav.ttft_without[0],
            "ttft_p95_without_s": sav.ttft_without[1],
            "ttft_p99_without_s": sav.ttft_without[2],
            "ttft_p50_with_s": sav.ttft_with[0],
            "ttft_p95_with_s": sav.ttft_with[1],
            "ttft_p99_with_s": sav.ttft_with[2],
            "queueing_modelled": False,
        },
        "money": None
        if result.money is None
        else {
            "provider": result.money.provider,
            "model": result.money.model,
            "prices_as_of": result.money.as_of,
            "usd_without": result.money.cost_without,
            "usd_with": result.money.cost_with,
            "usd_saved": result.money.saved,
            "detail": result.money.detail,
        },
        "self_hosted_usd_saved": result.self_hosted_usd,
        "kv_bytes_per_token": result.kv_bytes_per_token,
        "risk_capacity_tokens": result.risk_capacity_tokens,
        "risk": [
            {
                "label": r.label,
                "tokens": r.tokens,
                "uses": r.uses,
                "by_model": {k: {"reprefills": a, "reprefill_tokens": b} for k, (a, b) in r.by_model.items()},
            }
            for r in result.risk
        ],
        "notes": list(result.notes),
        **({"fleet": [run.to_json() for run in result.fleet]} if result.fleet else {}),
        **({"ttft_under_load": result.load.to_json()} if result.load is not None else {}),
        **({"waterfall": result.waterfall.to_json()} if result.waterfall is not None else {}),
        **({"isolation": result.isolation} if result.isolation is not None else {}),
    }
