"""Console output of ``prefixplan simulate``: the two generations, capacity curves, savings, risks, notes."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from prefixplan.report.line_errors import render_line_errors
from prefixplan.report.views import profile_label
from prefixplan.simulation.spec import human_tokens


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def render_simulation(doc: dict[str, Any], console: Console) -> None:
    """Print the two-generation comparison, capacity curves, savings and notes."""
    from rich.markup import escape
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
        by_cap = {(r["policy"], r["capacity_tokens"]): r for r in doc["runs"]}
        tiered = any(r.get("loaded_tokens") for r in doc["runs"])
        kv = doc.get("kv_bytes_per_token")
        console.print(
            "[bold]Capacity curve[/] (token hit rate by GPU cache capacity"
            + ("; 'GPU only' leaves out hits loaded from lower tiers" if tiered else "")
            + ")"
        )
        curve = Table()
        curve.add_column("GPU capacity", justify="right")
        pols = list(doc["curves"])
        for p in pols:
            curve.add_column(f"{p} (all tiers)" if tiered else p, justify="right")
            if tiered:
                curve.add_column(f"{p} (GPU only)", justify="right")
        for i, pt in enumerate(doc["curves"][pols[0]]):
            cells = []
            for p in pols:
                point = doc["curves"][p][i]
                cells.append(_pct(point["hit_rate_tokens"]))
                if tiered:
                    run = by_cap.get((p, point["capacity_tokens"]), {})
                    loaded = sum((run.get("loaded_tokens") or {}).values())
                    gpu = (
                        (run.get("hit_tokens", 0) - loaded) / run["prompt_tokens"] if run.get("prompt_tokens") else 0.0
                    )
                    cells.append(_pct(gpu))
            curve.add_row(human_tokens(pt["capacity_tokens"], kv), *cells)
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
        ttft = ", ".join(
            f"{q} {sav[f'ttft_{q}_without_s'] * 1000:.0f} -> {sav[f'ttft_{q}_with_s'] * 1000:.0f} ms"
            for q in ("p50", "p95", "p99")
            if f"ttft_{q}_with_s" in sav
        )
        console.print(
            f"[bold]Savings[/] ({doc['headline']}; profile {escape(profile_label(sav))}): "
            f"GPU-seconds {sav['gpu_seconds_without']:,.1f} -> {sav['gpu_seconds_with']:,.1f} "
            f"(saved {sav['gpu_seconds_saved']:,.1f}); TTFT (prefill only) {ttft}"
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
    if doc.get("waterfall"):
        from prefixplan.report.waterfall import render_waterfall

        render_waterfall(doc["waterfall"], console)
    if doc.get("isolation"):
        from prefixplan.report.isolation import render_isolation

        render_isolation(doc["isolation"], console)
    render_line_errors(doc.get("errors") or {"count": doc.get("line_errors") or 0}, console)
