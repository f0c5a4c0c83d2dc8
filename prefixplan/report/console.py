"""Rich console rendering of an analysis record (the dict documented in docs/analysis-record.md)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from rich.console import Console, JustifyMethod
from rich.markup import escape
from rich.table import Table

from prefixplan.report.actions import Action, next_steps
from prefixplan.report.console_inputs import header_lines
from prefixplan.report.line_errors import render_line_errors
from prefixplan.report.views import profile_label, safe_preview, split_withheld


def _n(x: float | int | None) -> str:
    if x is None:
        return "-"
    if isinstance(x, float) and not x.is_integer():
        return f"{x:,.2f}"
    return f"{int(x):,}"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _decade(x: float) -> bool:
    return x > 0 and abs(math.log10(x) - round(math.log10(x))) < 1e-9


def render_next_steps(actions: Sequence[Action], console: Console) -> None:
    """The ranked next steps: what to do, then its expected effect (the same list as the reports)."""
    if not actions:
        return
    console.print("[bold]Next steps[/] (ranked by prefill tokens saved; effects from the models below)")
    for i, a in enumerate(actions, 1):
        console.print(f"{i:>2}. [bold]{escape(a.title)}[/]")
        console.print(f"    {escape(a.effect)}", style="dim")


def render_analysis(record: dict[str, Any], console: Console, *, top: int | None = None) -> None:
    s = record["summary"]
    g = record["granularity"]
    tok = record["tokenizer"]
    gran = f"{g['engine']} preset, " if g.get("engine") else ""
    gran += f"block {g['block_size']} tokens"
    exact = "exact" if s["exact"] else f"APPROXIMATE ({s.get('approximate_reason')})"
    for line in header_lines(record):  # a tokenizer/model mismatch warning first, then inputs and formats
        console.print(line)
    console.print(
        f"tokenizer: {escape(str(tok.get('label')))} ({escape(exact)})   granularity: {gran} (full blocks; last token never reused)"
    )
    render_next_steps(next_steps(record), console)
    head = Table.grid(padding=(0, 2))
    head.add_column(style="dim")
    head.add_column()
    head.add_row("requests", _n(s["requests"]))
    head.add_row(
        "malformed lines",
        _n(s["malformed_lines"]) + (f" (+{s['render_failures']} not renderable)" if s["render_failures"] else ""),
    )
    head.add_row("prompt tokens", _n(s["prompt_tokens"]))
    head.add_row(
        "reusable with infinite cache",
        f"{_n(s['reusable_tokens'])} ({_pct(s['hit_rate_tokens'])} of tokens, "
        f"{_pct(s['hit_rate_requests'])} of requests hit)",
    )
    head.add_row("covered by ranked shared prefixes", _n(s["shared_prefix_tokens"]))
    sim = record.get("simulation")
    if sim:
        runs = {r["label"]: r for r in sim.get("runs", [])}
        batch, pers = runs.get(sim.get("in_batch") or ""), runs.get(sim.get("persistent") or "")
        if batch and pers:
            head.add_row(
                "in-batch sharing only (nothing survives a batch)",
                f"{_pct(batch['hit_rate_tokens'])} of tokens, {_n(batch['hit_tokens'])} prefill saved",
            )
            head.add_row(
                "persistent radix cache (unbounded)",
                f"{_pct(pers['hit_rate_tokens'])} of tokens, {_n(pers['hit_tokens'])} prefill saved",
            )
        for pol, pts in (sim.get("curves") or {}).items():
            decades = [p for p in pts if _decade(p["capacity_tokens"])] or pts
            head.add_row(
                f"{pol} hit rate by capacity (tokens)",
                "  ".join(f"{p['capacity_tokens']:.0e}: {_pct(p['hit_rate_tokens'])}" for p in decades),
            )
        sav = sim.get("savings")
        if sav:
            head.add_row(
                f"GPU prefill seconds, {sim['headline']}",
                f"{sav['gpu_seconds_without']:,.1f} -> {sav['gpu_seconds_with']:,.1f} with {profile_label(sav)}",
            )
            head.add_row(
                "TTFT p50 / p95 (prefill only, no queueing)",
                f"{1000 * sav['ttft_p50_without_s']:,.0f} / {1000 * sav['ttft_p95_without_s']:,.0f} ms -> "
                f"{1000 * sav['ttft_p50_with_s']:,.0f} / {1000 * sav['ttft_p95_with_s']:,.0f} ms",
            )
    if s.get("logged_cached_tokens") is not None:
        head.add_row("cached tokens reported in the log", _n(s["logged_cached_tokens"]))
    console.print(head)
    if sim and sim.get("waterfall"):
        from prefixplan.report.waterfall import render_waterfall

        render_waterfall(sim["waterfall"], console)
    if sim and sim.get("isolation"):
        from prefixplan.report.isolation import render_isolation

        render_isolation(sim["isolation"], console)

    kinds = record.get("kinds") or {}
    if kinds:
        t = Table(title="Where prompt tokens go", title_justify="left")
        t.add_column("kind")
        t.add_column("tokens", justify="right")
        t.add_column("share", justify="right")
        t.add_column("reusable", justify="right")
        total = max(1, s["prompt_tokens"])
        for kind, v in sorted(kinds.items(), key=lambda kv: -kv[1]["tokens"]):
            t.add_row(
                kind,
                _n(v["tokens"]),
                _pct(v["tokens"] / total),
                _pct(v["reused"] / v["tokens"]) if v["tokens"] else "-",
            )
        console.print(t)

    cands = record.get("candidates") or []
    if cands:
        t = Table(title=f"Top shared prefixes (block {g['block_size']})", title_justify="left")
        columns: tuple[tuple[str, JustifyMethod], ...] = (
            ("#", "right"),
            ("label", "left"),
            ("tokens", "right"),
            ("hits", "right"),
            ("users", "right"),
            ("reusable", "right"),
            ("marginal", "right"),
            ("parent", "right"),
            ("preview", "left"),
        )
        for col, just in columns:
            if col == "preview":
                t.add_column(col, justify=just, overflow="ellipsis", no_wrap=True, max_width=70, ratio=1)
            else:
                t.add_column(col, justify=just, no_wrap=True)
        shown, group = split_withheld(cands[: top or len(cands)], record)
        for c in shown:
            users = _n(c["tenants"]) + ("+" if c.get("tenants_capped") else "")
            preview = safe_preview(c)
            t.add_row(
                str(c["rank"]),
                c["label"],
                _n(c["length"]),
                _n(c["hits"]),
                users,
                _n(c["reusable_tokens"]),
                _n(c["marginal_tokens"]),
                _n(c["parent"]),
                escape(preview or ""),
            )
        if group is not None:
            t.add_row("", "withheld", "", _n(group["hits"]), "", _n(group["reusable"]), "", "", escape(group["text"]))
        console.print(t)

    rag = record.get("rag") or {}
    if rag.get("recurring_chunks"):
        line = (
            f"RAG: {rag['recurring_chunks']} document chunks recur across requests ({rag['occurrences']} occurrences); "
            f"{_n(rag['prefill_tokens_now'])} of their tokens are prefilled again in the current layout"
        )
        console.print(line)
        w = rag.get("whatif")
        if w:
            console.print(
                f"     documents-first layout ({w['requests_rewritten']} requests rewritten): "
                f"{_n(w['reusable_tokens'])} reusable tokens vs {_n(w['reusable_tokens_now'])} now "
                f"([bold]{w['gain_tokens']:+,}[/])"
            )

    breakers = record.get("breakers") or []
    if breakers:
        t = Table(title="Cache breakers (cost ≈ prefill tokens a stable prefix would reuse)", title_justify="left")
        for col in ("kind", "pattern", "where", "requests", "variants", "cost tokens", "context"):
            if col == "context":
                t.add_column(col, no_wrap=True, overflow="ellipsis", max_width=60)
            else:
                t.add_column(
                    col, justify="right" if col in ("requests", "variants", "cost tokens") else "left", no_wrap=True
                )
        for b in breakers:
            where = (
                f"system line {b['line']}, col {b['column']}" if b["line"] else f"tools (~token {b['token_offset']})"
            )
            t.add_row(
                b["kind"],
                b["pattern"],
                where,
                _n(b["requests"]),
                _n(b["variants"]),
                "≈" + _n(b["cost_tokens"]),
                escape(b["preview"] or b["example"]),
            )
        console.print(t)

    render_line_errors(record.get("errors"), console)
