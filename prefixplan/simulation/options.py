"""Turn command-line style options into a :class:`~prefixplan.simulation.simulator.SimConfig`."""

from __future__ import annotations

from pathlib import Path

from prefixplan.errors import UsageError
from prefixplan.routing.policies import SIM_POLICIES
from prefixplan.savings.kvsize import KVShape, load_config, lookup_builtin
from prefixplan.savings.prefill import PrefillProfile, load_profile
from prefixplan.simulation.capacity import parse_capacity, parse_tier
from prefixplan.simulation.config import CacheModel, SavingsModel, SimConfig, Workload
from prefixplan.simulation.fleet import FleetModel, fleet_unsupported
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
) -> SimConfig:
    """Validate and convert options (capacities may be bytes when the KV size is known).

    ``pins`` says that pinned prefixes will be supplied (``--analysis``): the pinned
    partition then defaults to 20% of the capacity, as with ``--auto-promote``.
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
    return SimConfig(
        fleet=fleet,
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
            profile=profile or load_profile(None),
            prices_file=str(prices) if prices else None,
            gpu_hour_price=gpu_hour_price,
        ),
    )
