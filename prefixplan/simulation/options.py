"""Turn command-line style options into a :class:`~prefixplan.simulation.simulator.SimConfig`."""

from __future__ import annotations

import re
from pathlib import Path

from prefixplan.errors import UsageError
from prefixplan.routing.policies import SIM_POLICIES
from prefixplan.savings.derive import model_profile, refuse_with_profile
from prefixplan.savings.kvsize import KVShape, load_config, lookup_builtin
from prefixplan.savings.prefill import PrefillProfile, load_profile
from prefixplan.simulation.capacity import parse_capacity, parse_tier
from prefixplan.simulation.config import (
    CacheModel,
    IsolationModel,
    SavingsModel,
    SimConfig,
    WaterfallModel,
    Workload,
)
from prefixplan.simulation.fleet import FleetModel, fleet_unsupported
from prefixplan.simulation.load import LoadModel
from prefixplan.simulation.spec import AutoPromote


def build_config(
    *,
    engine: str = "vllm",
    block_size: int | None = None,
    provider: str | None = None,
    capacity: str | None = None,
    policy: str = "lru",
    cache_ttl: str | None = None,
    model: str | None = None,
    model_config: Path | None = None,
    kv_dtype_bytes: int | None = None,
    pinned_fraction: float = 0.0,
    running_fraction: float = 0.0,
    auto_promote: int | None = None,
    pins: bool = False,
    prewarm_pins: bool = False,
    tiers: list[str] | tuple[str, ...] = (),
    batch_window: float | None = None,
    breakpoints: str = "request",
    profile: PrefillProfile | None = None,
    prices: Path | None = None,
    gpu_hour_price: float | None = None,
    replicas: int | None = None,
    router: str | None = None,
    gpu: str | None = None,
    tensor_parallel: int | None = None,
    efficiency: float | None = None,
    rate_scale: float | None = None,
    max_num_batched_tokens: int | None = None,
    max_num_seqs: int | None = None,
    waterfall: bool = True,
    isolate_by: str | None = None,
    achieved_from_status: str | None = None,
) -> SimConfig:
    """Validate and convert options (capacities may be bytes when the KV size is known).

    ``pins`` says that pinned prefixes will be supplied (``--analysis``): the pinned
    partition then defaults to 20% of the capacity, as with ``--auto-promote``.

    The prefill profile is ``profile`` (``--profile``: measured or built-in) when given, else the
    one derived from the model (``model_config``, else ``model``) on ``gpu`` x ``tensor_parallel``
    at ``efficiency`` (:func:`prefixplan.savings.derive.model_profile`), else the default.
    ``rate_scale`` turns on the timed replay of TTFT under load (:mod:`prefixplan.simulation.load`);
    ``waterfall`` the hit-loss attribution (:mod:`prefixplan.simulation.waterfall`), its achieved
    bar from ``achieved_from_status`` (one or two ``status --json`` files:
    :mod:`prefixplan.simulation.engine_counts`) when given.
    """
    kv: KVShape | None = None
    if model_config is not None:
        kv = load_config(model_config, kv_dtype_bytes)
    elif model and not provider:
        try:
            kv = lookup_builtin(model, kv_dtype_bytes)
        except UsageError:
            kv = None
    caps = tuple(parse_capacity(c, kv) for c in capacity.split(",") if c.strip()) if capacity else ()
    policies = tuple(p.strip().lower() for p in policy.split(",") if p.strip())
    if not 0 <= pinned_fraction < 1:
        raise UsageError("--pinned-fraction must be in [0, 1)")
    if not 0 <= running_fraction < 1 or pinned_fraction + running_fraction >= 1:
        raise UsageError(
            "--running-fraction must be in [0, 1) and leave room next to --pinned-fraction",
            hint="e.g. --pinned-fraction 0.2 --running-fraction 0.2 (60% left to the eviction policy)",
        )
    auto = None
    if auto_promote is not None:
        if pins:
            raise UsageError(
                "--analysis pins and --auto-promote both fill the pinned partition; choose one",
                hint="the eviction-risk table compares pins with auto-promotion either way",
            )
        if auto_promote < 1:
            raise UsageError("--auto-promote needs N >= 1")
        if tiers:
            raise UsageError(
                "--tier cannot be combined with --auto-promote: tiers are modelled below an LRU cache "
                "without a pinned partition",
                hint="compare them in two runs",
            )
        auto = AutoPromote(min_hits=auto_promote)
        pinned_fraction = pinned_fraction or 0.2
    elif pins:
        pinned_fraction = pinned_fraction or 0.2
    elif pinned_fraction:
        raise UsageError("--pinned-fraction needs pins: --analysis ANALYSIS.json or --auto-promote N")
    if prewarm_pins and not pins:
        raise UsageError("--prewarm-pins needs pins: --analysis ANALYSIS.json")
    if (pinned_fraction or running_fraction or tiers) and not caps:
        raise UsageError("pinned partitions, running shares and tiers need --capacity")
    fleet = None
    if router is not None and replicas is None:
        raise UsageError("--router compares routing policies across replicas", hint="add --replicas N")
    if replicas is not None:
        routers = tuple(r.strip() for r in (router or ",".join(SIM_POLICIES)).split(",") if r.strip())
        fleet_unsupported(provider=provider, pinned_fraction=pinned_fraction, tiers=tiers)
        fleet = FleetModel(replicas=replicas, routers=routers, capacity_tokens=caps[0] if caps else None)
    chosen, notes = _profile(
        profile,
        provider,
        model=model,
        model_config=model_config,
        gpu=gpu,
        tp=tensor_parallel,
        efficiency=efficiency,
        kv_dtype_bytes=kv_dtype_bytes,
    )
    return SimConfig(
        fleet=fleet,
        load=_load_model(rate_scale, max_num_batched_tokens, max_num_seqs),
        waterfall=_waterfall(waterfall, provider, achieved_from_status),
        isolation=_isolation(isolate_by, provider),
        notes=notes,
        cache=CacheModel(
            engine=engine,
            provider=provider,
            block_size=block_size,
            model=model,
            policies=policies or ("lru",),
            capacities=caps,
            ttl=cache_ttl,
            pinned_fraction=pinned_fraction,
            running_fraction=running_fraction,
            auto_promote=auto,
            prewarm_pins=prewarm_pins,
            tiers=tuple(parse_tier(t, kv) for t in tiers),
            anthropic_breakpoints=breakpoints,
        ),
        workload=Workload(batch_window=batch_window),
        savings=SavingsModel(
            kv=kv,
            profile=chosen,
            prices_file=str(prices) if prices else None,
            gpu_hour_price=gpu_hour_price,
        ),
    )


def _profile(
    profile: PrefillProfile | None,
    provider: str | None,
    *,
    model: str | None,
    model_config: Path | None,
    gpu: str | None,
    tp: int | None,
    efficiency: float | None,
    kv_dtype_bytes: int | None,
) -> tuple[PrefillProfile, tuple[str, ...]]:
    """The prefill profile and its notes: ``profile`` as given, else derived, else the default."""
    explicit = gpu is not None or tp is not None or efficiency is not None
    if explicit and provider is not None:
        raise UsageError(
            "--gpu, --tensor-parallel and --efficiency model self-hosted prefill; a hosted cache (--provider) has none"
        )
    refuse_with_profile(profile.name if profile else None, gpu=gpu, tp=tp, efficiency=efficiency)
    if profile is not None:
        return profile, ()
    if provider is not None:
        return load_profile(None), ()
    choice = model_profile(
        model=model, model_config=model_config, gpu=gpu, tp=tp, efficiency=efficiency, kv_dtype_bytes=kv_dtype_bytes
    )
    return choice.profile or load_profile(None), choice.notes


ISOLATE_BY = ("user", "tenant")
"""``--isolate-by`` values that mean the log's usual tenant id (``tenant``, ``tenant_id``,
``user``, ``user_id`` or ``metadata.user_id``, the first present); any other value names a field
of the log record (a dotted path) that the reader takes the id from."""
_FIELD_PATH = re.compile(r"[A-Za-z0-9_\-]+(\.[A-Za-z0-9_\-]+)*")


def _isolation(by: str | None, provider: str | None) -> IsolationModel | None:
    if by is None:
        return None
    if by not in ISOLATE_BY and not _FIELD_PATH.fullmatch(by):
        raise UsageError(
            f"--isolate-by {by!r}: not tenant, user or a field of the log record",
            hint="name a field by its keys joined by dots, e.g. --isolate-by metadata.org_id "
            "(Parquet/CSV logs: --columns tenant=COLUMN --isolate-by tenant)",
        )
    if provider is not None:
        raise UsageError("--isolate-by models the engines' cache_salt; a hosted cache (--provider) has none")
    return IsolationModel(by)


def _waterfall(waterfall: bool, provider: str | None, achieved_from_status: str | None) -> WaterfallModel | None:
    """The waterfall's model: ``--achieved-from-status`` reads the engines' counters for its achieved bar."""
    if achieved_from_status is not None and (not waterfall or provider is not None):
        raise UsageError(
            "--achieved-from-status sets the waterfall's achieved bar from an engine's counters",
            hint="drop --no-waterfall" if provider is None else "a hosted cache (--provider) has no such counters",
        )
    if not waterfall or provider is not None:
        return None
    if achieved_from_status is None:
        return WaterfallModel()
    from prefixplan.simulation.engine_counts import engine_counts

    return WaterfallModel(engine=engine_counts(achieved_from_status))


def _load_model(rate_scale: float | None, tokens: int | None, seqs: int | None) -> LoadModel | None:
    """The timed replay ``--rate-scale`` asks for (the engine limits need it)."""
    if rate_scale is None:
        if tokens is not None or seqs is not None:
            raise UsageError(
                "--max-num-batched-tokens and --max-num-seqs shape the timed replay of TTFT under load",
                hint="add --rate-scale 1 (the log's own arrival rate)",
            )
        return None
    return LoadModel(rate_scale=rate_scale, max_num_batched_tokens=tokens, max_num_seqs=seqs)
