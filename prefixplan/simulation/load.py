"""TTFT under load: the log replayed at its arrival times through a queue per replica (a model).

``prefixplan simulate --rate-scale X`` replays every request at ``t0 + (t - t0) / X`` (``X = 1``:
the log's own arrival times; 2: twice the rate) through :func:`~prefixplan.simulation.queue.replica_ttft`,
once with each request's cached prefix (its hits under the cache model) and once without
caching (every prompt token computed), and reports TTFT p50 / p95 / p99 of both:

* one replica, with the headline cache run's hits (and its tier load time added to TTFT);
* with ``--replicas N``, for every fleet size 2..N and every ``--router``: the fleet simulation
  (:mod:`prefixplan.simulation.fleet`) at the scaled times decides each request's replica and its
  hits there. Without caching a router has nothing to follow: the requests go round-robin (in
  arrival order), the same baseline for every router of a fleet size.

Step times come from the prefill profile (``a + b*tokens + c*pairs`` a step), decode steps from the
logged output lengths (``Workload.default_output`` where the log has none). What it leaves out is
listed in :data:`ASSUMPTIONS` and printed with the figures.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from prefixplan.errors import UsageError
from prefixplan.savings.prefill import PrefillProfile, percentiles
from prefixplan.simulation.fleet import FleetModel, FleetRequest, simulate_fleet
from prefixplan.simulation.queue import Engine, StepCost, replica_ttft

if TYPE_CHECKING:
    from prefixplan.trace.blocks import BlockTrace

LABEL = "TTFT under load (a model: timed replay, a queue per replica, chunked prefill)"
ASSUMPTIONS = (
    "every step's time is the prefill profile's a + b*tokens + c*(attention pairs); decode steps "
    "are priced by the same formula (1 token each)",
    "first come first served; KV memory for running requests always suffices (no preemption); no "
    "network, tokenization or sampling time beyond the profile's a",
    "one replica: the headline cache run's hits, at the log's own times (a TTL is not re-run at a "
    "scaled rate); fleets: routed and cached at the scaled times (in-flight counts from the "
    "in-batch model's service times)",
    "output lengths from the log; where a request has none the in-batch model's default is used",
)


@dataclass(frozen=True, slots=True)
class LoadModel:
    """What ``--rate-scale`` / ``--max-num-batched-tokens`` / ``--max-num-seqs`` ask for
    (``engine`` None: vLLM's ``serve`` defaults for the profile's GPU, :func:`vllm_defaults`)."""

    rate_scale: float = 1.0
    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = None

    def __post_init__(self) -> None:
        if not self.rate_scale > 0 or not np.isfinite(self.rate_scale):
            raise UsageError("--rate-scale must be a positive number", hint="1 = the log's own rate, 2 = twice it")
        for flag, value in (
            ("--max-num-batched-tokens", self.max_num_batched_tokens),
            ("--max-num-seqs", self.max_num_seqs),
        ):
            if value is not None and value < 1:
                raise UsageError(f"{flag} must be >= 1")

    def engine(self, profile: PrefillProfile) -> tuple[Engine, str]:
        """The scheduler limits and where they come from: the values given, the rest vLLM's
        ``serve`` defaults for the profile's GPU (:func:`vllm_defaults`)."""
        default, where = vllm_defaults(profile)
        tokens, seqs = self.max_num_batched_tokens, self.max_num_seqs
        if tokens is not None and seqs is not None:
            return Engine(tokens, seqs), "as given"
        if tokens is None and seqs is None:
            return default, where
        if tokens is not None:
            return Engine(tokens, min(default.max_num_seqs, tokens)), f"max_num_seqs: {where}"
        assert seqs is not None
        return Engine(max(default.max_num_batched_tokens, seqs), seqs), f"max_num_batched_tokens: {where}"


def vllm_defaults(profile: PrefillProfile) -> tuple[Engine, str]:
    """vLLM's ``vllm serve`` limits for the profile's GPU (vLLM 0.32, ``EngineArgs``: 16,384 tokens
    and 1,024 sequences from 160 GiB of memory, 8,192 and 1,024 from 70 GiB but on A100s, else
    2,048 and 256), and what they were taken for. A GPU the table does not know counts as the
    default profile's (an H100)."""
    from prefixplan.savings.derive import DEFAULT_GPU
    from prefixplan.savings.gpus import lookup_gpu

    try:
        gpu = lookup_gpu(profile.gpu)
    except UsageError:
        gpu = lookup_gpu(DEFAULT_GPU)
    gib = gpu.memory_gb * 1e9 / 2**30
    if gib >= 160:
        engine = Engine(16384, 1024)
    elif gib >= 70 and "a100" not in gpu.name.lower():
        engine = Engine(8192, 1024)
    else:
        engine = Engine(2048, 256)
    return engine, f"vLLM's serve defaults for {gpu.name}"


@dataclass(frozen=True, slots=True)
class LoadRow:
    """TTFT percentiles (p50, p95, p99 seconds) of one fleet size and router, with and without caching."""

    replicas: int
    router: str | None  # None: one replica, no routing
    cache: str  # the cache model whose hits were used
    hit_rate_tokens: float
    without: tuple[float, float, float]
    with_cache: tuple[float, float, float]

    def to_json(self) -> dict[str, Any]:
        def pct(p: tuple[float, float, float]) -> dict[str, float]:
            return {"p50_s": p[0], "p95_s": p[1], "p99_s": p[2]}

        return {
            "replicas": self.replicas,
            "router": self.router,
            "cache": self.cache,
            "hit_rate_tokens": self.hit_rate_tokens,
            "without": pct(self.without),
            "with": pct(self.with_cache),
        }


@dataclass(frozen=True, slots=True)
class LoadResult:
    """Everything the timed replay reports (:func:`replay_load`)."""

    rate_scale: float
    requests_per_s: float | None
    engine: Engine
    engine_from: str
    profile: str
    provenance: str
    default_output: int
    requests_without_output: int
    rows: tuple[LoadRow, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "model": LABEL,
            "rate_scale": self.rate_scale,
            "requests_per_s": self.requests_per_s,
            "max_num_batched_tokens": self.engine.max_num_batched_tokens,
            "max_num_seqs": self.engine.max_num_seqs,
            "engine_limits_from": self.engine_from,
            "profile": self.profile,
            "profile_provenance": self.provenance,
            "default_output_tokens": self.default_output,
            "requests_without_output_tokens": self.requests_without_output,
            "rows": [r.to_json() for r in self.rows],
            "assumptions": list(ASSUMPTIONS),
        }


@dataclass(frozen=True, slots=True)
class LoadInputs:
    """What the replay needs of a simulation besides the trace: the headline run's label, hits and
    tier load seconds, and for fleets the routing input and in-flight times."""

    headline: str
    cached: np.ndarray
    tier_load_s: np.ndarray | None = None
    fleet: FleetModel | None = None
    fleet_requests: Sequence[FleetRequest] = ()
    service_s: np.ndarray | None = None


def fleet_ttft(
    arrival: np.ndarray,
    prompt: np.ndarray,
    cached: np.ndarray,
    output: np.ndarray,
    replica: np.ndarray,
    cost: StepCost,
    engine: Engine,
) -> np.ndarray:
    """TTFT of every request (arrival order) when request ``i`` runs on replica ``replica[i]`` with
    ``cached[i]`` of its ``prompt[i]`` tokens reused: each replica's requests through its own queue."""
    out = np.zeros(arrival.shape[0], dtype=np.float64)
    for rep in np.unique(replica).tolist():
        idx = np.flatnonzero(replica == rep)
        hit = cached[idx]
        out[idx] = replica_ttft(arrival[idx], prompt[idx] - hit, hit, output[idx], cost, engine)
    return out


def _row(
    replicas: int,
    router: str | None,
    cache: str,
    arrival: np.ndarray,
    prompt: np.ndarray,
    output: np.ndarray,
    cached: np.ndarray,
    replica: np.ndarray,
    cost: StepCost,
    engine: Engine,
    without: tuple[float, float, float],
    extra_s: np.ndarray | None = None,
) -> LoadRow:
    with_cache = fleet_ttft(arrival, prompt, cached, output, replica, cost, engine)
    if extra_s is not None:
        with_cache = with_cache + extra_s
    total = int(prompt.sum())
    return LoadRow(
        replicas, router, cache, float(cached.sum()) / total if total else 0.0, without, percentiles(with_cache)
    )


def replay_load(
    trace: BlockTrace,
    inputs: LoadInputs,
    model: LoadModel,
    profile: PrefillProfile,
    default_output: int,
) -> LoadResult:
    """TTFT percentiles under load for one replica and every fleet size and router (module docstring)."""
    engine, engine_from = model.engine(profile)
    cost = StepCost(profile.a, profile.b, profile.c)
    times = np.asarray(trace.times, dtype=np.float64)
    t0 = float(times[0]) if times.size else 0.0
    arrival = t0 + (times - t0) / model.rate_scale
    prompt = np.asarray(trace.prompt_tokens, dtype=np.int64)
    logged = np.asarray(trace.output_tokens, dtype=np.int64)
    output = np.where(logged > 0, logged, default_output)
    cached = np.asarray(inputs.cached, dtype=np.int64)
    nothing = np.zeros_like(cached)

    def baseline(n: int) -> tuple[float, float, float]:  # no cache: round-robin over n replicas
        spread = np.arange(prompt.shape[0], dtype=np.int64) % n
        return percentiles(fleet_ttft(arrival, prompt, nothing, output, spread, cost, engine))

    one = np.zeros(prompt.shape[0], dtype=np.int64)
    args = (arrival, prompt, output)
    rows = [_row(1, None, inputs.headline, *args, cached, one, cost, engine, baseline(1), inputs.tier_load_s)]
    fleet = inputs.fleet
    if fleet is not None and inputs.service_s is not None:
        scaled = replace(trace, times=arrival)
        for n in range(2, fleet.replicas + 1):
            without = baseline(n)
            for run in simulate_fleet(scaled, inputs.fleet_requests, replace(fleet, replicas=n), inputs.service_s):
                label = f"fleet of {n}, each its own cache"
                rows.append(_row(n, run.policy, label, *args, run.cached, run.replica, cost, engine, without))
    span = float(arrival[-1] - arrival[0]) if arrival.size > 1 else 0.0
    return LoadResult(
        rate_scale=model.rate_scale,
        requests_per_s=(arrival.size - 1) / span if span > 0 else None,
        engine=engine,
        engine_from=engine_from,
        profile=profile.name,
        provenance=profile.provenance,
        default_output=default_output,
        requests_without_output=int((logged <= 0).sum()),
        rows=tuple(rows),
    )
