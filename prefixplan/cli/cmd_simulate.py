"""``prefixplan simulate LOG...`` — replay a log through prefix-cache models."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from prefixplan.cli import common
from prefixplan.report.terminal import report_console

if TYPE_CHECKING:
    pass


def register(app: typer.Typer) -> None:
    @app.command(no_args_is_help=True)
    def simulate(
        logs: common.Logs,
        format: common.Format = "auto",
        since: common.Since = None,
        until: common.Until = None,
        sample: common.Sample = None,
        strict: common.Strict = False,
        trace_block_size: common.TraceBlock = 512,
        tokenizer: common.Tokenizer = None,
        tokenizer_map: common.TokenizerMap = None,
        chat_template: common.ChatTemplate = None,
        template_kwargs: common.TemplateKwargs = None,
        engine: common.Engine = "vllm",
        block_size: common.BlockSize = None,
        provider: Annotated[
            Optional[str], typer.Option("--provider", help="Hosted prompt caching: openai or anthropic.")
        ] = None,
        capacity: Annotated[
            Optional[str],
            typer.Option("--capacity", help="GPU cache capacities, comma-separated: tokens (1e6) or bytes (40GB)."),
        ] = None,
        policy: Annotated[
            str, typer.Option("--policy", help="Eviction policies, comma-separated: lru, lfu, fifo, priority.")
        ] = "lru",
        cache_ttl: Annotated[
            Optional[str], typer.Option("--cache-ttl", help="Expiry after last use: 5m, 1h, 24h or seconds.")
        ] = None,
        model: Annotated[
            Optional[str],
            typer.Option("--model", help="Model name: KV size (built-in table), prices, Anthropic minimums."),
        ] = None,
        model_config: Annotated[
            Optional[Path], typer.Option("--model-config", help="config.json giving the KV bytes per token.")
        ] = None,
        kv_dtype_bytes: Annotated[
            Optional[int], typer.Option("--kv-dtype-bytes", help="KV cache bytes per element (2 bf16, 1 fp8).")
        ] = None,
        pinned_fraction: Annotated[
            float,
            typer.Option(
                "--pinned-fraction",
                help="Share of capacity reserved for pinned prefixes (with --pins-from or --auto-promote; default 0.2 then).",
            ),
        ] = 0.0,
        running_fraction: Annotated[
            float,
            typer.Option(
                "--running-fraction",
                help="Share of capacity held by running requests, not cache (the '20% running' of 20/60/20).",
            ),
        ] = 0.0,
        pins_from: Annotated[
            Optional[Path],
            typer.Option(
                "--pins-from",
                help="Analysis record (analyze --json) whose top candidates are pinned and watched for eviction.",
            ),
        ] = None,
        pin_top: Annotated[int, typer.Option("--pin-top", help="How many top candidates of --pins-from to pin.")] = 10,
        prewarm_pins: Annotated[
            bool,
            typer.Option(
                "--prewarm-pins", help="Pinned prefixes are resident from the start (warmed), not from first use."
            ),
        ] = False,
        auto_promote: Annotated[
            Optional[int],
            typer.Option("--auto-promote", help="Pin blocks reused >= N times in the last hour; unpin when cold."),
        ] = None,
        tier: Annotated[
            Optional[list[str]],
            typer.Option("--tier", help="Lower tier NAME:CAPACITY[:GB/s[:ms]], e.g. cpu:200GB:25:0.5 (repeatable)."),
        ] = None,
        batch_window: Annotated[
            Optional[float],
            typer.Option(
                "--batch-window", help="Seconds each request stays in flight for in-batch sharing (default: estimated)."
            ),
        ] = None,
        breakpoints: Annotated[
            str, typer.Option("--breakpoints", help="Anthropic: request (log cache_control) or auto (prompt end).")
        ] = "request",
        profile: Annotated[
            Optional[str],
            typer.Option("--profile", help="Prefill profile: built-in name or YAML file (calibrate writes one)."),
        ] = None,
        prices: Annotated[
            Optional[Path], typer.Option("--prices", help="YAML overriding the shipped price table.")
        ] = None,
        gpu_hour_price: Annotated[
            Optional[float], typer.Option("--gpu-hour-price", help="USD per GPU-hour for self-hosted savings.")
        ] = None,
        json_out: Annotated[
            Optional[str], typer.Option("--json", help="Write the result (JSON) to FILE, or - for stdout.")
        ] = None,
        quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No console report.")] = False,
    ) -> None:
        """Replay requests through cache models: in-batch vs persistent cache, capacity curves, savings."""
        from prefixplan.api import Simulation, simulation_config
        from prefixplan.core.fileio import atomic_write_json
        from prefixplan.simulation.source import simulate_source

        source = common.source_options(
            logs,
            format=format,
            since=since,
            until=until,
            sample=sample,
            strict=strict,
            trace_block_size=trace_block_size,
            tokenizer=tokenizer,
            tokenizer_map=tokenizer_map,
            chat_template=chat_template,
            template_kwargs=template_kwargs,
        )
        config = simulation_config(
            engine=engine,
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
            pins=pins_from is not None,
            prewarm_pins=prewarm_pins,
            tiers=tier or [],
            batch_window=batch_window,
            breakpoints=breakpoints,
            profile=profile,
            prices=prices,
            gpu_hour_price=gpu_hour_price,
        )
        result, errors = simulate_source(source, config, pins_from=pins_from, pin_top=pin_top)
        doc = Simulation(result, errors.count).to_json()
        console = report_console(stderr=json_out == "-")
        if json_out:
            atomic_write_json(json_out, doc)
        if not quiet:
            from prefixplan.report.console_simulate import render_simulation

            render_simulation(doc, console)
