"""Replaying a finished block trace through every configured cache model (:func:`replay`): the
in-batch and persistent bounds, each policy at each capacity, tiers, pins, savings, TTFT and the
fleet's routers; what :class:`~prefixplan.simulation.simulator.Simulation` and the analysis's
headline run once the requests are in."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from prefixplan.core.granularity import (
    Granularity,
)
from prefixplan.core.memory import release_free_memory
from prefixplan.savings.prefill import (
    load_profile,
    time_savings,
)
from prefixplan.savings.pricing import (
    hosted_cost,
    load_prices,
    self_hosted_saving,
)
from prefixplan.simulation.batch import in_batch_hits, service_times
from prefixplan.simulation.config import SimConfig
from prefixplan.simulation.hosted import AnthropicCache
from prefixplan.simulation.models import run_model
from prefixplan.simulation.result import CacheRun, SimResult
from prefixplan.simulation.risk import PrefixRisk, eviction_risk
from prefixplan.simulation.spec import AutoPromote, CacheSpec, capacity_blocks, parse_ttl
from prefixplan.trace.blocks import BlockTrace
from prefixplan.trace.nodes import build_tree
from prefixplan.trace.storage.mapped import drop_resident, mapped_copy
from prefixplan.trace.storage.spill import ArrayShelf, ShelvedArray

SHELVE_FROM_REQUESTS = 1 << 16
"""Logs of at least this many requests keep a sweep's per-request results on disk, run by run."""
QUEUEING_NOTE = "TTFT is prefill time (+ tier loads) only: queueing is not modelled"
LOAD_NOTE = (
    "the savings' TTFT is prefill time (+ tier loads) only; TTFT under load adds queueing "
    "(--rate-scale: a model, see docs/simulate.md)"
)


def granularity_label(trace: BlockTrace, gran: Granularity) -> str:
    """The granularity in effect, for every figure: blocks of the trace are never cut finer, so a
    Mooncake trace of 512-token blocks replayed at vLLM's 16 reuses 512-token blocks."""
    if gran.breakpoints is not None or not trace.n_requests:
        return gran.describe()
    sizes = sorted({int(b) for b in np.unique(trace.block_tokens).tolist()})
    if sizes == [gran.block_size]:
        return gran.describe()
    text = replace(gran, block_size=sizes[-1]).describe()
    if len(sizes) > 1:
        text = text.replace(f"{sizes[-1]}-token", "/".join(str(b) for b in sizes) + "-token", 1)
    return f"{text} (trace blocks in effect; {gran.block_size} configured)"


def _run_from_blocks(
    trace: BlockTrace,
    label: str,
    policy: str,
    cap: float | None,
    hits: np.ndarray,
    evictions: int,
    gran: Granularity,
    tier_blocks: dict[str, np.ndarray] | None = None,
) -> CacheRun:
    cached = hits * trace.block_tokens
    if gran.min_tokens and gran.breakpoints is None:
        cached = np.where(cached >= gran.min_tokens, cached, 0)
    loaded = {k: int((v * trace.block_tokens).sum()) for k, v in (tier_blocks or {}).items()}
    return CacheRun(
        label,
        policy,
        cap,
        granularity_label(trace, gran),
        int(trace.prompt_tokens.sum()),
        int(cached.sum()),
        trace.n_requests,
        int((cached > 0).sum()),
        int(evictions),
        # int32 when it fits: a capacity sweep keeps one array per capacity (1M requests: 4 MB each)
        cached.astype(np.int32 if not cached.shape[0] or int(cached.max()) < 2**31 else np.int64),
        loaded,
    )


def policy_spec(config: SimConfig, policy: str, capacity: float, ttl: float | None) -> CacheSpec:
    """The cache model of ``policy`` at the total ``capacity`` (tokens) with ``ttl``: the running
    share taken off, the pinned partition, pins, auto-promotion and tiers as configured."""
    cache_tok, frac = config.cache.partition(capacity)
    return CacheSpec(
        policy=policy,
        capacity_tokens=cache_tok,
        ttl_s=ttl,
        pinned_fraction=frac,
        pins=config.cache.pins,
        auto_promote=config.cache.auto_promote,
        tiers=config.cache.tiers if policy == "lru" else (),
        prewarm_pins=config.cache.prewarm_pins,
    )


def default_priorities(trace: BlockTrace, config: SimConfig) -> np.ndarray | None:
    """Per-row priorities of the ``priority`` policy (given, else 1 for requests holding a hot prefix or pin)."""
    return _default_priorities(trace, config)


def _ttl_note(config: SimConfig, in_batch: bool) -> str:
    """How the TTL is measured: from the end of the last request that used a block."""
    work = config.workload
    text = "cache TTL counts from the end of the last request that used a block (its arrival + "
    if work.batch_window is not None:
        return text + f"the {work.batch_window:g} s batch window)"
    if in_batch:
        return text + "the in-batch service time)"
    return (
        text + f"prompt/{work.prefill_tps:g} tok/s + output/{work.decode_tps:g} tok/s, output "
        f"{work.default_output} when unknown: assumption)"
    )


def _partition_json(trace: BlockTrace, config: SimConfig, pol: str, cap: float, pinned_blocks: int) -> dict | None:
    if not (config.cache.pinned_fraction or config.cache.running_fraction):
        return None
    cache_tok, frac = config.cache.partition(cap)
    bt = int(trace.block_tokens.max()) if trace.n_requests else config.granularity().block_size
    blocks = capacity_blocks(trace, cache_tok)
    pin_blocks = int(blocks * frac) if frac else 0
    pinned = pin_blocks * bt
    return {
        "total_tokens": cap,
        "pinned_fraction": config.cache.pinned_fraction,
        "pinned_tokens": pinned,
        "pinned_used_tokens": int(pinned_blocks) * bt,
        "pinned_by": "auto-promotion" if config.cache.auto_promote else ("pins" if config.cache.pins else "none"),
        "policy": pol,
        "policy_fraction": round(1.0 - config.cache.pinned_fraction - config.cache.running_fraction, 9),
        "policy_tokens": int(blocks - pin_blocks) * bt,
        "running_fraction": config.cache.running_fraction,
        "running_tokens": cap - cache_tok,
    }


def _default_priorities(trace: BlockTrace, config: SimConfig) -> np.ndarray | None:
    if config.workload.priorities is not None:
        return np.asarray(config.workload.priorities)[trace.order]  # given per input request; rows are arrivals
    hot = list(config.workload.hot_prefixes) or [("pin", ns, t) for ns, t in config.cache.pins]
    if not hot:
        return None
    from prefixplan.simulation.risk import prefix_users

    tree = build_tree(trace)
    prio = np.zeros(trace.n_requests, dtype=np.int64)
    intervals = tree.dfs_intervals()
    for _, ns, tokens in hot:
        ids = trace.resolve(np.asarray(tokens, dtype=np.uint32), ns)
        if ids:
            prio[prefix_users(trace, tree, ids[-1], intervals)] = 1
    return prio


def _settle(trace: BlockTrace, *mapped: np.ndarray) -> None:
    """Between two cache models: hand back the mapped pages the model read in (the trace's and
    ``mapped``: :mod:`prefixplan.trace.storage.mapped`) and the memory its temporaries freed, so that the
    next model's peak does not stack on the last one's."""
    trace.drop_resident()
    drop_resident(*mapped)
    release_free_memory()


def replay(trace: BlockTrace, config: SimConfig, anthropic: AnthropicCache | None) -> SimResult:
    gran = config.granularity()
    ttl = parse_ttl(config.cache.ttl)
    notes = [QUEUEING_NOTE if config.load is None else LOAD_NOTE, *config.notes]
    runs: list[CacheRun] = []
    curves: dict[str, list[tuple[float, float, float]]] = {}
    in_batch_label = None
    work = config.workload
    # per request, file-backed (trace.storage.mapped): read by the in-batch model and the TTL's expiry
    service = mapped_copy(
        service_times(trace, work.batch_window, work.prefill_tps, work.decode_tps, work.default_output)
    )
    if anthropic is not None:
        read = np.asarray(anthropic.read, dtype=np.int64)
        ttl_s = ttl if ttl is not None else 300.0
        label = f"anthropic cache, ttl {ttl_s:g}s"
        runs.append(
            CacheRun(
                label,
                "anthropic",
                None,
                gran.describe(),
                int(trace.prompt_tokens.sum()),
                int(read.sum()),
                trace.n_requests,
                int((read > 0).sum()),
                0,
                read,
                {},
                int(sum(anthropic.write)),
            )
        )
        persistent = headline = label
    else:
        if config.cache.provider is None:
            hits = in_batch_hits(trace, build_tree(trace), service)
            _settle(trace, service)
            in_batch_label = "in-batch sharing (generation a)"
            runs.append(_run_from_blocks(trace, in_batch_label, "in-batch", None, hits, 0, gran))
            if config.workload.batch_window is None:
                notes.append(
                    f"in-batch service time = prompt/{config.workload.prefill_tps:g} tok/s + output/"
                    f"{config.workload.decode_tps:g} tok/s (output {config.workload.default_output} when unknown): assumption"
                )
        if config.cache.provider is not None and ttl is None:
            ttl = 300.0
            notes.append("hosted cache TTL assumed 5m (use --cache-ttl)")
        if ttl is not None:
            notes.append(_ttl_note(config, in_batch_label is not None))
        base = CacheSpec(policy="lru", ttl_s=ttl)
        out = run_model(trace, base, service_s=service)
        _settle(trace, service)
        persistent = "radix cache, unbounded (generation b)" + (f", ttl {ttl:g}s" if ttl is not None else "")
        runs.append(_run_from_blocks(trace, persistent, "infinite", None, out.hit_blocks, 0, gran))
        headline = persistent
        stacks: dict = {}
        tier_hits: dict[str, dict[str, np.ndarray]] = {}
        # a sweep keeps one per-request array per run: on disk for large logs (the headline's comes back)
        shelf = ArrayShelf() if trace.n_requests >= SHELVE_FROM_REQUESTS else None
        prios = _default_priorities(trace, config) if "priority" in config.cache.policies else None
        for pol in config.cache.policies:
            curve = []
            for cap in config.cache.capacities:
                spec = policy_spec(config, pol, float(cap), ttl)
                res = run_model(trace, spec, priorities=prios, service_s=service, _stack_cache=stacks)
                _settle(trace, service)
                label = spec.label(
                    float(cap),
                    config.cache.pinned_fraction,
                    config.cache.running_fraction,
                    config.savings.kv.bytes_per_token if config.savings.kv else None,
                )
                run = _run_from_blocks(
                    trace, label, pol, float(cap), res.hit_blocks, res.evictions, gran, res.tier_blocks
                )
                run = replace(run, partition=_partition_json(trace, config, pol, float(cap), res.pinned_blocks))
                if res.tier_blocks:
                    tier_hits[label] = res.tier_blocks
                if shelf is not None:
                    run = replace(run, per_request=shelf.put(run.cached))
                runs.append(run)
                curve.append((float(cap), run.hit_rate_tokens, run.hit_rate_requests))
                if config.headline_capacity is not None:
                    if float(cap) == float(config.headline_capacity) and pol == config.cache.policies[0]:
                        headline = run.label
                elif headline == persistent and not config.headline_unbounded:
                    headline = run.label
            if curve:
                curves[pol] = curve
    at = next(i for i, r in enumerate(runs) if r.label == headline)
    if isinstance(runs[at].per_request, ShelvedArray):
        runs[at] = replace(runs[at], per_request=runs[at].cached)
    head = runs[at]
    if config.cache.pins and config.cache.pinned_fraction and head.partition and config.cache.auto_promote is None:
        from prefixplan.simulation.spec import choose_pins

        bt = int(trace.block_tokens.max()) if trace.n_requests else gran.block_size
        need = len(choose_pins(trace, config.cache.pins, math.inf)) * bt
        room = head.partition["pinned_tokens"]
        if need > room:
            notes.append(
                f"the pins need {need:,} tokens but the pinned partition holds {room:,} at "
                f"{head.capacity_tokens:,.0f} tokens: pins are admitted in rank order, the rest cut"
            )
        elif need == 0:
            notes.append("no pinned prefix occurs in this log (tokenizer, namespace or block size differ?)")
    # savings
    hosted = config.cache.provider is not None
    profile = config.savings.profile or load_profile(None)
    if hosted:
        notes.append(
            "GPU time and TTFT belong to the provider and are not modelled for hosted APIs; the cost is (use --model)"
        )
    elif profile.assumed:
        notes.append(f"prefill profile {profile.name!r} is an assumption ({profile.source}); use --profile")
    elif profile.basis == "derived":
        notes.append(
            f"prefill profile {profile.name!r} {profile.provenance}: a roofline model, not measured on "
            "your endpoint (prefixplan calibrate measures one; --profile uses it)"
        )
    if anthropic is not None and head.hit_tokens == 0 and head.write_tokens > 0:
        notes.append(
            "no request read a cached prefix: a read needs an earlier request's breakpoint to end on this "
            "request's shared prefix, and with a breakpoint only at each prompt's end that happens only when a "
            "whole earlier prompt is a prefix of a later one (multi-turn); cache writes cost 1.25x (5m) or 2x (1h), "
            "so caching without reads costs more than no caching. Put cache_control after the shared system "
            "prompt and tools (prefixplan analyze shows how long they are) and simulate with --breakpoints request"
        )
    load_s = None
    if head.loaded and config.cache.tiers:
        if config.savings.kv is None:
            notes.append("tier load time not counted: no KV size (use --model-config or --model)")
        else:
            load_s = np.zeros(trace.n_requests)
            for tier in config.cache.tiers:
                tok = tier_hits[head.label][tier.name] * trace.block_tokens
                if tier.bandwidth_bytes_per_s > 0:
                    load_s += tok * config.savings.kv.bytes_per_token / tier.bandwidth_bytes_per_s
                load_s += np.where(tok > 0, tier.latency_s, 0.0)
    savings = (
        time_savings(trace.prompt_tokens, head.cached, profile, load_s) if trace.n_requests and not hosted else None
    )
    money = None
    self_usd = None
    if config.cache.provider is not None and config.cache.model:
        table = load_prices(config.savings.prices_file)
        ttl_label = "1h" if (ttl or 300.0) >= 3600 else "5m"
        money = hosted_cost(
            config.cache.provider,
            config.cache.model,
            head.prompt_tokens,
            head.hit_tokens,
            head.write_tokens,
            ttl_label,
            table,
        )
        notes.append(f"prices as of {money.as_of}: {money.detail}")
    elif savings is not None:
        price = config.savings.gpu_hour_price if config.savings.gpu_hour_price is not None else profile.gpu_hour_price
        if price is not None:
            self_usd = self_hosted_saving(savings.gpu_seconds_saved, price)
            if config.savings.gpu_hour_price is None:
                notes.append(f"GPU-hour price ${price:g} from profile {profile.name!r} (assumption)")
    # eviction risk of hot prefixes: LRU vs pinned partition vs auto-promotion at the headline capacity
    risk: tuple[PrefixRisk, ...] = ()
    risk_capacity = None
    risk_share = config.cache.pinned_fraction or 0.2
    if config.workload.hot_prefixes and risk_share + config.cache.running_fraction >= 1:
        notes.append(
            f"eviction risk not compared: a {risk_share:.0%} pinned share does not fit next to "
            f"{config.cache.running_fraction:.0%} of running requests"
        )
    elif config.workload.hot_prefixes and config.cache.provider is None and config.cache.capacities:
        risk_capacity = float(head.capacity_tokens if head.capacity_tokens is not None else config.cache.capacities[0])
        share = config.cache.pinned_fraction or 0.2
        cap, frac = replace(config.cache, pinned_fraction=share).partition(risk_capacity)
        pins = tuple((ns, t) for _, ns, t in config.workload.hot_prefixes)
        auto = config.cache.auto_promote or AutoPromote()
        models = {
            "lru": run_model(trace, CacheSpec("lru", cap, ttl), service_s=service, _stack_cache=stacks).hit_blocks,
            f"pinned {share:.0%}": run_model(
                trace,
                CacheSpec("lru", cap, ttl, frac, pins, prewarm_pins=config.cache.prewarm_pins),
                service_s=service,
            ).hit_blocks,
            f"auto-promote {share:.0%}": run_model(
                trace, CacheSpec("lru", cap, ttl, frac, auto_promote=auto), service_s=service
            ).hit_blocks,
        }
        risk = tuple(eviction_risk(trace, build_tree(trace), list(config.workload.hot_prefixes), models))
    return SimResult(
        granularity=granularity_label(trace, gran),
        n_requests=trace.n_requests,
        prompt_tokens=int(trace.prompt_tokens.sum()),
        runs=tuple(runs),
        headline=headline,
        in_batch=in_batch_label,
        persistent=persistent,
        curves=curves,
        savings=savings,
        money=money,
        self_hosted_usd=self_usd,
        kv_bytes_per_token=config.savings.kv.bytes_per_token if config.savings.kv else None,
        risk=risk,
        notes=tuple(notes),
        risk_capacity_tokens=risk_capacity,
        tier_load_s=load_s,
    )
