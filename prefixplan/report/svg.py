"""Inline SVG plots for the HTML report (no scripts, no network), with the escaping and number
formatting every SVG attribute uses. Each plot carries its data as ``data-*`` attributes.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from prefixplan.report import views as v

KIND_COLORS = {
    "system": "#4e79a7",
    "tools": "#f28e2b",
    "rag": "#59a14f",
    "history": "#b07aa1",
    "user": "#9d9d9d",
    "template": "#edc948",
    "system+tools": "#e15759",
    "raw": "#76b7b2",
    "trace": "#76b7b2",
    "unknown": "#bab0ac",
}
POLICY_COLORS = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#b07aa1", "#76b7b2", "#ff9da7", "#9c755f")
PLOT_W = 680
ICICLE_MAX = 300  # candidates drawn in the nesting view (by rank); keeps the page small with --top 0


def esc(x: Any) -> str:
    """Escape text for HTML content and (double-quoted) attribute values."""
    return html.escape("" if x is None else str(x), quote=True)


def num_attr(x: float | int) -> str:
    """A number for a data-* attribute: exact (JSON round-trip) for floats."""
    return repr(float(x)) if isinstance(x, float) else str(int(x))


def px(x: float) -> str:
    return f"{x:.2f}".rstrip("0").rstrip(".") if x != int(x) else str(int(x))


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


def finite(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


# --- plots -------------------------------------------------------------------------------


def capacity_plot(
    curves: Mapping[str, Sequence[tuple[float, float]]], configured: float | None, infinite: float | None
) -> str:
    """Hit rate vs cache capacity, one line per policy, a marker at the configured capacity.

    The SVG carries its scale (``data-x-scale``, ``data-x-min``/``max`` in tokens, the plot
    box in ``data-left/top/width/height``) so a reader can map points back to values.
    """
    W, H, L, R, T, B = PLOT_W, 340, 64, 16, 16, 46
    pw, ph = W - L - R, H - T - B
    xs = [c for pts in curves.values() for c, _ in pts] + ([configured] if configured else [])
    lo, hi = min(xs), max(xs)
    log = lo > 0 and hi / lo >= 10
    if log:
        a, b = math.log10(lo), math.log10(hi)
    else:
        a, b = (0.0, hi * 1.1 or 1.0) if lo >= 0 else (lo, hi)
    if b - a < 1e-12:
        a, b = a - 0.5, b + 0.5

    def sx(x: float) -> float:
        u = math.log10(x) if log else x
        return L + (u - a) / (b - a) * pw

    def sy(y: float) -> float:
        return T + (1 - y) * ph

    out = [
        f'<svg id="pp-capacity" class="plot" viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img" '
        f'aria-label="hit rate versus cache capacity" data-x-scale="{"log" if log else "linear"}" '
        f'data-x-min="{num_attr(10**a if log else a)}" data-x-max="{num_attr(10**b if log else b)}" '
        f'data-left="{L}" data-top="{T}" data-width="{pw}" data-height="{ph}">'
    ]
    for i in range(6):  # y grid: 0..100 %
        y = sy(i / 5)
        out.append(
            f'<line class="grid" x1="{L}" x2="{L + pw}" y1="{px(y)}" y2="{px(y)}"/>'
            f'<text class="tick" x="{L - 6}" y="{px(y + 4)}" text-anchor="end">{i * 20}%</text>'
        )
    ticks = (
        [10.0**k for k in range(math.ceil(a - 1e-9), math.floor(b + 1e-9) + 1)]
        if log
        else [a + (b - a) * i / 4 for i in range(5)]
    )
    for t in ticks:
        x = sx(t)
        out.append(
            f'<line class="grid" x1="{px(x)}" x2="{px(x)}" y1="{T}" y2="{T + ph}"/>'
            f'<text class="tick" x="{px(x)}" y="{T + ph + 16}" text-anchor="middle">{esc(v.si(t))}</text>'
        )
    out.append(
        f'<text class="axis" x="{L + pw / 2}" y="{H - 6}" text-anchor="middle">cache capacity (tokens'
        f"{', log scale' if log else ''})</text>"
        f'<text class="axis" transform="rotate(-90)" x="{-(T + ph / 2)}" y="14" text-anchor="middle">'
        f"hit rate (share of prompt tokens)</text>"
    )
    if infinite is not None:
        y = sy(infinite)
        out.append(
            f'<line class="pp-infinite" data-hit-rate="{num_attr(infinite)}" x1="{L}" x2="{L + pw}" '
            f'y1="{px(y)}" y2="{px(y)}"><title>infinite cache: {esc(v.pct(infinite))}</title></line>'
            f'<text class="note" x="{L + pw - 4}" y="{px(y - 5)}" text-anchor="end">infinite cache '
            f"{esc(v.pct(infinite))}</text>"
        )
    if configured:
        x = sx(configured)
        out.append(
            f'<line class="pp-cap-marker" data-capacity="{num_attr(configured)}" x1="{px(x)}" x2="{px(x)}" '
            f'y1="{T}" y2="{T + ph}"><title>configured capacity: {esc(v.n(configured))} tokens</title></line>'
            f'<text class="note" x="{px(x + 4)}" y="{T + 12}">configured {esc(v.si(configured))}</text>'
        )
    for i, (policy, pts) in enumerate(curves.items()):
        color = POLICY_COLORS[i % len(POLICY_COLORS)]
        path = " ".join(f"{px(sx(c))},{px(sy(r))}" for c, r in pts)
        out.append(
            f'<g class="pp-series" data-policy="{esc(policy)}"><polyline fill="none" stroke="{color}" '
            f'stroke-width="2" points="{path}"/>'
        )
        for c, r in pts:
            tip = f"{policy}: {v.n(c)} tokens → {v.pct(r)}"
            out.append(
                f'<circle class="pp-pt" data-policy="{esc(policy)}" data-capacity="{num_attr(c)}" '
                f'data-hit-rate="{num_attr(r)}" cx="{px(sx(c))}" cy="{px(sy(r))}" r="4" fill="{color}" '
                f'data-tip="{esc(tip)}"><title>{esc(tip)}</title></circle>'
            )
        ly = T + 16 + 18 * i
        out.append(
            f'<rect x="{L + 10}" y="{ly - 9}" width="14" height="4" fill="{color}"/>'
            f'<text class="legend" x="{L + 30}" y="{ly - 4}">{esc(policy)}</text></g>'
        )
    out.append("</svg>")
    return "".join(out)


def kinds_bar(kinds: Sequence[tuple[str, int, int]]) -> str:
    """One stacked horizontal bar: prompt tokens by kind; the darker part of each is reused."""
    W, H, barh = PLOT_W, 56, 36
    total = sum(max(0, t) for _, t, _ in kinds) or 1
    out = [
        f'<svg id="pp-kinds" class="plot" viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img" '
        f'aria-label="where prompt tokens go" data-total="{total}" data-width="{W}">'
    ]
    x = 0.0
    for kind, tokens, reused in kinds:
        w = max(0, tokens) / total * W
        rw = min(max(0, reused), max(0, tokens)) / total * W
        color = KIND_COLORS.get(kind, "#bab0ac")
        tip = f"{v.KIND_LABELS.get(kind, kind)}: {v.n(tokens)} tokens ({v.pct(tokens / total)}), {v.n(reused)} reusable"
        out.append(
            f'<g class="pp-kind-seg" data-tip="{esc(tip)}"><rect class="pp-kind" data-kind="{esc(kind)}" '
            f'data-tokens="{tokens}" data-reused="{reused}" x="{px(x)}" y="0" width="{px(w)}" height="{barh}" '
            f'fill="{color}" fill-opacity="0.55"/><rect class="pp-kind-reused" data-kind="{esc(kind)}" '
            f'x="{px(x)}" y="0" width="{px(rw)}" height="{barh}" fill="{color}"/><title>{esc(tip)}</title></g>'
        )
        x += w
    out.append(
        f'<text class="note" x="0" y="{H - 4}">darker part: tokens an infinite prefix cache would reuse</text></svg>'
    )
    return "".join(out)


def _fit(label: str, width: float) -> str:
    chars = int((width - 8) / 7)
    if chars < 2:
        return ""
    return label if len(label) <= chars else label[: chars - 1] + "…"


def icicle_svg(
    nodes: Sequence[Mapping[str, Any]], cands: Mapping[int, Mapping[str, Any]], record: Mapping[str, Any]
) -> str:
    """The candidate nesting as an icicle; click a box to zoom into it, the top box zooms out."""
    W, rowh = PLOT_W, 30
    depth = max((nd["depth"] for nd in nodes), default=0)
    H = (depth + 1) * rowh
    out = [
        f'<svg id="pp-icicle" class="plot" viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img" '
        f'aria-label="prefix nesting" data-width="{W}">'
    ]
    for nd in nodes:
        x0, x1 = nd["x0"] * W, nd["x1"] * W
        rank = nd["rank"]
        c = cands.get(rank, {}) if rank is not None else {}
        if rank is None:
            label = f"all requests ({v.n(nd['hits'])})"
            tip = label
            color = "#cfd6de"
        else:
            label = f"#{rank} {nd['label']} · {v.n(nd['tokens'])} tok"
            prev = v.safe_preview(c)
            tip = (
                f"#{rank} {nd['label']}: {v.n(nd['tokens'])} tokens, {v.n(nd['hits'])} hits, "
                f"{v.users(c)} users, {v.n(c.get('reusable_tokens'))} reusable"
            )
            if prev:
                tip += f" — {prev}"
            elif c.get("withheld"):
                tip += " — " + v.withheld_note(c, record)
            color = KIND_COLORS.get(str(nd["label"]), "#bab0ac")
        y = nd["depth"] * rowh
        out.append(
            f'<g class="pp-ice" tabindex="0" data-rank="{"" if rank is None else rank}" data-depth="{nd["depth"]}" '
            f'data-x0="{num_attr(float(nd["x0"]))}" data-x1="{num_attr(float(nd["x1"]))}" data-hits="{num_attr(nd["hits"])}" '
            f'data-tokens="{"" if nd["tokens"] is None else nd["tokens"]}" data-label="{esc(label)}" data-tip="{esc(tip)}">'
            f'<rect x="{px(x0)}" y="{y}" width="{px(max(0.0, x1 - x0))}" height="{rowh - 2}" fill="{color}"/>'
            f'<text x="{px(x0 + 4)}" y="{y + 19}">{esc(_fit(label, x1 - x0))}</text><title>{esc(tip)}</title></g>'
        )
    out.append("</svg>")
    return "".join(out)
