"""The simulation ``analyze`` runs beside its candidates, and the record section it writes.

Besides the in-batch / persistent runs and the LRU capacity curve (:mod:`prefixplan.simulation.simulator`),
the headline section carries what the report's next steps and plots need, all computed from the
same replay and the same savings model:

* a fine capacity sweep (10 points per decade, from 1e4 tokens up to the log's whole block
  footprint, where LRU equals the unbounded cache), so "the capacity for 90% of the unbounded
  hit rate" is read off the recorded curve;
* ``savings_curve``: GPU-seconds saved at every swept capacity (the prefill-time model applied to
  each run's per-request hits);
* ``timeline``: hit rates in equal time windows (warm-up and drift);
* ``ttft``: TTFT histograms without caching and at the headline cache;
* ``pinned``: the top shareable prefixes pinned (and warmed) in a 20% partition of the headline
  cache, against plain LRU at the same capacity;
* ``prefill_profile`` and ``gpu_hour_price``: the coefficients those figures used.

Readers treat every one of these fields as optional (older records lack them).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from prefixplan.errors import UsageError
from prefixplan.savings.prefill import PrefillProfile, load_profile, profile_json
from prefixplan.simulation.config import CacheModel, IsolationModel, SimConfig
from prefixplan.simulation.models import run_model
from prefixplan.simulation.replay import replay
from prefixplan.simulation.result import CacheRun, SimResult, to_json
from prefixplan.simulation.simulator import Simulation
from prefixplan.simulation.spec import CacheSpec, capacity_blocks, choose_pins

if TYPE_CHECKING:
    from prefixplan.analysis.record import CandidateRecord
    from prefixplan.core.granularity import Granularity
    from prefixplan.trace.blocks import BlockTrace

SWEEP_STEPS = (1.0, 1.25, 1.6, 2.0, 2.5, 3.15, 4.0, 5.0, 6.3, 8.0)
"""Multipliers per decade of the headline capacity sweep (the R10 series)."""
SWEEP_FROM = 1e4
SWEEP_MAX = 1e10
PIN_FRACTION = 0.2
TIMELINE_WINDOWS = 40
TTFT_BINS = 24


def sweep_capacities(footprint_tokens: float, start: float = SWEEP_FROM) -> tuple[float, ...]:
    """Capacities (tokens) from ``start`` in R10 steps up to the first one holding ``footprint_tokens``.

    At a capacity that holds every distinct block of the log, LRU never evicts and equals the
    unbounded cache, so the sweep can stop there.
    """
    out: list[float] = []
    decade = start
    while decade <= SWEEP_MAX:
        for m in SWEEP_STEPS:
            cap = float(f"{m * decade:.4g}")
            out.append(cap)
            if cap >= footprint_tokens:
                return tuple(out)
        decade *= 10
    return tuple(out)


class HeadlineSimulation(Simulation):
    """:class:`Simulation` that keeps its block trace, sweeps capacities up to the log's footprint
    (unless capacities were given) and writes the record's ``simulation`` section."""

    def __init__(self, config: SimConfig, *, auto_sweep: bool = True) -> None:
        super().__init__(config)
        self.auto_sweep = auto_sweep
        self._trace: BlockTrace | None = None
        self._shared: BlockTrace | None = None
        self._result: SimResult | None = None

    def can_share(self, granularity: Granularity) -> bool:
        """Whether the analysis's block trace at ``granularity`` is this simulation's block trace
        (the same blocks and replay order; no breakpoint model, no fleet), so that
        :meth:`use_trace` can replace adding every row again."""
        return (
            self._anthropic is None
            and self.config.fleet is None
            and self._isolation is None  # the salted traces are built from the rows
            and self._builder.granularity == granularity
        )

    def use_trace(self, trace: BlockTrace) -> None:
        """Replay ``trace`` (built by the analysis from the same rows) instead of rows added here."""
        if self._count:
            raise RuntimeError("use_trace after rows were added")
        self._shared = trace

    def result(self) -> SimResult:
        """Replay the requests added so far (once; later calls return the same result)."""
        if self._result is not None:
            return self._result
        trace = self._shared if self._shared is not None else self._builder.finish()
        config = self.config
        if self.auto_sweep and config.cache.provider is None:
            bt = int(trace.block_tokens.max()) if trace.n_requests else config.granularity().block_size
            caps = set(sweep_capacities(trace.n_distinct_blocks * max(1, bt)))
            if config.headline_capacity:
                caps.add(float(config.headline_capacity))
            config = replace(config, cache=replace(config.cache, capacities=tuple(sorted(caps))))
            self.config = config
        self._trace = trace
        result = replay(trace, config, self._anthropic)
        if self._isolation is not None and config.isolation is not None:
            result = replace(result, isolation=self._isolation.result(config, result, config.isolation.by))
        self._result = result
        return result

    def section(self, configured_capacity: float | None, candidates: Sequence[CandidateRecord] = ()) -> dict[str, Any]:
        """The record's ``simulation`` section: :func:`headline_json` plus the fields of this module."""
        result = self.result()
        data = headline_json(result, configured_capacity)
        trace = self._trace
        if trace is None or not trace.n_requests or result.in_batch is None:
            return data
        profile = self.config.savings.profile or load_profile(None)
        price = (
            self.config.savings.gpu_hour_price
            if self.config.savings.gpu_hour_price is not None
            else profile.gpu_hour_price
        )
        data["prefill_profile"] = profile_json(profile)
        data["gpu_hour_price"] = price
        data["savings_curve"] = _savings_curve(trace, result, profile)
        data["timeline"] = timeline(trace, result)
        data["ttft"] = ttft_histogram(trace, result.run(result.headline), profile)
        pinned = self._pinned(trace, result, profile, candidates)
        if pinned is not None:
            data["pinned"] = pinned
        return data

    def _pinned(
        self,
        trace: BlockTrace,
        result: SimResult,
        profile: PrefillProfile,
        candidates: Sequence[CandidateRecord],
    ) -> dict[str, Any] | None:
        """Pin (and warm) the top shareable prefixes that fit in 20% of the headline cache (with an
        unbounded headline: of the smallest swept LRU cache reaching 90% of the unbounded hit rate)."""
        head = result.run(result.headline)
        if self.config.cache.running_fraction or self.config.cache.pinned_fraction:
            return None
        if head.capacity_tokens is None or head.policy != "lru":
            target = 0.9 * result.run(result.persistent).hit_rate_tokens
            sized = [r for r in result.runs if r.policy == "lru" and r.capacity_tokens is not None]
            found = next(
                (r for r in sorted(sized, key=lambda r: r.capacity_tokens or 0.0) if r.hit_rate_tokens >= target), None
            )
            if found is None:
                return None
            head = found
        usable = [c for c in candidates if not c.withheld and c.token_ids is not None]
        if not usable:
            return None
        budget = math.floor(capacity_blocks(trace, head.capacity_tokens) * PIN_FRACTION)
        chosen: list[tuple[str, np.ndarray]] = []
        ranks: list[int] = []
        blocks = 0
        for c in usable:
            pins = [*chosen, (c.namespace, np.asarray(c.token_ids, dtype=np.uint32))]
            n = len(choose_pins(trace, pins, math.inf))
            if n == blocks:
                continue  # nothing of it occurs in this trace (or a parent already covers it)
            if n > budget:
                break
            chosen, blocks = pins, n
            ranks.append(int(c.rank))
        if not chosen:
            return None
        spec = CacheSpec("lru", head.capacity_tokens, None, PIN_FRACTION, tuple(chosen), prewarm_pins=True)
        hits = run_model(trace, spec).hit_blocks * trace.block_tokens
        hit_tokens = int(hits.sum())
        prompt = trace.prompt_tokens.astype(np.float64)
        with_pins = float(profile.seconds(prompt - hits, hits).sum()) * profile.gpus
        plain = float(profile.seconds(prompt - head.cached, head.cached).sum()) * profile.gpus
        bt = int(trace.block_tokens.max())
        return {
            "ranks": ranks,
            "pinned_fraction": PIN_FRACTION,
            "capacity_tokens": head.capacity_tokens,
            "pinned_tokens": blocks * bt,
            "prewarmed": True,
            "hit_tokens": hit_tokens,
            "hit_rate_tokens": hit_tokens / head.prompt_tokens if head.prompt_tokens else 0.0,
            "baseline_label": head.label,
            "baseline_hit_tokens": head.hit_tokens,
            "baseline_hit_rate_tokens": head.hit_rate_tokens,
            "gpu_seconds_saved_vs_baseline": plain - with_pins,
        }


def _savings_curve(trace: BlockTrace, result: SimResult, profile: PrefillProfile) -> dict[str, list[dict[str, Any]]]:
    """GPU-seconds saved at every capacity of every policy curve (same model as the headline savings)."""
    n = trace.prompt_tokens.astype(np.float64)
    without = float(profile.seconds(n, 0.0).sum())
    by_key: dict[tuple[str, float | None], CacheRun] = {(r.policy, r.capacity_tokens): r for r in result.runs}
    out: dict[str, list[dict[str, Any]]] = {}
    for policy, pts in result.curves.items():
        rows = []
        for cap, _, _ in pts:
            run = by_key.get((policy, cap))
            if run is None:
                continue
            hit = run.cached.astype(np.float64)
            saved = (without - float(profile.seconds(n - hit, hit).sum())) * profile.gpus
            rows.append({"capacity_tokens": cap, "gpu_seconds_saved": saved})
        out[policy] = rows
    return out


def timeline(trace: BlockTrace, result: SimResult, windows: int = TIMELINE_WINDOWS) -> dict[str, Any]:
    """Token hit rates in equal time windows for the in-batch, unbounded and headline runs."""
    times = trace.times.astype(np.float64)
    t0, t1 = float(times.min()), float(times.max())
    k = max(1, min(windows, trace.n_requests))
    edges = np.linspace(t0, t1 if t1 > t0 else t0 + 1.0, k + 1)
    idx = np.clip(np.searchsorted(edges, times, side="right") - 1, 0, k - 1)
    prompt = np.bincount(idx, weights=trace.prompt_tokens, minlength=k)
    labels = {"in_batch": result.in_batch, "persistent": result.persistent, "headline": result.headline}
    series: dict[str, Any] = {}
    for name, label in labels.items():
        if label is None:
            continue
        run = result.run(label)
        hits = np.bincount(idx, weights=run.cached, minlength=k)
        series[name] = {"label": label, "hit_tokens": [int(h) for h in hits]}
    return {
        "start": t0,
        "edges_s": [float(e - t0) for e in edges],
        "requests": [int(c) for c in np.bincount(idx, minlength=k)],
        "prompt_tokens": [int(p) for p in prompt],
        "series": series,
    }


def ttft_histogram(trace: BlockTrace, run: CacheRun, profile: PrefillProfile, bins: int = TTFT_BINS) -> dict[str, Any]:
    """Requests per TTFT bin (log-spaced seconds) without caching and with ``run``'s hits."""
    n = trace.prompt_tokens.astype(np.float64)
    hit = run.cached.astype(np.float64)
    before = np.asarray(profile.seconds(n, 0.0), dtype=np.float64)
    after = np.asarray(profile.seconds(n - hit, hit), dtype=np.float64)
    lo = max(float(min(before.min(), after.min())), 1e-4)
    hi = max(float(max(before.max(), after.max())), lo * 1.01)
    edges = np.geomspace(lo, hi * 1.0001, bins + 1)
    return {
        "run": run.label,
        "edges_s": [float(e) for e in edges],
        "without": [int(c) for c in np.histogram(np.clip(before, lo, None), edges)[0]],
        "with": [int(c) for c in np.histogram(np.clip(after, lo, None), edges)[0]],
    }


def headline_simulation(
    engine: str = "vllm",
    block_size: int | None = None,
    capacities: Sequence[float] | None = None,
    configured_capacity: float | None = None,
    *,
    isolate_by: str | None = None,
) -> HeadlineSimulation:
    """The simulation ``analyze`` runs beside its candidates: in-batch vs persistent cache and an
    LRU capacity curve at the analysis granularity (savings at ``configured_capacity`` when
    given, else at the unbounded cache). Without ``capacities`` the curve is the fine sweep of
    :func:`sweep_capacities`. ``isolate_by`` (``tenant`` or ``user``) adds what per-tenant
    ``cache_salt`` costs (:mod:`prefixplan.simulation.isolation`)."""
    caps = set(capacities or ()) | ({configured_capacity} if configured_capacity else set())
    return HeadlineSimulation(
        SimConfig(
            cache=CacheModel(engine=engine, block_size=block_size, capacities=tuple(sorted(caps))),
            headline_capacity=configured_capacity,
            headline_unbounded=configured_capacity is None,
            isolation=_isolation(isolate_by),
        ),
        auto_sweep=capacities is None,
    )


def _isolation(by: str | None) -> IsolationModel | None:
    """analyze's ``--isolate-by``: the log's tenant id only (a field of the record would change
    the tenants analyze counts before it shows a prefix's text)."""
    if by is None:
        return None
    if IsolationModel(by).field is not None:
        raise UsageError(
            f"analyze --isolate-by {by}: analyze salts by the log's tenant id (tenant or user)",
            hint="another field of the record: prefixplan simulate --isolate-by FIELD",
        )
    return IsolationModel(by)


def headline_json(result: SimResult, configured_capacity: float | None) -> dict[str, Any]:
    """The record's ``simulation`` section without the fields of this module (per-request arrays left out)."""
    data = to_json(result)
    for run in data.get("runs", []):
        run.pop("cached_tokens_per_request", None)
    data["configured_capacity_tokens"] = configured_capacity
    return data
