"""A self-contained HTML report of an analysis record.

:func:`render_html` returns one HTML document with inline CSS, inline SVG plots drawn here
and a few lines of inline JavaScript (tooltips, icicle zoom). It references nothing outside
itself: no fonts, images, stylesheets or scripts from URLs, and a Content-Security-Policy
that forbids any fetch, so the file opens offline and leaks nothing.

Every string from the record (log content, previews, file names) is HTML-escaped. The privacy
rule of the record is applied again here: a withheld candidate shows no preview, parts or
token ids, whatever the record holds, and the page states which ``min_tenants`` rule applied.

The data each plot is drawn from is embedded twice for machines: as ``data-*`` attributes on
the SVG elements and as JSON in ``<script type="application/json" id="pp-data">``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from prefixplan.report import views as v
from prefixplan.report.svg import (
    ICICLE_MAX,
    KIND_COLORS,
    capacity_plot,
    esc,
    finite,
    icicle_svg,
    kinds_bar,
    num_attr,
)


def _script_json(data: Any) -> str:
    """JSON safe inside a <script> element (no ``</script>``, no HTML-significant characters)."""
    text = json.dumps(data, ensure_ascii=False, sort_keys=True, allow_nan=False, default=str)
    return (
        text.replace("&", "\\u0026")
        .replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


# --- page sections -----------------------------------------------------------------------


def _card(metric: str, title: str, value: str, sub: str = "", raw: Any = None) -> str:
    data = f' data-value="{esc(num_attr(raw))}"' if isinstance(raw, (int, float)) and not isinstance(raw, bool) else ""
    return (
        f'<div class="card" data-metric="{esc(metric)}"{data}><div class="t">{esc(title)}</div>'
        f'<div class="v">{esc(value)}</div><div class="s">{esc(sub)}</div></div>'
    )


def _table(cls: str, head: Sequence[str], rows: Sequence[str]) -> str:
    th = "".join(f"<th>{esc(h)}</th>" for h in head)
    return f'<table class="{cls}"><thead><tr>{th}</tr></thead><tbody>{"".join(rows)}</tbody></table>'


def _td(x: Any, cls: str = "") -> str:
    return f'<td class="{cls}">{esc(x)}</td>' if cls else f"<td>{esc(x)}</td>"


def _summary(record: Mapping[str, Any], sim: Mapping[str, Any] | None) -> str:
    s = record.get("summary") or {}
    total = s.get("prompt_tokens") or 0
    covered = (s.get("shared_prefix_tokens") or 0) / total if total else 0.0
    gens = v.generations(sim)
    cards = [
        _card(
            "requests",
            "requests",
            v.n(s.get("requests")),
            f"{v.n(s.get('malformed_lines'))} malformed line(s) skipped",
            s.get("requests"),
        ),
        _card("prompt_tokens", "prompt tokens", v.n(total), f"{v.n(s.get('candidates'))} shared prefixes found", total),
        _card(
            "shared_share",
            "covered by shared prefixes",
            v.pct(covered),
            f"{v.n(s.get('shared_prefix_tokens'))} tokens in ranked prefixes",
            covered,
        ),
        _card(
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
                cards.append(_card(key, title, v.pct(g["hit_rate"]), sub or str(g.get("label") or ""), g["hit_rate"]))
    else:
        cards.append(
            _card("in_batch", "in-batch vs persistent", "not simulated", "run the simulation for both generations")
        )
    sav = v.savings(sim)
    if sav:
        for label, value in sav:
            cards.append(_card("saving", label, value, "estimated"))
    parts = ['<section id="summary"><h2>Summary</h2><div class="cards">', *cards, "</div>"]
    rows = [f"<tr><th>{esc(k)}</th>{_td(val)}</tr>" for k, val in v.assumptions(record)]
    rows += [f"<tr><th>savings model</th>{_td(a)}</tr>" for a in v.savings_assumptions(sim)]
    parts.append(
        f'<h3>Assumptions</h3><table class="kv" id="pp-assumptions"><tbody>{"".join(rows)}</tbody></table></section>'
    )
    return "".join(parts)


def _prefix_table(record: Mapping[str, Any], top: int | None) -> str:
    cands = list(record.get("candidates") or [])[: top or None]
    g = record.get("granularity") or {}
    if not cands:
        return (
            '<section id="prefixes"><h2>Top shared prefixes</h2><p>No shared prefix met the thresholds.</p></section>'
        )
    per_token = v.kv_bytes_per_token(record)
    show_kv = per_token is not None or any(v.candidate_kv_bytes(c, None) is not None for c in cands)
    head = (
        ["#", "kind", "tokens", "hits", "users", "reusable", "marginal", "parent"]
        + (["KV memory"] if show_kv else [])
        + ["preview"]
    )
    rows = []
    for c in cands:
        prev = v.safe_preview(c)
        cls = ' class="withheld"' if c.get("withheld") else ""
        cells = [
            _td(c.get("rank"), "r"),
            _td(c.get("label")),
            _td(v.n(c.get("length")), "r"),
            _td(v.n(c.get("hits")), "r"),
            _td(v.users(c), "r"),
            _td(v.n(c.get("reusable_tokens")), "r"),
            _td(v.n(c.get("marginal_tokens")), "r"),
            _td(v.n(c.get("parent")), "r"),
        ]
        if show_kv:
            cells.append(_td(v.human_bytes(v.candidate_kv_bytes(c, per_token)), "r"))
        cells.append(
            _td(prev if prev is not None else (v.withheld_note(c, record) if c.get("withheld") else ""), "preview")
        )
        rows.append(
            f'<tr{cls} data-rank="{esc(c.get("rank"))}" data-length="{esc(c.get("length"))}" '
            f'data-hits="{esc(c.get("hits"))}" data-withheld="{str(bool(c.get("withheld"))).lower()}">{"".join(cells)}</tr>'
        )
    note = (
        f"Tokens are counted at block {v.n(g.get('block_size'))} granularity; <i>reusable</i> = tokens the prefix "
        f"saves over all its hits, <i>marginal</i> = what it adds beyond its nesting parent."
    )
    return (
        f'<section id="prefixes"><h2>Top shared prefixes</h2><p class="note">{note}</p>'
        + _table("data", head, rows)
        + "</section>"
    )


def _rag(record: Mapping[str, Any]) -> str:
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


def _breakers(record: Mapping[str, Any]) -> str:
    bs = v.sorted_breakers(record.get("breakers") or [])
    if not bs:
        return '<section id="breakers"><h2>Cache breakers</h2><p>No cache breakers found.</p></section>'
    rows = [
        f'<tr data-kind="{esc(b.get("kind"))}" data-cost="{esc(b.get("cost_tokens"))}">'
        + "".join(
            [
                _td(b.get("kind")),
                _td(b.get("pattern")),
                _td(v.breaker_where(b)),
                _td(v.n(b.get("requests")), "r"),
                _td(v.n(b.get("variants")), "r"),
                _td("≈" + v.n(b.get("cost_tokens")), "r"),
                _td(b.get("preview") or b.get("example") or "", "preview"),
            ]
        )
        + "</tr>"
        for b in bs
    ]
    return (
        '<section id="breakers"><h2>Cache breakers</h2><p class="note">Cost ≈ prefill tokens per affected request '
        "that a stable prefix would reuse.</p>"
        + _table("data", ["kind", "pattern", "where", "requests", "variants", "cost tokens", "context"], rows)
        + "</section>"
    )


def _findings(record: Mapping[str, Any]) -> str:
    fs = v.findings(record)
    if not fs:
        return ""
    rows = [
        "<tr>"
        + "".join(
            [
                _td(f.get("severity")),
                _td(f.get("code")),
                _td(":".join(str(x) for x in (f.get("file"), f.get("line")) if x)),
                _td(f.get("message")),
                _td(v.n(f.get("cost_tokens")), "r"),
            ]
        )
        + "</tr>"
        for f in fs
    ]
    return (
        '<section id="findings"><h2>Check and lint findings</h2>'
        + _table("data", ["severity", "code", "where", "message", "cost tokens"], rows)
        + "</section>"
    )


def _errors(record: Mapping[str, Any]) -> str:
    errs = record.get("errors") or {}
    s = record.get("summary") or {}
    count = errs.get("count") or 0
    if not count and not s.get("render_failures"):
        return '<section id="errors"><h2>Input problems</h2><p>No malformed lines.</p></section>'
    rows = [
        f'<tr data-reason="{esc(k)}" data-count="{esc(c)}">{_td(k)}{_td(v.n(c), "r")}</tr>'
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
        + _table("data", ["reason", "lines"], rows)
        + (f"<ul class='samples'>{samples}</ul>" if samples else "")
        + "</section>"
    )


def plot_data(record: Mapping[str, Any], top: int | None = None) -> dict[str, Any]:
    """The data the page's plots and tables are drawn from (embedded as JSON; no token ids or text)."""
    sim = record.get("simulation")
    cands = list(record.get("candidates") or [])[: top or None]
    s = record.get("summary") or {}
    return {
        "schema_version": record.get("schema_version"),
        "summary": {
            k: finite(s.get(k))
            for k in (
                "requests",
                "prompt_tokens",
                "reusable_tokens",
                "hit_rate_tokens",
                "hit_rate_requests",
                "shared_prefix_tokens",
                "malformed_lines",
                "render_failures",
                "candidates",
                "exact",
            )
        },
        "privacy": {"min_tenants": (record.get("privacy") or {}).get("min_tenants")},
        "kinds": [{"kind": k, "tokens": t, "reused": r} for k, t, r in v.ordered_kinds(record.get("kinds") or {})],
        "generations": v.generations(sim),
        "sweep": {p: [[c, r] for c, r in pts] for p, pts in v.sweep(sim).items()},
        "configured_capacity": v.configured_capacity(sim),
        "candidates": [
            {
                k: c.get(k)
                for k in (
                    "rank",
                    "label",
                    "length",
                    "hits",
                    "tenants",
                    "reusable_tokens",
                    "marginal_tokens",
                    "parent",
                    "withheld",
                )
            }
            for c in cands
        ],
        "icicle": [
            {k: nd[k] for k in ("rank", "depth", "x0", "x1", "hits", "tokens")}
            for nd in v.icicle({**record, "candidates": cands[:ICICLE_MAX]})
        ],
        "breakers": [
            {k: b.get(k) for k in ("kind", "pattern", "requests", "variants", "cost_tokens")}
            for b in v.sorted_breakers(record.get("breakers") or [])
        ],
        "errors": {
            "count": (record.get("errors") or {}).get("count", 0),
            "by_reason": dict(sorted(((record.get("errors") or {}).get("by_reason") or {}).items())),
        },
    }


CSS = """
:root{--fg:#1d2330;--muted:#5d6675;--bg:#fff;--card:#f4f6f9;--line:#dde2e8;--accent:#4e79a7}
@media (prefers-color-scheme: dark){:root{--fg:#e6e9ee;--muted:#9aa3af;--bg:#15181e;--card:#1f242c;--line:#343b46}}
*{box-sizing:border-box}body{margin:0;padding:24px 32px;font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;
color:var(--fg);background:var(--bg);max-width:1200px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid var(--line);padding-bottom:4px}
h3{font-size:15px;margin:16px 0 6px}.sub,.note{color:var(--muted)}.note{font-size:12.5px}
.cards{display:flex;flex-wrap:wrap;gap:10px}.card{background:var(--card);border-radius:8px;padding:10px 14px;min-width:170px}
.card .t{color:var(--muted);font-size:12px}.card .v{font-size:22px;font-weight:600}.card .s{color:var(--muted);font-size:12px}
table{border-collapse:collapse;margin:6px 0}th,td{padding:3px 8px;border-bottom:1px solid var(--line);text-align:left;vertical-align:top}
td.r{text-align:right;font-variant-numeric:tabular-nums}td.preview{max-width:520px;overflow-wrap:anywhere;font-size:12.5px}
tr.withheld td.preview{color:var(--muted);font-style:italic}table.kv th{font-weight:500;color:var(--muted)}
svg.plot{max-width:100%;height:auto;display:block;margin:6px 0}svg text{fill:var(--fg);font-size:11px}
svg .grid{stroke:var(--line);stroke-width:1}svg .tick,svg .note{fill:var(--muted)}svg .axis{font-size:12px}
.pp-cap-marker{stroke:#d62728;stroke-width:2;stroke-dasharray:5 4}.pp-infinite{stroke:var(--muted);stroke-dasharray:2 3}
g.pp-ice{cursor:pointer}g.pp-ice rect{stroke:var(--bg);stroke-width:1}g.pp-ice text{font-size:11px;fill:#111;pointer-events:none}
g.pp-ice:hover rect,g.pp-ice:focus rect{stroke:#111;stroke-width:1.5}
.legend-table td:first-child span{display:inline-block;width:11px;height:11px;border-radius:2px;margin-right:6px;vertical-align:-1px}
#pp-tip{position:absolute;display:none;pointer-events:none;background:#111;color:#fff;padding:5px 8px;border-radius:4px;
font-size:12px;max-width:420px;z-index:10}code{font-size:12.5px}footer{margin-top:32px;color:var(--muted);font-size:12px}
"""

JS = """
(function(){"use strict";
var tip=document.getElementById("pp-tip");
function show(ev,el){tip.textContent=el.getAttribute("data-tip");tip.style.display="block";
tip.style.left=(ev.pageX+14)+"px";tip.style.top=(ev.pageY+14)+"px";}
function hide(){tip.style.display="none";}
Array.prototype.forEach.call(document.querySelectorAll("[data-tip]"),function(el){
el.addEventListener("mousemove",function(ev){show(ev,el);});el.addEventListener("mouseleave",hide);});
var ice=document.getElementById("pp-icicle");if(!ice){return;}
var W=+ice.getAttribute("data-width");var nodes=ice.querySelectorAll("g.pp-ice");
function fit(label,w){var n=Math.floor((w-8)/7);if(n<2){return "";}return label.length<=n?label:label.slice(0,n-1)+"\\u2026";}
function zoom(z0,z1){Array.prototype.forEach.call(nodes,function(g){
var a=+g.getAttribute("data-x0"),b=+g.getAttribute("data-x1");var x0=(a-z0)/(z1-z0)*W,x1=(b-z0)/(z1-z0)*W;
x0=Math.max(0,Math.min(W,x0));x1=Math.max(0,Math.min(W,x1));var r=g.querySelector("rect"),t=g.querySelector("text");
r.setAttribute("x",x0.toFixed(2));r.setAttribute("width",Math.max(0,x1-x0).toFixed(2));
t.setAttribute("x",(x0+4).toFixed(2));t.textContent=fit(g.getAttribute("data-label"),x1-x0);});
ice.setAttribute("data-zoom",z0+","+z1);}
Array.prototype.forEach.call(nodes,function(g){
function go(){zoom(+g.getAttribute("data-x0"),+g.getAttribute("data-x1"));}
g.addEventListener("click",go);g.addEventListener("keydown",function(ev){if(ev.key==="Enter"||ev.key===" "){ev.preventDefault();go();}});});
})();
"""

CSP = "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"


def render_html(record: Mapping[str, Any], *, top: int | None = None, title: str | None = None) -> str:
    """Render the analysis record as one self-contained HTML page.

    Args:
        record: the analysis record (``prefixplan analyze --json``), optionally with a
            ``simulation`` section and check ``findings``.
        top: show at most this many candidates (default: all the record holds).
        title: page title (default: "prefixplan report — <inputs>").

    Returns:
        The HTML document as a string.
    """
    sim = record.get("simulation")
    s = record.get("summary") or {}
    inputs = ", ".join(str(p) for p in (record.get("inputs") or {}).get("paths") or []) or "-"
    title = title or f"prefixplan report — {inputs}"
    cands = list(record.get("candidates") or [])[: top or None]
    min_t = (record.get("privacy") or {}).get("min_tenants")
    by_rank = {c["rank"]: c for c in cands if c.get("rank") is not None}
    body = [
        f"<h1>{esc(title)}</h1>",
        f'<p class="sub">{esc(v.n(s.get("requests")))} requests · {esc(record.get("tool", "prefixplan"))} · '
        f"created {esc(record.get('created', '-'))} · tokens {'exact' if s.get('exact') else 'APPROXIMATE'}</p>",
        f'<p class="note" id="pp-privacy" data-min-tenants="{esc(min_t)}">Privacy: {esc(v.privacy_sentence(record))}. '
        "This page loads nothing from the network.</p>",
        _summary(record, sim),
    ]
    curves = v.sweep(sim)
    if curves:
        body.append(
            '<section id="capacity"><h2>Hit rate vs cache capacity</h2>'
            + capacity_plot(curves, v.configured_capacity(sim), s.get("hit_rate_tokens"))
            + "</section>"
        )
    kinds = v.ordered_kinds(record.get("kinds") or {})
    if kinds:
        total = sum(max(0, t) for _, t, _ in kinds) or 1
        legend = [
            f'<tr data-kind="{esc(k)}"><td><span style="background:{KIND_COLORS.get(k, "#bab0ac")}"></span>'
            f"{esc(v.KIND_LABELS.get(k, k))}</td>{_td(v.n(t), 'r')}{_td(v.pct(t / total), 'r')}"
            f"{_td(v.pct(r / t) if t else '-', 'r')}</tr>"
            for k, t, r in kinds
        ]
        body.append(
            '<section id="kinds"><h2>Where prompt tokens go</h2>'
            + kinds_bar(kinds)
            + _table("data legend-table", ["kind", "tokens", "share", "reusable"], legend)
            + "</section>"
        )
    body.append(_prefix_table(record, top))
    nodes = v.icicle({**record, "candidates": cands[:ICICLE_MAX]})
    if len(nodes) > 1:
        body.append(
            '<section id="nesting"><h2>Prefix nesting</h2><p class="note">Each box is a ranked prefix, nested '
            "under the prefix it extends; width = share of requests through it. Hover for tokens and hits, click "
            "to zoom, click the top box to zoom out.</p>" + icicle_svg(nodes, by_rank, record) + "</section>"
        )
    body += [_rag(record), _breakers(record), _findings(record), _errors(record)]
    body.append(
        f"<footer>Inputs: {esc(inputs)}. Generated by {esc(record.get('tool', 'prefixplan'))} from analysis "
        f"record schema {esc(record.get('schema_version'))}.</footer>"
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1"><link rel="icon" href="data:,">'
        f"<title>{esc(title)}</title><style>{CSS}</style></head><body>"
        + "".join(body)
        + '<div id="pp-tip" role="tooltip"></div>'
        + f'<script type="application/json" id="pp-data">{_script_json(plot_data(record, top))}</script>'
        + f"<script>{JS}</script></body></html>\n"
    )
