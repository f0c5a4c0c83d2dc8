"""Sections of the HTML report (everything but the plots): next steps, summary cards and
assumptions, the prefix table (withheld prefixes grouped into one row), the nesting table, RAG,
cache breakers, check findings and input problems. Every string from the record is escaped.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from prefixplan.report import views as v
from prefixplan.report.actions import Action, KVSize
from prefixplan.report.svg import esc, num_attr


def card(metric: str, title: str, value: str, sub: str = "", raw: Any = None) -> str:
    data = f' data-value="{esc(num_attr(raw))}"' if isinstance(raw, (int, float)) and not isinstance(raw, bool) else ""
    return (
        f'<div class="card" data-metric="{esc(metric)}"{data}><div class="t">{esc(title)}</div>'
        f'<div class="v">{esc(value)}</div><div class="s">{esc(sub)}</div></div>'
    )


def table(cls: str, head: Sequence[str], rows: Sequence[str]) -> str:
    th = "".join(f"<th>{esc(h)}</th>" for h in head)
    return f'<table class="{cls}"><thead><tr>{th}</tr></thead><tbody>{"".join(rows)}</tbody></table>'


def td(x: Any, cls: str = "") -> str:
    return f'<td class="{cls}">{esc(x)}</td>' if cls else f"<td>{esc(x)}</td>"


def summary_section(record: Mapping[str, Any], sim: Mapping[str, Any] | None) -> str:
    s = record.get("summary") or {}
    total = s.get("prompt_tokens") or 0
    covered = (s.get("shared_prefix_tokens") or 0) / total if total else 0.0
    gens = v.generations(sim)
    cards = [
        card(
            "requests",
            "requests",
            v.n(s.get("requests")),
            f"{v.n(s.get('malformed_lines'))} malformed line(s) skipped",
            s.get("requests"),
        ),
        card("prompt_tokens", "prompt tokens", v.n(total), f"{v.n(s.get('candidates'))} shared prefixes found", total),
        card(
            "shared_share",
            "covered by shared prefixes",
            v.pct(covered),
            f"{v.n(s.get('shared_prefix_tokens'))} tokens in ranked prefixes",
            covered,
        ),
        card(
            "reusable",
            "reusable, infinite cache",
            v.pct(s.get("hit_rate_tokens")),
            f"{v.pct(s.get('hit_rate_requests'))} of requests hit",
            s.get("hit_rate_tokens"),
        ),
    ]
    if gens:
        for key, title, sub in (
            ("in_batch", "in-batch sharing only", "generation a: requests in flight together"),
            ("persistent", "persistent radix cache", "generation b: unbounded, across requests"),
            ("headline", "at the configured capacity", ""),
        ):
            g = gens.get(key)
            if g:
                cards.append(card(key, title, v.pct(g["hit_rate"]), sub or str(g.get("label") or ""), g["hit_rate"]))
    else:
        cards.append(
            card("in_batch", "in-batch vs persistent", "not simulated", "run the simulation for both generations")
        )
    sav = v.savings(sim)
    if sav:
        for label, value in sav:
            cards.append(card("saving", label, value, "estimated"))
    parts = ['<section id="summary"><h2>Summary</h2><div class="cards">', *cards, "</div>"]
    rows = [f"<tr><th>{esc(k)}</th>{td(val)}</tr>" for k, val in v.assumptions(record)]
    rows += [f"<tr><th>savings model</th>{td(a)}</tr>" for a in v.savings_assumptions(sim)]
    parts.append(
        f'<h3>Assumptions</h3><table class="kv" id="pp-assumptions"><tbody>{"".join(rows)}</tbody></table></section>'
    )
    return "".join(parts)


def prefix_table_section(record: Mapping[str, Any], top: int | None, kv: KVSize | None = None) -> str:
    """The ranked prefixes, one row each; withheld ones as one grouped row (counts, no text)."""
    cands = list(record.get("candidates") or [])[: top or None]
    g = record.get("granularity") or {}
    if not cands:
        return (
            '<section id="prefixes"><h2>Top shared prefixes</h2><p>No shared prefix met the thresholds.</p></section>'
        )
    per_token = kv.bytes_per_token if kv else v.kv_bytes_per_token(record)
    show_kv = per_token is not None or any(v.candidate_kv_bytes(c, None) is not None for c in cands)
    head = (
        ["#", "kind", "tokens", "hits", "users", "reusable", "marginal", "parent"]
        + (["KV memory"] if show_kv else [])
        + ["preview"]
    )
    shown, group = v.split_withheld(cands, record)
    rows = []
    for c in shown:
        cells = [
            td(c.get("rank"), "r"),
            td(c.get("label")),
            td(v.n(c.get("length")), "r"),
            td(v.n(c.get("hits")), "r"),
            td(v.users(c), "r"),
            td(v.n(c.get("reusable_tokens")), "r"),
            td(v.n(c.get("marginal_tokens")), "r"),
            td(v.n(c.get("parent")), "r"),
        ]
        if show_kv:
            cells.append(td(v.human_bytes(v.candidate_kv_bytes(c, per_token)), "r"))
        cells.append(td(v.safe_preview(c) or "", "preview"))
        rows.append(
            f'<tr data-rank="{esc(c.get("rank"))}" data-length="{esc(c.get("length"))}" '
            f'data-hits="{esc(c.get("hits"))}" data-withheld="false">{"".join(cells)}</tr>'
        )
    if group is not None:
        rows.append(
            f'<tr class="withheld withheld-group" data-withheld="true" data-withheld-count="{group["count"]}" '
            f'data-ranks="{esc(",".join(str(r) for r in group["ranks"]))}" data-reusable="{group["reusable"]}">'
            f'<td class="r">{esc(v.n(group["count"]))}</td><td colspan="{len(head) - 2}">withheld</td>'
            f'<td class="preview">{esc(group["text"])}</td></tr>'
        )
    note = (
        f"Tokens are counted at block {v.n(g.get('block_size'))} granularity; <i>reusable</i> = tokens the prefix "
        f"saves over all its hits, <i>marginal</i> = what it adds beyond its nesting parent. Dynamic content in "
        f"previews (dates, ids) is shown masked, e.g. &lt;date-time&gt;."
    )
    return (
        f'<section id="prefixes"><h2>Top shared prefixes</h2><p class="note">{note}</p>'
        + table("data", head, rows)
        + "</section>"
    )


def next_steps_section(actions: Sequence[Action]) -> str:
    """The ranked actions, each with its expected effect (numbers in ``data-figures``)."""
    if not actions:
        return (
            '<section id="next-steps"><h2>Next steps</h2><p>Nothing to change: no cache breaker, and the '
            "simulated cache already reaches the unbounded hit rate.</p></section>"
        )
    items = []
    for i, a in enumerate(actions, 1):
        figures = json.dumps(a.figures, sort_keys=True, allow_nan=False, default=str)
        items.append(
            f'<li class="pp-action" data-kind="{esc(a.kind)}" data-rank="{i}" '
            f'data-tokens-saved="{esc(num_attr(a.tokens_saved))}" data-source="{esc(a.source)}" '
            f'data-figures="{esc(figures)}"><div class="a-title">{esc(a.title)}</div>'
            f'<div class="a-effect">{esc(a.effect)}</div></li>'
        )
    return (
        '<section id="next-steps"><h2>Next steps</h2><p class="note">Ranked by prefill tokens saved over the '
        "log; every effect is computed by the analysis's own models (breaker cost, the simulated cache, the "
        "prefill-time profile).</p>"
        f'<ol class="actions">{"".join(items)}</ol></section>'
    )


def nesting_table(nodes: Sequence[Mapping[str, Any]], by_rank: Mapping[int, Mapping[str, Any]]) -> str:
    """Every box of the nesting chart with its full label (the chart shows labels only where they fit)."""
    rows = []
    for nd in nodes:
        if nd["rank"] is None:
            continue
        c = by_rank.get(nd["rank"], {})
        indent = "  " * (nd["depth"] - 1)
        rows.append(
            f'<tr data-box-rank="{esc(nd["rank"])}">{td(indent + "#" + str(nd["rank"]))}'
            f"{td(nd['label'])}{td(v.n(nd['depth']), 'r')}{td(v.n(nd['tokens']), 'r')}{td(v.n(nd['hits']), 'r')}"
            f"{td(v.n(c.get('parent')), 'r')}</tr>"
        )
    return (
        '<details class="nesting-table"><summary>All boxes with their full labels</summary>'
        + table("data", ["prefix", "kind", "depth", "tokens", "hits", "parent"], rows)
        + "</details>"
    )


def rag_section(record: Mapping[str, Any]) -> str:
    rag = record.get("rag") or {}
    if not rag.get("recurring_chunks"):
        return ""
    text = (
        f"{v.n(rag['recurring_chunks'])} document chunks recur across requests ({v.n(rag.get('occurrences'))} "
        f"occurrences); {v.n(rag.get('prefill_tokens_now'))} of their tokens are prefilled again in the current layout."
    )
    w = rag.get("whatif")
    if w:
        text += (
            f" Documents-first layout ({v.n(w.get('requests_rewritten'))} requests rewritten): "
            f"{v.n(w.get('reusable_tokens'))} reusable tokens vs {v.n(w.get('reusable_tokens_now'))} now "
            f"({w.get('gain_tokens', 0):+,})."
        )
    return f'<section id="rag"><h2>RAG documents</h2><p>{esc(text)}</p></section>'


def breakers_section(record: Mapping[str, Any]) -> str:
    bs = v.sorted_breakers(record.get("breakers") or [])
    if not bs:
        return '<section id="breakers"><h2>Cache breakers</h2><p>No cache breakers found.</p></section>'
    rows = [
        f'<tr data-kind="{esc(b.get("kind"))}" data-cost="{esc(b.get("cost_tokens"))}">'
        + "".join(
            [
                td(b.get("kind")),
                td(b.get("pattern")),
                td(v.breaker_where(b)),
                td(v.n(b.get("requests")), "r"),
                td(v.n(b.get("variants")), "r"),
                td("≈" + v.n(b.get("cost_tokens")), "r"),
                td(b.get("preview") or b.get("example") or "", "preview"),
            ]
        )
        + "</tr>"
        for b in bs
    ]
    return (
        '<section id="breakers"><h2>Cache breakers</h2><p class="note">Cost ≈ prefill tokens per affected request '
        "that a stable prefix would reuse.</p>"
        + table("data", ["kind", "pattern", "where", "requests", "variants", "cost tokens", "context"], rows)
        + "</section>"
    )


def findings_section(record: Mapping[str, Any]) -> str:
    fs = v.findings(record)
    if not fs:
        return ""
    rows = [
        "<tr>"
        + "".join(
            [
                td(f.get("severity")),
                td(f.get("code")),
                td(":".join(str(x) for x in (f.get("file"), f.get("line")) if x)),
                td(f.get("message")),
                td(v.n(f.get("cost_tokens")), "r"),
            ]
        )
        + "</tr>"
        for f in fs
    ]
    return (
        '<section id="findings"><h2>Check and lint findings</h2>'
        + table("data", ["severity", "code", "where", "message", "cost tokens"], rows)
        + "</section>"
    )


def errors_section(record: Mapping[str, Any]) -> str:
    errs = record.get("errors") or {}
    s = record.get("summary") or {}
    count = errs.get("count") or 0
    if not count and not s.get("render_failures"):
        return '<section id="errors"><h2>Input problems</h2><p>No malformed lines.</p></section>'
    rows = [
        f'<tr data-reason="{esc(k)}" data-count="{esc(c)}">{td(k)}{td(v.n(c), "r")}</tr>'
        for k, c in sorted((errs.get("by_reason") or {}).items())
    ]
    samples = "".join(
        f"<li><code>{esc(e.get('source'))}:{esc(e.get('line'))}</code>: {esc(e.get('reason'))}</li>"
        for e in (errs.get("samples") or [])[:20]
    )
    return (
        f'<section id="errors"><h2>Input problems</h2><p id="pp-malformed" data-count="{esc(count)}">'
        f"{esc(v.n(count))} malformed line(s) skipped"
        + (
            f"; {esc(v.n(s.get('render_failures')))} request(s) could not be rendered"
            if s.get("render_failures")
            else ""
        )
        + ".</p>"
        + table("data", ["reason", "lines"], rows)
        + (f"<ul class='samples'>{samples}</ul>" if samples else "")
        + "</section>"
    )
