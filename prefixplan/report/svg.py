"""Inline SVG for the HTML report (no scripts, no network): escaping and number formatting, the
shared axes and legend, and the x/y line plot every curve uses (:func:`xy_plot`).

Every plot is an ``svg.plot`` with text labels on its axes (``text.axis[data-axis=x|y|y2]``) and a
legend (``g.pp-legend`` of ``g.pp-legend-item``) laid out under the plot area inside the view box,
so nothing is drawn outside the SVG. Plotted values are on the elements as ``data-*`` attributes.
Colours are mid-tone (readable on light and dark backgrounds); text uses the page's colours.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
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
MARKER_COLOR = "#d62728"
PLOT_W = 680
FONT_PX = 11
CHAR_EM = 0.62  # average glyph width of the report's sans-serif in em; a generous estimate for layout
ICICLE_MAX = 300  # candidates drawn in the nesting view (by rank); keeps the page small with --top 0


def esc(x: Any) -> str:
    """Escape text for HTML content and (double-quoted) attribute values."""
    return html.escape("" if x is None else str(x), quote=True)


def num_attr(x: float | int) -> str:
    """A number for a data-* attribute: exact (JSON round-trip) for floats."""
    return repr(float(x)) if isinstance(x, float) else str(int(x))


def px(x: float) -> str:
    return f"{x:.2f}".rstrip("0").rstrip(".") if x != int(x) else str(int(x))


def finite(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def text_width(text: str, size: float = FONT_PX) -> float:
    """Estimated width in px of ``text`` at ``size`` px (generous, for layout without a browser)."""
    return len(text) * size * CHAR_EM


# --- legend and axes -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LegendItem:
    """One legend entry: ``mark`` is ``line``, ``dash``, ``dot`` or ``box``."""

    label: str
    color: str
    mark: str = "line"


def legend(items: Sequence[LegendItem], x: float, y: float, width: float) -> tuple[str, float]:
    """Legend items in rows starting at (x, y), wrapped within ``width``; returns (svg, height)."""
    out = ['<g class="pp-legend">']
    cx, cy, row_h = x, y, 18
    for it in items:
        w = 22 + text_width(it.label) + 18
        if cx > x and cx + w > x + width:
            cx, cy = x, cy + row_h
        if it.mark == "box":
            mark = f'<rect x="{px(cx)}" y="{px(cy - 9)}" width="12" height="10" fill="{it.color}"/>'
        else:
            dash = {"dash": ' stroke-dasharray="5 4"', "dot": ' stroke-dasharray="2 3"'}.get(it.mark, "")
            mark = (
                f'<line x1="{px(cx)}" x2="{px(cx + 16)}" y1="{px(cy - 4)}" y2="{px(cy - 4)}" stroke="{it.color}" '
                f'stroke-width="2"{dash}/>'
            )
        out.append(
            f'<g class="pp-legend-item" data-label="{esc(it.label)}">{mark}'
            f'<text class="legend" x="{px(cx + 22)}" y="{px(cy)}">{esc(it.label)}</text></g>'
        )
        cx += w
    out.append("</g>")
    return "".join(out), cy - y + row_h


@dataclass(frozen=True, slots=True)
class Axis:
    """A plot axis: its label (with units), range, scale and tick formatter."""

    label: str
    lo: float
    hi: float
    log: bool = False
    fmt: Callable[[float], str] = v.si
    ticks: tuple[float, ...] = ()

    def frac(self, x: float) -> float:
        if self.log:
            return (math.log10(max(x, 1e-300)) - math.log10(self.lo)) / (math.log10(self.hi) - math.log10(self.lo))
        return (x - self.lo) / (self.hi - self.lo)

    def tick_values(self, n: int = 5) -> list[float]:
        """Ticks inside the range: given ones; decades (with 2x and 5x when under three decades
        show) on a log axis; 1/2/2.5/5 x 10^k steps on a linear one."""
        if self.ticks:
            return list(self.ticks)
        if self.log:
            a, b = math.log10(self.lo), math.log10(self.hi)
            decades = [10.0**k for k in range(math.floor(a) - 1, math.ceil(b) + 1)]
            ticks = [t for t in decades if self.lo * (1 - 1e-9) <= t <= self.hi * (1 + 1e-9)]
            if len(ticks) < 3:
                ticks = sorted(
                    t * m for t in decades for m in (1, 2, 5) if self.lo * (1 - 1e-9) <= t * m <= self.hi * (1 + 1e-9)
                )
            return ticks
        step = nice_step((self.hi - self.lo) / max(1, n - 1))
        first = math.ceil(self.lo / step - 1e-9) * step
        return [first + i * step for i in range(int((self.hi - first) / step + 1e-9) + 1)]


def nice_step(raw: float) -> float:
    """The smallest 1, 2, 2.5 or 5 x 10^k at least ``raw``."""
    if raw <= 0 or not math.isfinite(raw):
        return 1.0
    mag = 10.0 ** math.floor(math.log10(raw))
    return next(m * mag for m in (1.0, 2.0, 2.5, 5.0, 10.0) if m * mag >= raw * (1 - 1e-9))


def auto_axis(label: str, values: Sequence[float], *, log: bool | None = None, zero: bool = True, **kw: Any) -> Axis:
    """An axis over ``values``: log when they are positive and span a decade (unless told), else
    linear from 0 (``zero``) with 10% headroom."""
    vals = [x for x in values if x is not None and math.isfinite(x)] or [0.0, 1.0]
    lo, hi = min(vals), max(vals)
    use_log = (lo > 0 and hi / lo >= 10) if log is None else log and lo > 0
    if use_log:
        return Axis(label, lo, hi if hi > lo else lo * 10, True, **kw)
    lo = min(0.0, lo) if zero else lo
    hi = hi * 1.05 if hi > 0 else 1.0
    if hi - lo < 1e-12:
        lo, hi = lo - 0.5, hi + 0.5
    step = nice_step((hi - lo) / 4)
    return Axis(label, math.floor(lo / step + 1e-9) * step, math.ceil(hi / step - 1e-9) * step, False, **kw)


@dataclass
class Series:
    """One line: points ``(x, y)``, an optional per-point marker with ``data-*`` attributes."""

    label: str
    color: str
    points: list[tuple[float, float]]
    dash: str = ""
    css: str = "pp-series"
    attrs: dict[str, str] = field(default_factory=dict)
    point_class: str = ""  # draw a circle per point with this class
    point_attrs: list[dict[str, str]] = field(default_factory=list)
    step: bool = False  # draw as steps: each point starts a flat segment up to the next x


@dataclass(frozen=True, slots=True)
class Marker:
    """A vertical (``x``) or horizontal (``y``) reference line with a short label."""

    css: str
    where: str  # "x" or "y"
    value: float
    label: str
    color: str
    dash: str = "5 4"
    attrs: Mapping[str, str] = field(default_factory=dict)


def xy_plot(
    svg_id: str,
    aria: str,
    x: Axis,
    y: Axis,
    series: Sequence[Series],
    *,
    markers: Sequence[Marker] = (),
    extra_legend: Sequence[LegendItem] = (),
    y2: tuple[str, float] | None = None,
    height: int = 300,
) -> str:
    """A line plot with grid, tick labels, axis labels, reference lines and a legend below.

    ``y2`` = (label, factor) adds a right axis whose ticks are the left ticks x factor (e.g. $ per
    GPU-hour). The SVG carries its scale: ``data-x-scale``, ``data-x-min``/``max``, and the plot box
    ``data-left/top/width/height``.
    """
    L, R, T = 70, 70 if y2 else 18, 14
    W = PLOT_W
    pw, ph = W - L - R, height
    items = [LegendItem(s.label, s.color, "dash" if s.dash else "line") for s in series] + [
        LegendItem(m.label, m.color, "dash" if m.dash else "line") for m in markers
    ]
    items += list(extra_legend)
    leg, leg_h = legend(items, L, T + ph + 58, pw)
    H = int(T + ph + 58 + leg_h)

    def sx(value: float) -> float:
        return L + min(1.0, max(0.0, x.frac(value))) * pw

    def sy(value: float) -> float:
        return T + (1 - min(1.0, max(0.0, y.frac(value)))) * ph

    out = [
        f'<svg id="{esc(svg_id)}" class="plot" viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img" '
        f'aria-label="{esc(aria)}" data-axes="{"xy2" if y2 else "xy"}" data-x-scale="{"log" if x.log else "linear"}" '
        f'data-x-min="{num_attr(float(x.lo))}" data-x-max="{num_attr(float(x.hi))}" '
        f'data-left="{L}" data-top="{T}" data-width="{pw}" data-height="{ph}">'
    ]
    for t in y.tick_values():
        yy = sy(t)
        out.append(
            f'<line class="grid" x1="{L}" x2="{L + pw}" y1="{px(yy)}" y2="{px(yy)}"/>'
            f'<text class="tick" x="{L - 6}" y="{px(yy + 4)}" text-anchor="end">{esc(y.fmt(t))}</text>'
        )
        if y2:
            out.append(f'<text class="tick" x="{L + pw + 6}" y="{px(yy + 4)}">{esc(v.money_tick(t * y2[1]))}</text>')
    for t in x.tick_values():
        if not x.lo - 1e-9 * abs(x.lo or 1) <= t <= x.hi * (1 + 1e-9) + 1e-12:
            continue
        xx = sx(t)
        out.append(
            f'<line class="grid" x1="{px(xx)}" x2="{px(xx)}" y1="{T}" y2="{T + ph}"/>'
            f'<text class="tick" x="{px(xx)}" y="{T + ph + 16}" text-anchor="middle">{esc(x.fmt(t))}</text>'
        )
    out.append(
        f'<text class="axis" data-axis="x" x="{px(L + pw / 2)}" y="{T + ph + 38}" text-anchor="middle">'
        f"{esc(x.label)}{', log scale' if x.log else ''}</text>"
        f'<text class="axis" data-axis="y" transform="rotate(-90)" x="{px(-(T + ph / 2))}" y="14" '
        f'text-anchor="middle">{esc(y.label)}</text>'
    )
    if y2:
        out.append(
            f'<text class="axis" data-axis="y2" transform="rotate(90)" x="{px(T + ph / 2)}" y="{px(-(W - 12))}" '
            f'text-anchor="middle">{esc(y2[0])}</text>'
        )
    for m in markers:
        extra = "".join(f' {k}="{esc(val)}"' for k, val in m.attrs.items())
        dash = f' stroke-dasharray="{m.dash}"' if m.dash else ""
        if m.where == "x":
            xx = sx(m.value)
            out.append(
                f'<line class="{esc(m.css)}"{extra} x1="{px(xx)}" x2="{px(xx)}" y1="{T}" y2="{T + ph}" '
                f'stroke="{m.color}" stroke-width="1.5"{dash}><title>{esc(m.label)}</title></line>'
            )
        else:
            yy = sy(m.value)
            out.append(
                f'<line class="{esc(m.css)}"{extra} x1="{L}" x2="{L + pw}" y1="{px(yy)}" y2="{px(yy)}" '
                f'stroke="{m.color}" stroke-width="1.5"{dash}><title>{esc(m.label)}</title></line>'
            )
    for s in series:
        pts = sorted(s.points) if not s.step else list(s.points)
        if s.step:
            coords = []
            for i, (a, b) in enumerate(pts[:-1]):
                coords += [(a, b), (pts[i + 1][0], b)]
        else:
            coords = pts
        path = " ".join(f"{px(sx(a))},{px(sy(b))}" for a, b in coords)
        extra = "".join(f' {k}="{esc(val)}"' for k, val in s.attrs.items())
        dash = f' stroke-dasharray="{s.dash}"' if s.dash else ""
        out.append(
            f'<g class="{esc(s.css)}"{extra}><polyline fill="none" stroke="{s.color}" stroke-width="2"{dash} '
            f'points="{path}"/>'
        )
        if s.point_class:
            for (a, b), attrs in zip(s.points, s.point_attrs or [{} for _ in s.points], strict=False):
                more = "".join(f' {k}="{esc(val)}"' for k, val in attrs.items())
                tip = attrs.get("data-tip", "")
                out.append(
                    f'<circle class="{esc(s.point_class)}"{more} cx="{px(sx(a))}" cy="{px(sy(b))}" r="4" '
                    f'fill="{s.color}"><title>{esc(tip)}</title></circle>'
                )
        out.append("</g>")
    out.append(leg + "</svg>")
    return "".join(out)


# --- the stacked bar of kinds and the icicle --------------------------------------------------


def kinds_bar(kinds: Sequence[tuple[str, int, int]]) -> str:
    """One stacked horizontal bar: prompt tokens by kind; the darker part of each is reused."""
    W, barh = PLOT_W, 36
    total = sum(max(0, t) for _, t, _ in kinds) or 1
    items = [LegendItem(v.KIND_LABELS.get(k, k), KIND_COLORS.get(k, "#bab0ac"), "box") for k, _, _ in kinds]
    items.append(LegendItem("darker part: reused by an unbounded cache", "#555", "box"))
    leg, leg_h = legend(items, 0, barh + 40, W)
    H = int(barh + 40 + leg_h)
    out = [
        f'<svg id="pp-kinds" class="plot" viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img" '
        f'aria-label="where prompt tokens go" data-axes="x" data-total="{total}" data-width="{W}">'
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
        f'<text class="axis" data-axis="x" x="0" y="{barh + 18}">share of {esc(v.n(total))} prompt tokens, by kind '
        "(0% left, 100% right)</text>"
    )
    out.append(leg + "</svg>")
    return "".join(out)


def fit_label(label: str, width: float, short: str = "") -> str:
    """``label`` when it fits in ``width`` px, else ``short`` (e.g. the rank) when that fits, else ''."""
    room = width - 8
    if text_width(label) <= room:
        return label
    return short if short and text_width(short) <= room else ""


def icicle_svg(
    nodes: Sequence[Mapping[str, Any]], cands: Mapping[int, Mapping[str, Any]], record: Mapping[str, Any]
) -> str:
    """The candidate nesting as an icicle; click a box to zoom into it, the top box zooms out.

    Box labels are shown whole or not at all (the rank alone when only that fits); the full
    label of every box is in its tooltip and in the table under the plot.
    """
    W, rowh, top = PLOT_W, 30, 0
    depth = max((nd["depth"] for nd in nodes), default=0)
    plot_h = (depth + 1) * rowh
    labels = sorted({str(nd["label"]) for nd in nodes if nd["rank"] is not None})
    items = [LegendItem(lab, KIND_COLORS.get(lab, "#bab0ac"), "box") for lab in labels]
    leg, leg_h = legend(items, 0, plot_h + 34, W)
    H = int(plot_h + 34 + leg_h)
    out = [
        f'<svg id="pp-icicle" class="plot" viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img" '
        f'aria-label="prefix nesting" data-axes="x" data-width="{W}">'
    ]
    for nd in nodes:
        x0, x1 = nd["x0"] * W, nd["x1"] * W
        rank = nd["rank"]
        c = cands.get(rank, {}) if rank is not None else {}
        if rank is None:
            label = f"all requests ({v.n(nd['hits'])})"
            tip, short, color = label, "", "#cfd6de"
        else:
            label = f"#{rank} {nd['label']} · {v.n(nd['tokens'])} tok"
            short = f"#{rank}"
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
        y = top + nd["depth"] * rowh
        out.append(
            f'<g class="pp-ice" tabindex="0" data-rank="{"" if rank is None else rank}" data-depth="{nd["depth"]}" '
            f'data-x0="{num_attr(float(nd["x0"]))}" data-x1="{num_attr(float(nd["x1"]))}" data-hits="{num_attr(nd["hits"])}" '
            f'data-tokens="{"" if nd["tokens"] is None else nd["tokens"]}" data-label="{esc(label)}" '
            f'data-short="{esc(short)}" data-tip="{esc(tip)}">'
            f'<rect x="{px(x0)}" y="{y}" width="{px(max(0.0, x1 - x0))}" height="{rowh - 2}" fill="{color}"/>'
            f'<text x="{px(x0 + 4)}" y="{y + 19}">{esc(fit_label(label, x1 - x0, short))}</text>'
            f"<title>{esc(tip)}</title></g>"
        )
    out.append(
        f'<text class="axis" data-axis="x" x="0" y="{plot_h + 16}">width: share of requests through the prefix; '
        "rows: nesting depth (a prefix under the one it extends)</text>"
    )
    out.append(leg + "</svg>")
    return "".join(out)
