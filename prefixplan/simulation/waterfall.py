"""Where the hits go: the hit-loss waterfall of one simulation (:func:`attribute`).

From the prompt tokens down to the hits the model predicts, each step is the difference of the
hit tokens of two runs a user could make by hand with ``prefixplan simulate`` (same log, same
options otherwise), in this order:

1. ``token``: ``--block-size 1``, unbounded, no TTL, one replica: the tokens an earlier request
   shares exactly (token level; the last prompt token is never reused).
2. ``block``: the configured block size, unbounded, no TTL.
3. ``capacity``: ``--capacity C --policy P`` (the headline run: its pins, tiers and partition as
   given), no TTL.
4. ``ttl``: the same with ``--cache-ttl T``.
5. ``fleet``: the same over ``--replicas N`` under the first ``--router``.

The steps are ``prompt - token`` (split into what analyze's breaker findings say fixes would
return, capped at it, and the rest: no earlier request has the prefix), ``token - block``,
``block - capacity``, ``capacity - ttl``, ``ttl - fleet``; then the prediction (``fleet``). They
add up to the prompt tokens exactly. A step may be negative (N replicas hold N times the cache of
one). When the log carries the engine's ``cached_tokens``, their sum is what the engine achieved
and ``predicted - achieved`` is left unexplained.

The runs replay the one block trace of the simulation (and, for ``token``, a trace of the same
rows at one token a block) through the cache models of :mod:`prefixplan.simulation.models`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from prefixplan.simulation.attribution import Run, Step, Waterfall
from prefixplan.simulation.config import WaterfallModel
from prefixplan.simulation.engine_counts import EngineCounts, coverage_note
from prefixplan.simulation.models import run_model
from prefixplan.simulation.replay import default_priorities, policy_spec
from prefixplan.simulation.spec import CacheSpec, parse_ttl

if TYPE_CHECKING:
    from prefixplan.analysis.record import AnalysisRecord
    from prefixplan.simulation.config import SimConfig
    from prefixplan.simulation.result import SimResult
    from prefixplan.trace.blocks import BlockTrace


def _hit_tokens(trace: BlockTrace, spec: CacheSpec, **kw: Any) -> int:
    out = run_model(trace, spec, **kw)
    return int((out.hit_blocks * trace.block_tokens).sum())


def _runs(
    trace: BlockTrace, config: SimConfig, result: SimResult, token_trace: BlockTrace | None
) -> tuple[list[Run], dict[str, bool]]:
    """The five runs (module docstring) and which options were given."""
    ttl = parse_ttl(config.cache.ttl)
    head = result.run(result.headline)
    block = int(trace.block_tokens.max()) if trace.n_requests else config.granularity().block_size
    base = f"--block-size {block}"
    token = _hit_tokens(token_trace, CacheSpec("lru")) if token_trace is not None else None
    unbounded = result.run(result.persistent).hit_tokens if ttl is None else _hit_tokens(trace, CacheSpec("lru"))
    cap = head.capacity_tokens
    opts = base
    if cap is None:
        capacity = unbounded
    else:
        opts = f"{base} --capacity {cap:g} --policy {head.policy}"
        if ttl is None:
            capacity = head.hit_tokens
        else:
            prios = default_priorities(trace, config) if head.policy == "priority" else None
            capacity = _hit_tokens(trace, policy_spec(config, head.policy, cap, None), priorities=prios)
    timed = head.hit_tokens if cap is not None else result.run(result.persistent).hit_tokens
    ttl_opts = f"{opts} --cache-ttl {ttl:g}" if ttl is not None else opts
    fleet = result.fleet[0] if result.fleet else None
    fleet_opts = f"{ttl_opts} --replicas {fleet.replicas} --router {fleet.policy}" if fleet else ttl_opts
    runs = [
        Run("token", "--block-size 1", token),
        Run("block", base, unbounded),
        Run("capacity", opts, capacity),
        Run("ttl", ttl_opts, timed),
        Run("fleet", fleet_opts, fleet.cached_tokens if fleet else timed),
    ]
    return runs, {"capacity": cap is not None, "ttl": ttl is not None, "replicas": fleet is not None}


def attribute(
    trace: BlockTrace,
    config: SimConfig,
    result: SimResult,
    *,
    token_trace: BlockTrace | None = None,
    achieved: tuple[int, int | None] | None = None,
    model: WaterfallModel | None = None,
) -> Waterfall:
    """The waterfall of ``result`` (``trace`` replayed under ``config``); ``token_trace`` is the
    same rows at one token a block (None: the token step is not known), ``achieved`` the engine's
    (cached tokens, requests that logged them) from the log."""
    model = model or WaterfallModel()
    runs, asked = _runs(trace, config, result, token_trace)
    hits = {r.name: r.hit_tokens for r in runs}
    prompt = int(trace.prompt_tokens.sum())
    notes: list[str] = []
    shared = hits["token"] if hits["token"] is not None else hits["block"]
    assert shared is not None
    unshared = prompt - shared
    breakers = None
    if model.breaker_tokens is not None:
        breakers = min(int(model.breaker_tokens), unshared)
        notes.append(
            f"breakers: what fixing them would return as {model.breaker_source or 'the breaker findings'} "
            "estimate it ((variants - 1) x tail tokens), capped at the unshared tokens"
        )
    else:
        notes.append(
            "breakers: not estimated here (prefixplan analyze finds them; simulate --analysis RECORD uses its findings)"
        )
    head = result.run(result.headline)
    if result.fleet and head.capacity_tokens is not None and head.policy != "lru":
        notes.append(
            f"replicas: each replica of the fleet is an LRU cache, the one-replica run {head.policy}: "
            "the step holds the change of policy too"
        )
    if token_trace is not None and token_trace.n_requests and int(token_trace.block_tokens.max()) > 1:
        notes.append(
            f"token level: the finest unit of the input, {int(token_trace.block_tokens.max())} tokens "
            "(a trace of block hash ids)"
        )
    if hits["token"] is None:
        notes.append(
            "token level not known: the rows carry keys per block, not per token; the block step is "
            "counted with the unshared tokens"
        )
    steps = [
        Step("unique", unshared - (breakers or 0), "prompt", "token" if hits["token"] is not None else "block"),
        Step("breakers", breakers, "fixed log", "log", asked=breakers is not None),
        Step("block", None if hits["token"] is None else hits["token"] - (hits["block"] or 0), "token", "block"),
    ]
    for name, a, b in (("capacity", "block", "capacity"), ("ttl", "capacity", "ttl"), ("replicas", "ttl", "fleet")):
        steps.append(Step(name, int(hits[a] or 0) - int(hits[b] or 0), a, b, asked=asked[name]))
    tokens, n_logged, source = _achieved(achieved, model.engine, trace, notes)
    bound = None
    if hits["token"] is None and trace.n_requests:
        bound = token_bound(trace)
        notes.append(
            f"token level: between {bound[0]:,} and {bound[1]:,} tokens (a bound: each request shares at most "
            "one block less a token beyond its whole-block hits, and never its last token)"
        )
    return Waterfall(
        prompt_tokens=prompt,
        runs=tuple(runs),
        steps=tuple(steps),
        predicted_tokens=int(hits["fleet"] or 0),
        achieved_tokens=tokens,
        achieved_requests=n_logged,
        achieved_source=source,
        requests=trace.n_requests,
        notes=tuple(notes),
        token_bound=bound,
    )


def token_bound(trace: BlockTrace) -> tuple[int, int]:
    """(low, high) of the token-level hits when the rows carry keys per block: a request whose
    first ``h`` tokens are hits of whole blocks (unbounded cache) shares at least ``h`` and at most
    ``h + block - 1`` tokens with earlier requests at token level (the next block differs), and
    never its last token."""
    out = run_model(trace, CacheSpec("lru"))
    block = trace.block_tokens.astype(np.int64)
    hits = out.hit_blocks.astype(np.int64) * block
    last = np.maximum(trace.prompt_tokens.astype(np.int64) - 1, 0)
    high = np.maximum(hits, np.minimum(last, hits + block - 1))
    return int(hits.sum()), int(high.sum())


def _achieved(
    logged: tuple[int, int | None] | None, engine: EngineCounts | None, trace: BlockTrace, notes: list[str]
) -> tuple[int | None, int | None, str | None]:
    """(achieved tokens, requests that logged them, where they come from): the engines' counters
    when given (the log's sum then in a note), else the log's ``cached_tokens``."""
    n_logged = logged[1] if logged else 0
    if engine is not None:
        prompt = int(trace.prompt_tokens.sum())
        notes.append(coverage_note(engine, prompt))
        if logged and n_logged != 0:
            notes.append(f"achieved: the log's cached_tokens sum to {logged[0]:,}")
        return engine.hits, None, engine.source
    if n_logged is not None and 0 < n_logged < trace.n_requests:
        notes.append(f"achieved: {n_logged:,} of {trace.n_requests:,} requests carry the engine's cached_tokens")
    if not logged or n_logged == 0:
        return None, n_logged, None
    where = "the log's cached_tokens" + (f", {n_logged:,} requests" if n_logged is not None else "")
    return logged[0], n_logged, where


def breaker_model(breakers: Iterable[Mapping[str, Any]], source: str) -> WaterfallModel:
    """The waterfall's breaker estimate from an analysis record's breaker findings (their
    ``cost_tokens`` summed: what fixing each would return)."""
    costs = [int(b["cost_tokens"]) for b in breakers if isinstance(b.get("cost_tokens"), int)]
    return WaterfallModel(breaker_tokens=sum(costs), breaker_source=source)


def achieved_of(cached: np.ndarray) -> tuple[int, int]:
    """(sum, count) of the logged cached-token counts in ``cached`` (-1: not logged)."""
    logged = cached >= 0
    return int(cached[logged].sum()), int(logged.sum())


def record_waterfall(
    trace: BlockTrace | None, config: SimConfig, result: SimResult, record: AnalysisRecord
) -> Waterfall | None:
    """The waterfall of ``analyze``'s headline simulation (``trace`` replayed under ``config``
    gave ``result``): breakers from the record's findings, the achieved hits from the log's
    ``cached_tokens``. Its rows carry keys per block, so the token step is known only at one
    token a block."""
    if trace is None or not trace.n_requests or config.cache.provider is not None:
        return None
    logged = record.summary.logged_cached_tokens
    return attribute(
        trace,
        config,
        result,
        token_trace=trace if int(trace.block_tokens.max()) == 1 else None,
        achieved=(int(logged), None) if logged is not None else None,
        model=breaker_model(record.breakers, "analyze's breaker findings"),
    )
