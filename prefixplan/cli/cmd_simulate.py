"""``prefixplan simulate LOG...`` — replay a log through prefix-cache models."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from prefixplan.cli import common
from prefixplan.cli.output import report_console

if TYPE_CHECKING:
    from rich.console import Console


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
            render(doc, console)


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def render(doc: dict[str, Any], console: Console) -> None:
    """Print the two-generation comparison, capacity curves, savings and notes."""
    from rich.table import Table

    console.print(
        f"[bold]{doc['requests']:,} requests, {doc['prompt_tokens']:,} prompt tokens[/]  "
        f"granularity: {doc['granularity']}"
    )
    table = Table(title="Cache models", title_justify="left")
    for col in (
        "model",
        "hit rate (tokens)",
        "hit rate (requests)",
        "prefill computed",
        "prefill saved",
        "evicted blocks",
    ):
        table.add_column(col, justify="left" if col == "model" else "right")
    for run in doc["runs"]:
        name = run["label"]
        if name == doc["headline"] and name not in (doc["persistent"], doc["in_batch"]):
            name += " *"
        table.add_row(
            name,
            _pct(run["hit_rate_tokens"]),
            _pct(run["hit_rate_requests"]),
            f"{run['prefill_tokens_computed']:,}",
            f"{run['hit_tokens']:,}",
            f"{run['evictions_blocks']:,}",
        )
    console.print(table)
    if doc["curves"]:
        console.print("[bold]Capacity curve[/] (token hit rate by total capacity)")
        curve = Table()
        curve.add_column("capacity (tokens)", justify="right")
        pols = list(doc["curves"])
        for p in pols:
            curve.add_column(p, justify="right")
        for i, pt in enumerate(doc["curves"][pols[0]]):
            curve.add_row(f"{pt['capacity_tokens']:.3g}", *(_pct(doc["curves"][p][i]["hit_rate_tokens"]) for p in pols))
        console.print(curve)
    runs = {r["label"]: r for r in doc["runs"]}
    head = runs.get(doc["headline"], {})
    part = head.get("partition")
    if part:
        pol = part["policy"]
        text = (
            f"[bold]Partition[/] of {part['total_tokens']:,.0f} tokens: {part['pinned_fraction']:.0%} pinned "
            f"({part['pinned_tokens']:,} tok, by {part['pinned_by']}; {part['pinned_used_tokens']:,} tok held"
            f"{' at the end' if part['pinned_by'] == 'auto-promotion' else ''}) / "
            f"{part['policy_fraction']:.0%} {pol} ({part['policy_tokens']:,} tok)"
        )
        if part["running_fraction"]:
            text += f" / {part['running_fraction']:.0%} running ({part['running_tokens']:,.0f} tok, not cache)"
        console.print(text)
    if head.get("loaded_tokens"):
        console.print(
            "[bold]Tier loads[/] ("
            + doc["headline"]
            + "): "
            + ", ".join(f"{name} {tok:,} tok" for name, tok in head["loaded_tokens"].items())
            + " reused from lower tiers"
        )
    if doc.get("risk"):
        models = list(doc["risk"][0]["by_model"])
        cap = doc.get("risk_capacity_tokens")
        risk = Table(
            title=f"Eviction risk of hot prefixes at {cap:,.0f} tokens: re-prefills after first use"
            if cap
            else "Eviction risk of hot prefixes",
            title_justify="left",
        )
        for col in ("prefix", "tokens", "uses", *models):
            risk.add_column(col, justify="left" if col == "prefix" else "right")
        for r in doc["risk"]:
            risk.add_row(
                r["label"],
                f"{r['tokens']:,}",
                f"{r['uses']:,}",
                *(f"{r['by_model'][m]['reprefills']:,} ({r['by_model'][m]['reprefill_tokens']:,} tok)" for m in models),
            )
        console.print(risk)
    sav = doc.get("savings")
    if sav:
        console.print(
            f"[bold]Savings[/] ({doc['headline']}; profile {sav['profile']}"
            f"{', an assumption' if sav['profile_is_assumption'] else ''}): "
            f"GPU-seconds {sav['gpu_seconds_without']:,.1f} -> {sav['gpu_seconds_with']:,.1f} "
            f"(saved {sav['gpu_seconds_saved']:,.1f}); TTFT p50 {sav['ttft_p50_without_s'] * 1000:.0f} -> "
            f"{sav['ttft_p50_with_s'] * 1000:.0f} ms, p95 {sav['ttft_p95_without_s'] * 1000:.0f} -> "
            f"{sav['ttft_p95_with_s'] * 1000:.0f} ms"
        )
    money = doc.get("money")
    if money:
        console.print(
            f"[bold]Money[/] ({money['provider']} {money['model']}, prices as of {money['prices_as_of']}): "
            f"${money['usd_without']:,.2f} -> ${money['usd_with']:,.2f} (saved ${money['usd_saved']:,.2f})"
        )
    elif doc.get("self_hosted_usd_saved") is not None:
        console.print(f"[bold]Money[/] self-hosted: ${doc['self_hosted_usd_saved']:,.2f} of GPU time saved")
    if doc.get("kv_bytes_per_token"):
        console.print(f"KV cache: {doc['kv_bytes_per_token']:,} bytes/token")
    for note in doc["notes"]:
        console.print(f"[dim]note: {note}[/]")
    if doc.get("line_errors"):
        console.print(f"[yellow]{doc['line_errors']} malformed log lines skipped[/]")
