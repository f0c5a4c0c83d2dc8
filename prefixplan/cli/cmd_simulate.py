"""``prefixplan simulate LOG...`` — replay a log through prefix-cache models."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from prefixplan.cli import common
from prefixplan.cli import options as o
from prefixplan.cli.help import PlainCommand
from prefixplan.report.terminal import report_console

if TYPE_CHECKING:
    pass


def register(app: typer.Typer) -> None:
    @app.command(cls=PlainCommand)
    def simulate(
        logs: o.Logs,
        log_format: o.LogFormat = "auto",
        columns: o.Columns = None,
        since: o.Since = None,
        until: o.Until = None,
        sample: o.Sample = None,
        strict: o.Strict = False,
        trace_block_size: o.TraceBlock = 512,
        tokenizer: o.Tokenizer = None,
        tokenizer_map: o.TokenizerMap = None,
        chat_template: o.ChatTemplate = None,
        template_kwargs: o.TemplateKwargs = None,
        granularity: o.Granularity = "vllm",
        block_size: o.BlockSize = None,
        provider: Annotated[
            Optional[str],
            typer.Option("--provider", metavar="NAME", help="Hosted prompt caching: openai or anthropic."),
        ] = None,
        capacity: o.Capacity = None,
        policy: Annotated[
            str,
            typer.Option(
                "--policy", metavar="POLICY[,...]", help="Eviction policies, comma-separated: lru, lfu, fifo, priority."
            ),
        ] = "lru",
        cache_ttl: Annotated[
            Optional[str],
            typer.Option("--cache-ttl", metavar="DURATION", help="Expiry after last use: 5m, 1h, 24h or seconds."),
        ] = None,
        model: o.Model = None,
        model_config: o.ModelConfig = None,
        kv_dtype_bytes: Annotated[
            Optional[int],
            typer.Option("--kv-dtype-bytes", metavar="N", help="KV cache bytes per element (2 bf16, 1 fp8)."),
        ] = None,
        pinned_fraction: Annotated[
            float,
            typer.Option(
                "--pinned-fraction",
                metavar="FRACTION",
                help="Share of capacity reserved for pinned prefixes (with --analysis or --auto-promote; default 0.2 then).",
            ),
        ] = 0.0,
        running_fraction: Annotated[
            float,
            typer.Option(
                "--running-fraction",
                metavar="FRACTION",
                help="Share of capacity held by running requests, not cache (the '20% running' of 20/60/20).",
            ),
        ] = 0.0,
        analysis: o.Analysis = None,
        top: o.Top = None,
        prewarm_pins: Annotated[
            bool,
            typer.Option(
                "--prewarm-pins",
                metavar="",
                help="Pinned prefixes are resident from the start (warmed), not from first use.",
            ),
        ] = False,
        auto_promote: Annotated[
            Optional[int],
            typer.Option(
                "--auto-promote", metavar="N", help="Pin blocks reused >= N times in the last hour; unpin when cold."
            ),
        ] = None,
        tier: Annotated[
            Optional[list[str]],
            typer.Option(
                "--tier",
                metavar="NAME:SIZE[:GBPS[:MS]]",
                help="Lower tier NAME:CAPACITY[:GB/s[:ms]], e.g. cpu:200GB:25:0.5 (repeatable).",
            ),
        ] = None,
        batch_window: Annotated[
            Optional[float],
            typer.Option(
                "--batch-window",
                metavar="SECONDS",
                help="Seconds each request stays in flight for in-batch sharing (default: estimated).",
            ),
        ] = None,
        breakpoints: Annotated[
            str,
            typer.Option(
                "--breakpoints", metavar="MODE", help="Anthropic: request (log cache_control) or auto (prompt end)."
            ),
        ] = "request",
        profile: o.Profile = None,
        prices: Annotated[
            Optional[Path], typer.Option("--prices", metavar="FILE", help="YAML overriding the shipped price table.")
        ] = None,
        gpu_hour_price: Annotated[
            Optional[float],
            typer.Option("--gpu-hour-price", metavar="USD", help="USD per GPU-hour for self-hosted savings."),
        ] = None,
        replicas: o.Replicas = None,
        router: o.Router = None,
        json_out: o.Json = None,
        trace_out: o.TraceOut = None,
        workers: o.Workers = None,
        executor: o.Executor = "local",
        ray_address: o.RayAddress = None,
        quiet: o.Quiet = False,
        old_format: Annotated[Optional[str], o.deprecated("--format", "--log-format")] = None,
        old_engine: Annotated[Optional[str], o.deprecated("--engine", "--granularity")] = None,
        old_pins_from: Annotated[Optional[Path], o.deprecated("--pins-from", "--analysis")] = None,
        old_pin_top: Annotated[Optional[int], o.deprecated("--pin-top", "--top")] = None,
    ) -> None:
        """Replay requests through cache models: in-batch vs persistent cache, capacity curves, savings."""
        from prefixplan.api import Simulation, simulation_config
        from prefixplan.core.fileio import atomic_write_json
        from prefixplan.errors import UsageError
        from prefixplan.simulation.source import simulate_source

        granularity = o.prefer(granularity, old_engine, "vllm")
        analysis = analysis if analysis is not None else old_pins_from
        top = top if top is not None else old_pin_top
        if top is not None and analysis is None:
            raise UsageError("--top picks the prefixes of --analysis to pin", hint="pass --analysis ANALYSIS.json")
        source = common.source_options(
            logs,
            format=o.prefer(log_format, old_format, "auto"),
            columns=columns,
            since=since,
            until=until,
            sample=sample,
            strict=strict,
            trace_block_size=trace_block_size,
            tokenizer=tokenizer,
            tokenizer_map=tokenizer_map,
            chat_template=chat_template,
            template_kwargs=template_kwargs,
            workers=workers,
            executor=executor,
            ray_address=ray_address,
        )
        config = simulation_config(
            engine=granularity,
            block_size=block_size,
            provider=provider,
            capacity=capacity,
            policy=policy,
            cache_ttl=cache_ttl,
            model=model,
            model_config=model_config,
            kv_dtype_bytes=kv_dtype_bytes,
            pinned_fraction=pinned_fraction,
            running_fraction=running_fraction,
            auto_promote=auto_promote,
            pins=analysis is not None,
            prewarm_pins=prewarm_pins,
            tiers=tier or [],
            batch_window=batch_window,
            breakpoints=breakpoints,
            profile=profile,
            prices=prices,
            gpu_hour_price=gpu_hour_price,
            replicas=replicas,
            router=router,
        )
        from prefixplan.cli.progress import ConsoleProgress

        progress = ConsoleProgress(report_console(stderr=True), quiet=quiet)
        result, errors = simulate_source(
            source,
            config,
            pins_from=analysis,
            pin_top=10 if top is None else top,
            progress=progress,
            trace_out=trace_out,
        )
        doc = Simulation(result, errors.count).to_json()
        console = report_console(stderr=json_out == "-")
        if json_out:
            atomic_write_json(json_out, doc)
        if not quiet:
            from prefixplan.report.console_simulate import render_simulation

            render_simulation(doc, console)
            if doc.get("fleet"):
                from prefixplan.report.console_router import render_fleet

                render_fleet(doc["fleet"], console)
