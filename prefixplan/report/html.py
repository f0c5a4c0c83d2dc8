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

from prefixplan.report import html_sections as hs
from prefixplan.report import views as v
from prefixplan.report.actions import Action, KVSize, kv_size, next_steps, profile_of
from prefixplan.report.plots import capacity_plot, savings_plot, timeline_plot, top_prefixes_plot, ttft_plot
from prefixplan.report.svg import ICICLE_MAX, KIND_COLORS, esc, finite, icicle_svg, kinds_bar


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


def plot_data(
    record: Mapping[str, Any], top: int | None = None, actions: Sequence[Action] | None = None
) -> dict[str, Any]:
    """The data the page's plots and tables are drawn from (embedded as JSON; no token ids or text)."""
    sim = record.get("simulation")
    sim_map = sim if isinstance(sim, Mapping) else {}
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
        "next_steps": [a.to_json() for a in (actions if actions is not None else next_steps(record))],
        "savings_curve": sim_map.get("savings_curve"),
        "timeline": sim_map.get("timeline"),
        "ttft": sim_map.get("ttft"),
        "pinned": sim_map.get("pinned"),
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
h1{font-size:22px;margin:0 0 4px;overflow-wrap:anywhere}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid var(--line);padding-bottom:4px}
h3{font-size:15px;margin:16px 0 6px}.sub,.note{color:var(--muted)}.note{font-size:12.5px}p{overflow-wrap:anywhere}
.cards{display:flex;flex-wrap:wrap;gap:10px}.card{background:var(--card);border-radius:8px;padding:10px 14px;min-width:170px;max-width:100%}
.card .t{color:var(--muted);font-size:12px}.card .v{font-size:22px;font-weight:600;overflow-wrap:anywhere}
.card .s{color:var(--muted);font-size:12px;overflow-wrap:anywhere}
table{border-collapse:collapse;margin:6px 0;max-width:100%}th,td{padding:3px 8px;border-bottom:1px solid var(--line);text-align:left;vertical-align:top}
th{white-space:nowrap}td.r{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
td.preview{max-width:520px;font-size:12.5px;overflow-wrap:anywhere}#prefixes table,#breakers table,#diff table{width:100%}
@media (max-width:900px){body{padding:16px}th,td{padding:3px 5px}}table.kv td{overflow-wrap:anywhere}
tr.withheld td.preview{color:var(--muted);font-style:italic}table.kv th{font-weight:500;color:var(--muted)}
ol.actions{margin:6px 0;padding-left:26px}ol.actions li{margin:0 0 10px;padding:8px 12px;background:var(--card);border-radius:8px;
border-left:4px solid var(--accent)}.a-title{font-weight:600;overflow-wrap:anywhere}.a-effect{color:var(--muted);font-size:13px;overflow-wrap:anywhere}
svg.plot{max-width:100%;height:auto;display:block;margin:6px 0}svg text{fill:var(--fg);font-size:11px}
svg .grid{stroke:var(--line);stroke-width:1}svg .tick,svg .note{fill:var(--muted)}svg .axis{font-size:12px}
g.pp-ice{cursor:pointer}g.pp-ice rect{stroke:var(--bg);stroke-width:1}g.pp-ice text{font-size:11px;fill:#111;pointer-events:none}
g.pp-ice:hover rect,g.pp-ice:focus rect{stroke:#111;stroke-width:1.5}
.legend-table td:first-child span{display:inline-block;width:11px;height:11px;border-radius:2px;margin-right:6px;vertical-align:-1px}
details.nesting-table summary{cursor:pointer;color:var(--muted);font-size:12.5px}
#pp-tip{position:absolute;display:none;pointer-events:none;background:#111;color:#fff;padding:5px 8px;border-radius:4px;
font-size:12px;max-width:420px;z-index:10}code{font-size:12.5px;overflow-wrap:anywhere}footer{margin-top:32px;color:var(--muted);font-size:12px}
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
function fit(g,w){var t=g.querySelector("text");var room=w-8;var opts=[g.getAttribute("data-label"),g.getAttribute("data-short")||""];
for(var i=0;i<opts.length;i++){t.textContent=opts[i];if(opts[i]&&t.getComputedTextLength()<=room){return;}}t.textContent="";}
function zoom(z0,z1){Array.prototype.forEach.call(nodes,function(g){
var a=+g.getAttribute("data-x0"),b=+g.getAttribute("data-x1");var x0=(a-z0)/(z1-z0)*W,x1=(b-z0)/(z1-z0)*W;
x0=Math.max(0,Math.min(W,x0));x1=Math.max(0,Math.min(W,x1));var r=g.querySelector("rect"),t=g.querySelector("text");
r.setAttribute("x",x0.toFixed(2));r.setAttribute("width",Math.max(0,x1-x0).toFixed(2));
t.setAttribute("x",(x0+4).toFixed(2));fit(g,x1-x0);});
ice.setAttribute("data-zoom",z0+","+z1);}
Array.prototype.forEach.call(nodes,function(g){fit(g,+g.querySelector("rect").getAttribute("width"));
function go(){zoom(+g.getAttribute("data-x0"),+g.getAttribute("data-x1"));}
g.addEventListener("click",go);g.addEventListener("keydown",function(ev){if(ev.key==="Enter"||ev.key===" "){ev.preventDefault();go();}});});
})();
"""

CSP = "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"


def _section(sid: str, title: str, body: str, note: str = "") -> str:
    if not body:
        return ""
    note_html = f'<p class="note">{note}</p>' if note else ""
    return f'<section id="{sid}"><h2>{esc(title)}</h2>{note_html}{body}</section>'


def render_html(
    record: Mapping[str, Any],
    *,
    top: int | None = None,
    title: str | None = None,
    kv: KVSize | None = None,
    extra_sections: Sequence[str] = (),
) -> str:
    """Render the analysis record as one self-contained HTML page.

    Args:
        record: the analysis record (``prefixplan analyze --json``), optionally with a
            ``simulation`` section and check ``findings``.
        top: show at most this many candidates (default: all the record holds).
        title: page title (default: "prefixplan report — <inputs>").
        kv: the KV size for GB figures (default: the record's, or its model's built-in one).
        extra_sections: HTML sections appended before the footer (e.g. a comparison with a baseline).

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
    kv = kv_size(record, kv)
    actions = next_steps(record, kv)
    _, price = profile_of(record)
    body = [
        f"<h1>{esc(title)}</h1>",
        f'<p class="sub">{esc(v.n(s.get("requests")))} requests · {esc(record.get("tool", "prefixplan"))} · '
        f"created {esc(record.get('created', '-'))} · tokens {'exact' if s.get('exact') else 'APPROXIMATE'}</p>",
        hs.next_steps_section(actions),
        f'<p class="note" id="pp-privacy" data-min-tenants="{esc(min_t)}">Privacy: {esc(v.privacy_sentence(record))}. '
        "This page loads nothing from the network.</p>",
        hs.summary_section(record, sim),
    ]
    curves = v.sweep(sim)
    if curves:
        body.append(
            _section(
                "capacity",
                "Hit rate vs cache capacity",
                capacity_plot(curves, v.configured_capacity(sim), s.get("hit_rate_tokens"), kv),
                "Green / purple markers: the smallest simulated capacity reaching 90% / 95% of the unbounded "
                "cache's hit rate.",
            )
        )
    waterfall = (sim or {}).get("waterfall")
    if waterfall:
        from prefixplan.report.waterfall import waterfall_html

        body.append(
            _section(
                "waterfall",
                "Where the hits go",
                waterfall_html(waterfall),
                "Each step is the difference of the hit tokens of two prefixplan simulate runs (named beside it).",
            )
        )
    body.append(_section("savings", "Savings vs cache capacity", savings_plot(record, kv, price)))
    body.append(
        _section(
            "timeline",
            "Hit rate over time",
            timeline_plot(record),
            "Windowed hit rate: a rising start is the cache warming up; a later drop is drift (prompt changes).",
        )
    )
    body.append(_section("ttft", "TTFT before and after", ttft_plot(record)))
    kinds = v.ordered_kinds(record.get("kinds") or {})
    if kinds:
        total = sum(max(0, t) for _, t, _ in kinds) or 1
        legend = [
            f'<tr data-kind="{esc(k)}"><td><span style="background:{KIND_COLORS.get(k, "#bab0ac")}"></span>'
            f"{esc(v.KIND_LABELS.get(k, k))}</td>{hs.td(v.n(t), 'r')}{hs.td(v.pct(t / total), 'r')}"
            f"{hs.td(v.pct(r / t) if t else '-', 'r')}</tr>"
            for k, t, r in kinds
        ]
        body.append(
            '<section id="kinds"><h2>Where prompt tokens go</h2>'
            + kinds_bar(kinds)
            + hs.table("data legend-table", ["kind", "tokens", "share", "reusable"], legend)
            + "</section>"
        )
    body.append(
        _section("top-bars", "Top prefixes by reusable tokens", top_prefixes_plot({**record, "candidates": cands}))
    )
    body.append(hs.prefix_table_section(record, top, kv))
    nodes = v.icicle({**record, "candidates": cands[:ICICLE_MAX]})
    if len(nodes) > 1:
        body.append(
            '<section id="nesting"><h2>Prefix nesting</h2><p class="note">Each box is a ranked prefix, nested '
            "under the prefix it extends; width = share of requests through it. Hover for tokens and hits, click "
            "to zoom, click the top box to zoom out.</p>"
            + icicle_svg(nodes, by_rank, record)
            + hs.nesting_table(nodes, by_rank)
            + "</section>"
        )
    body += [hs.rag_section(record), hs.breakers_section(record), hs.findings_section(record)]
    body += [*extra_sections, hs.errors_section(record)]
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
        + f'<script type="application/json" id="pp-data">{_script_json(plot_data(record, top, actions))}</script>'
        + f"<script>{JS}</script></body></html>\n"
    )
