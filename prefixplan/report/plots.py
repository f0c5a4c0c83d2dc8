"""The HTML report's plots of the simulation section, drawn with :func:`prefixplan.report.svg.xy_plot`:

* ``#pp-capacity``: hit rate vs cache capacity per policy, in KV GB when the KV size is known,
  with the configured capacity, the unbounded rate and the 90% / 95% sizes marked;
* ``#pp-savings``: GPU-hours (and $) per day saved vs capacity, from ``savings_curve``;
* ``#pp-timeline``: hit rate per time window (warm-up and drift) from ``timeline``;
* ``#pp-top``: the top prefixes' reusable tokens as bars split by kind;
* ``#pp-ttft``: the TTFT distribution without caching and at the headline cache, from ``ttft``.

Each reads only the record (:mod:`prefixplan.report.views`) and returns "" when its data are absent.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

from prefixplan.report import views as v
from prefixplan.report.actions import TARGETS, KVSize, capacity_for, per_day
from prefixplan.report.svg import (
    KIND_COLORS,
    MARKER_COLOR,
    PLOT_W,
    POLICY_COLORS,
    Axis,
    LegendItem,
    Marker,
    Series,
    auto_axis,
    esc,
    legend,
    num_attr,
    px,
    text_width,
    xy_plot,
)

MUTED = "#8a94a3"


def _pct_axis(label: str) -> Axis:
    return Axis(label, 0.0, 1.0, False, lambda t: f"{t * 100:.0f}%", (0.0, 0.2, 0.4, 0.6, 0.8, 1.0))


def _gb(x: float) -> str:
    return f"{x:g} GB" if x >= 1 else f"{x * 1000:g} MB"


def capacity_plot(
    curves: Mapping[str, Sequence[tuple[float, float]]],
    configured: float | None,
    infinite: float | None,
    kv: KVSize | None = None,
) -> str:
    """Hit rate vs cache capacity, one line per policy; markers at the configured capacity and at
    the smallest swept capacities reaching 90% / 95% of the unbounded rate.

    The x axis is KV memory in GB when ``kv`` is known (``data-x-unit="GB"``,
    ``data-bytes-per-token``), else tokens. Points keep their capacity in tokens
    (``data-capacity``) and their hit rate (``data-hit-rate``).
    """
    scale = (kv.bytes_per_token / 1e9) if kv else 1.0
    caps = [c for pts in curves.values() for c, _ in pts] + ([configured] if configured else [])
    unit = (
        f"KV cache memory (GB at {v.n(kv.bytes_per_token)} B/token, {kv.source})" if kv else "cache capacity (tokens)"
    )
    x = auto_axis(unit, [c * scale for c in caps], zero=True, fmt=_gb if kv else v.si)
    series = []
    for i, (policy, pts) in enumerate(curves.items()):
        color = POLICY_COLORS[i % len(POLICY_COLORS)]
        attrs = []
        for c, r in pts:
            tip = f"{policy}: {v.n(c)} tokens" + (f" ({c * scale:,.2f} GB)" if kv else "") + f" → {v.pct(r)}"
            attrs.append(
                {
                    "data-policy": policy,
                    "data-capacity": num_attr(c),
                    "data-hit-rate": num_attr(r),
                    "data-tip": tip,
                }
            )
        series.append(
            Series(
                f"{policy} hit rate",
                color,
                [(c * scale, r) for c, r in pts],
                attrs={"data-policy": policy},
                point_class="pp-pt",
                point_attrs=attrs,
            )
        )
    markers = []
    if infinite is not None:
        markers.append(
            Marker(
                "pp-infinite",
                "y",
                infinite,
                f"unbounded cache {v.pct(infinite)}",
                MUTED,
                "2 3",
                {"data-hit-rate": num_attr(infinite)},
            )
        )
    if configured:
        markers.append(
            Marker(
                "pp-cap-marker",
                "x",
                configured * scale,
                f"configured {v.n(configured)} tokens" + (f" ({configured * scale:,.1f} GB)" if kv else ""),
                MARKER_COLOR,
                "5 4",
                {"data-capacity": num_attr(configured)},
            )
        )
    lru = curves.get("lru") or next(iter(curves.values()), [])
    if infinite is not None and lru:
        for share, color in zip(TARGETS, ("#59a14f", "#b07aa1"), strict=False):
            found = capacity_for(lru, share * infinite)
            if found:
                markers.append(
                    Marker(
                        "pp-target",
                        "x",
                        found[0] * scale,
                        f"{share:.0%} of unbounded: {v.n(found[0])} tokens",
                        color,
                        "3 3",
                        {"data-share": num_attr(share), "data-capacity": num_attr(found[0])},
                    )
                )
    svg = xy_plot(
        "pp-capacity",
        "hit rate versus cache capacity",
        x,
        _pct_axis("hit rate (share of prompt tokens)"),
        series,
        markers=markers,
    )
    extra = f' data-x-unit="{"GB" if kv else "tokens"}"' + (
        f' data-bytes-per-token="{num_attr(kv.bytes_per_token)}"' if kv else ""
    )
    return svg.replace('<svg id="pp-capacity"', f'<svg id="pp-capacity"{extra}', 1)


def savings_plot(record: Mapping[str, Any], kv: KVSize | None, price: float | None) -> str:
    """GPU-hours saved per day (at the log's rate) vs capacity per policy; $ per day on the right axis."""
    sim = record.get("simulation") or {}
    curve = sim.get("savings_curve")
    if not isinstance(curve, Mapping) or not curve:
        return ""
    day = per_day(record)
    factor = (day / 3600.0) if day else 1.0
    y_label = "GPU-hours saved per day (log's rate)" if day else "GPU-seconds saved over the log"
    scale = (kv.bytes_per_token / 1e9) if kv else 1.0
    series, ys, xs = [], [], []
    for i, (policy, pts) in enumerate(curve.items()):
        rows = [
            (float(p["capacity_tokens"]), float(p["gpu_seconds_saved"]) * factor)
            for p in pts
            if isinstance(p, Mapping) and p.get("capacity_tokens") is not None
        ]
        if not rows:
            continue
        ys += [b for _, b in rows]
        xs += [a * scale for a, _ in rows]
        series.append(
            Series(
                f"{policy} saved",
                POLICY_COLORS[i % len(POLICY_COLORS)],
                [(a * scale, b) for a, b in rows],
                css="pp-saving",
                attrs={
                    "data-policy": str(policy),
                    "data-values": ";".join(f"{num_attr(a)}:{num_attr(b)}" for a, b in rows),
                },
            )
        )
    if not series:
        return ""
    configured = v.configured_capacity(sim)
    markers = []
    if configured:
        xs.append(configured * scale)
        markers.append(
            Marker(
                "pp-cap-marker",
                "x",
                configured * scale,
                f"configured {v.n(configured)} tokens",
                MARKER_COLOR,
                "5 4",
                {"data-capacity": num_attr(configured)},
            )
        )
    unit = f"KV cache memory (GB, {kv.source})" if kv else "cache capacity (tokens)"
    x = auto_axis(unit, xs, fmt=_gb if kv else v.si)
    y = auto_axis(y_label, ys, log=False, fmt=lambda t: f"{t:,.4g}")
    y2 = ("$ saved per day" if day else "$ saved over the log", price * (1 if day else 1 / 3600)) if price else None
    return xy_plot("pp-savings", "savings versus cache capacity", x, y, series, markers=markers, y2=y2)


def timeline_plot(record: Mapping[str, Any]) -> str:
    """Hit rate in each time window: in-batch, unbounded and the headline cache."""
    tl = (record.get("simulation") or {}).get("timeline")
    if not isinstance(tl, Mapping) or not tl.get("series"):
        return ""
    edges = [float(e) for e in tl.get("edges_s") or []]
    prompt = [float(p) for p in tl.get("prompt_tokens") or []]
    if len(edges) < 2 or len(prompt) != len(edges) - 1:
        return ""
    minutes = edges[-1] >= 180
    unit = 60.0 if minutes else 1.0
    mids = [(a + b) / 2 / unit for a, b in itertools.pairwise(edges)]
    names = {"in_batch": "in-batch only", "persistent": "unbounded cache", "headline": "configured cache"}
    series = []
    for i, (name, data) in enumerate(tl["series"].items()):
        hits = [float(h) for h in data.get("hit_tokens") or []]
        pts = [(m, h / p) for m, h, p in zip(mids, hits, prompt, strict=False) if p > 0]
        if not pts:
            continue
        series.append(
            Series(
                f"{names.get(name, name)} ({data.get('label')})" if name == "headline" else names.get(name, name),
                POLICY_COLORS[i % len(POLICY_COLORS)],
                pts,
                css="pp-window",
                attrs={"data-series": name, "data-rates": ";".join(num_attr(r) for _, r in pts)},
            )
        )
    if not series:
        return ""
    x = auto_axis(
        f"time since the first request ({'minutes' if minutes else 'seconds'})", [0.0, edges[-1] / unit], log=False
    )
    width = edges[1] - edges[0]
    window = f"{width / 60:.1f}-min" if width >= 60 else f"{width:.0f}-s"
    y = _pct_axis(f"hit rate per {window} window")
    return xy_plot("pp-timeline", "hit rate over time", x, y, series, height=240)


def ttft_plot(record: Mapping[str, Any]) -> str:
    """Requests per TTFT bin without caching and with the headline cache (step lines)."""
    tt = (record.get("simulation") or {}).get("ttft")
    if not isinstance(tt, Mapping) or not tt.get("edges_s"):
        return ""
    edges = [float(e) * 1000 for e in tt["edges_s"]]
    series = []
    for i, (key, label) in enumerate((("without", "without prefix caching"), ("with", f"with {tt.get('run')}"))):
        counts = [int(c) for c in tt.get(key) or []]
        if len(counts) != len(edges) - 1:
            return ""
        pts = [(e, float(c)) for e, c in zip(edges, [*counts, counts[-1]], strict=False)]
        series.append(
            Series(
                label,
                POLICY_COLORS[i * 3 % len(POLICY_COLORS)],
                pts,
                css="pp-ttft",
                attrs={"data-series": key, "data-counts": ",".join(str(c) for c in counts)},
                step=True,
            )
        )
    x = auto_axis("TTFT (prefill time, ms; queueing not modelled)", edges, log=edges[0] > 0, fmt=lambda t: f"{t:g}")
    y = auto_axis("requests per bin", [p[1] for s in series for p in s.points], log=False, fmt=lambda t: f"{t:,.0f}")
    return xy_plot("pp-ttft", "TTFT distribution before and after", x, y, series, height=220)


PART_KIND = {"tool": "tools", "system": "system", "doc": "rag", "user": "user", "assistant": "history"}


def kind_split(c: Mapping[str, Any]) -> list[tuple[str, float]]:
    """A candidate's reusable tokens split by kind, in proportion to its parts' tokens (the rest: template)."""
    length = float(c.get("length") or 0)
    reusable = float(c.get("reusable_tokens") or 0)
    if length <= 0:
        return []
    tokens: dict[str, float] = {}
    for p in c.get("parts") or []:
        if isinstance(p, Mapping):
            k = PART_KIND.get(str(p.get("kind")), "history")
            tokens[k] = tokens.get(k, 0.0) + float(p.get("tokens") or 0)
    used = sum(tokens.values())
    if used < length:
        tokens["template"] = tokens.get("template", 0.0) + (length - used)
    total = sum(tokens.values()) or 1.0
    order = [k for k in (*v.KIND_ORDER, *sorted(tokens)) if k in tokens]
    return [(k, reusable * tokens[k] / total) for k in dict.fromkeys(order)]


def top_prefixes_plot(record: Mapping[str, Any], top: int = 10) -> str:
    """Horizontal bars of reusable tokens for the top shared prefixes, split by kind; withheld
    prefixes are one grey bar (their count and tokens, no text)."""
    cands = sorted(
        (c for c in record.get("candidates") or [] if c.get("rank") is not None), key=lambda c: int(c["rank"])
    )
    shown = [c for c in cands if not c.get("withheld")][:top]
    withheld = [c for c in cands if c.get("withheld")]
    rows: list[tuple[str, list[tuple[str, float]], Mapping[str, str]]] = []
    for c in shown:
        rows.append((f"#{c['rank']} {c.get('label')}", kind_split(c), {"data-rank": str(c["rank"])}))
    if withheld:
        total = float(sum(c.get("reusable_tokens") or 0 for c in withheld))
        rows.append((f"{len(withheld)} withheld", [("withheld", total)], {"data-withheld-count": str(len(withheld))}))
    if not rows:
        return ""
    left = int(max(text_width(r[0]) for r in rows) + 30)
    W, T, barh, gap = PLOT_W, 8, 18, 6
    pw = W - left - 20
    ph = len(rows) * (barh + gap)
    vmax = max(sum(t for _, t in parts) for _, parts, _ in rows) or 1.0
    x = auto_axis("reusable tokens (saved over all hits)", [0.0, vmax], log=False)
    kinds = sorted({k for _, parts, _ in rows for k, _ in parts}, key=lambda k: (k not in v.KIND_ORDER, k))
    color = dict(KIND_COLORS, withheld="#bab0ac")
    items = [LegendItem(v.KIND_LABELS.get(k, k), color.get(k, "#bab0ac"), "box") for k in kinds]
    leg, leg_h = legend(items, left, T + ph + 56, pw)
    H = int(T + ph + 56 + leg_h)
    out = [
        f'<svg id="pp-top" class="plot" viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img" '
        f'aria-label="top prefixes by reusable tokens" data-axes="xy" data-left="{left}" data-width="{pw}" '
        f'data-x-max="{num_attr(float(x.hi))}">'
    ]
    for t in x.tick_values():
        xx = left + x.frac(t) * pw
        out.append(
            f'<line class="grid" x1="{px(xx)}" x2="{px(xx)}" y1="{T}" y2="{T + ph}"/>'
            f'<text class="tick" x="{px(xx)}" y="{T + ph + 14}" text-anchor="middle">{esc(v.si(t))}</text>'
        )
    for i, (label, parts, attrs) in enumerate(rows):
        y = T + i * (barh + gap)
        extra = "".join(f' {k}="{esc(val)}"' for k, val in attrs.items())
        total = sum(t for _, t in parts)
        tip = (
            f"{label}: {v.n(round(total))} reusable tokens ("
            + ", ".join(f"{v.KIND_LABELS.get(k, k)} {v.n(round(t))}" for k, t in parts)
            + ")"
        )
        out.append(
            f'<g class="pp-bar"{extra} data-reusable="{num_attr(total)}" data-tip="{esc(tip)}">'
            f'<text class="tick" x="{left - 6}" y="{px(y + 13)}" text-anchor="end">{esc(label)}</text>'
        )
        xx = float(left)
        for kind, tokens in parts:
            w = tokens / x.hi * pw
            out.append(
                f'<rect class="pp-bar-seg" data-kind="{esc(kind)}" data-tokens="{num_attr(tokens)}" x="{px(xx)}" '
                f'y="{y}" width="{px(w)}" height="{barh}" fill="{color.get(kind, "#bab0ac")}"/>'
            )
            xx += w
        out.append(f"<title>{esc(tip)}</title></g>")
    out.append(
        f'<text class="axis" data-axis="x" x="{px(left + pw / 2)}" y="{T + ph + 32}" text-anchor="middle">'
        f"{esc(x.label)}</text>"
        f'<text class="axis" data-axis="y" transform="rotate(-90)" x="{px(-(T + ph / 2))}" y="12" '
        'text-anchor="middle">prefix (rank, kind)</text>'
    )
    out.append(leg + "</svg>")
    return "".join(out)
