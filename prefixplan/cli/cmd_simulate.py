"""``prefixplan simulate LOG...`` — replay a log through prefix-cache models."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from prefixplan.cli import options as o
from prefixplan.cli.groups import with_source
from prefixplan.cli.help import PlainCommand

if TYPE_CHECKING:
    from prefixplan.api import Executor
    from prefixplan.render.stream import SourceOptions

Provider = Annotated[
    Optional[str], typer.Option("--provider", metavar="NAME", help="Hosted prompt caching: openai or anthropic.")
]
Policy = Annotated[
    str,
    typer.Option(
        "--policy", metavar="POLICY[,...]", help="Eviction policies, comma-separated: lru, lfu, fifo, priority."
    ),
]
CacheTtl = Annotated[
    Optional[str],
    typer.Option("--cache-ttl", metavar="DURATION", help="Expiry after last use: 5m, 1h, 24h or seconds."),
]
KvDtypeBytes = Annotated[
    Optional[int], typer.Option("--kv-dtype-bytes", metavar="N", help="KV cache bytes per element (2 bf16, 1 fp8).")
]
PinnedFraction = Annotated[
    float,
    typer.Option(
        "--pinned-fraction",
        metavar="FRACTION",
        help="Share of capacity reserved for pinned prefixes (with --analysis or --auto-promote; default 0.2 then).",
    ),
]
RunningFraction = Annotated[
    float,
    typer.Option(
        "--running-fraction",
        metavar="FRACTION",
        help="Share of capacity held by running requests, not cache (the '20% running' of 20/60/20).",
    ),
]
PrewarmPins = Annotated[
    bool,
    typer.Option(
        "--prewarm-pins", metavar="", help="Pinned prefixes are resident from the start (warmed), not from first use."
    ),
]
AutoPromoteOpt = Annotated[
    Optional[int],
    typer.Option("--auto-promote", metavar="N", help="Pin blocks reused >= N times in the last hour; unpin when cold."),
]
TierOpt = Annotated[
    Optional[list[str]],
    typer.Option(
        "--tier",
        metavar="NAME:SIZE[:GBPS[:MS]]",
        help="Lower tier NAME:CAPACITY[:GB/s[:ms]], e.g. cpu:200GB:25:0.5 (repeatable).",
    ),
]
BatchWindow = Annotated[
    Optional[float],
    typer.Option(
        "--batch-window",
        metavar="SECONDS",
        help="Seconds each request stays in flight for in-batch sharing (default: estimated).",
    ),
]
Breakpoints = Annotated[
    str,
    typer.Option("--breakpoints", metavar="MODE", help="Anthropic: request (log cache_control) or auto (prompt end)."),
]
Prices = Annotated[
    Optional[Path], typer.Option("--prices", metavar="FILE", help="YAML overriding the shipped price table.")
]
GpuHourPrice = Annotated[
    Optional[float], typer.Option("--gpu-hour-price", metavar="USD", help="USD per GPU-hour for self-hosted savings.")
]

WaterfallOpt = Annotated[
    bool,
    typer.Option(
        "--waterfall/--no-waterfall",
        help="Where the hits go: prompt tokens down to the prediction, each step the difference of two runs.",
    ),
]
AchievedFromStatus = Annotated[
    Optional[str],
    typer.Option(
        "--achieved-from-status",
        metavar="[BEFORE,]AFTER",
        help="The waterfall's achieved bar from the engines' prefix-cache counters: `prefixplan status --json` "
        "files taken before and after the log's traffic (one: since the engines started).",
    ),
]

_NOT_CONFIG = frozenset({"logs", "source", "executor", "analysis", "top", "json_out", "trace_out", "quiet"})
_RENAMED = {"granularity": "engine", "tier": "tiers"}


def _config_options(values: dict[str, Any]) -> dict[str, Any]:
    """:func:`prefixplan.api.simulation_config`'s keywords from the command's option values."""
    out = {_RENAMED.get(k, k): v for k, v in values.items() if k not in _NOT_CONFIG}
    out["tiers"] = out["tiers"] or []
    out["pins"] = values["analysis"] is not None
    return out


def register(app: typer.Typer) -> None:
    app.command("simulate", cls=PlainCommand)(simulate)


@with_source(execution_after="trace_out")
def simulate(
    logs: o.Logs,
    source: SourceOptions,
    executor: Executor,
    granularity: o.Granularity = "vllm",
    block_size: o.BlockSize = None,
    provider: Provider = None,
    capacity: o.Capacity = None,
    policy: Policy = "lru",
    cache_ttl: CacheTtl = None,
    model: o.Model = None,
    model_config: o.ModelConfig = None,
    kv_dtype_bytes: KvDtypeBytes = None,
    pinned_fraction: PinnedFraction = 0.0,
    running_fraction: RunningFraction = 0.0,
    analysis: o.Analysis = None,
    top: o.Top = None,
    prewarm_pins: PrewarmPins = False,
    auto_promote: AutoPromoteOpt = None,
    tier: TierOpt = None,
    batch_window: BatchWindow = None,
    breakpoints: Breakpoints = "request",
    profile: o.Profile = None,
    prices: Prices = None,
    gpu_hour_price: GpuHourPrice = None,
    replicas: o.Replicas = None,
    router: o.Router = None,
    gpu: o.Gpu = None,
    tensor_parallel: o.TensorParallel = None,
    efficiency: o.Efficiency = None,
    rate_scale: o.RateScale = None,
    max_num_batched_tokens: o.MaxBatchedTokens = None,
    max_num_seqs: o.MaxSeqs = None,
    waterfall: WaterfallOpt = True,
    isolate_by: o.IsolateBy = None,
    achieved_from_status: AchievedFromStatus = None,
    json_out: o.Json = None,
    trace_out: o.TraceOut = None,
    quiet: o.Quiet = False,
) -> None:
    """Replay requests through cache models: in-batch vs persistent cache, capacity curves, savings."""
    options = _config_options(locals())  # first: the parameters are all the locals there are
    from prefixplan.api import SimulateRequest, run_simulate, simulation_config
    from prefixplan.cli.progress import ConsoleProgress
    from prefixplan.errors import UsageError
    from prefixplan.report.terminal import report_console

    if top is not None and analysis is None:
        raise UsageError("--top picks the prefixes of --analysis to pin", hint="pass --analysis ANALYSIS.json")
    config = simulation_config(**options)
    request = SimulateRequest(
        source,
        config,
        pins_from=str(analysis) if analysis is not None else None,
        pin_top=10 if top is None else top,
        json=json_out,
        trace_out=str(trace_out) if trace_out else None,
        executor=executor,
    )
    doc = run_simulate(request, ConsoleProgress(report_console(stderr=True), quiet=quiet)).to_json()
    if not quiet:
        from prefixplan.report.console_simulate import render_simulation

        console = report_console(stderr=json_out == "-")
        render_simulation(doc, console)
        if doc.get("fleet"):
            from prefixplan.report.console_router import render_fleet

            render_fleet(doc["fleet"], console)
        if doc.get("ttft_under_load"):
            from prefixplan.report.console_load import render_load

            render_load(doc["ttft_under_load"], console)
