"""Compare two analysis records: ``prefixplan diff BEFORE.json AFTER.json`` and ``report --baseline``.

What changed between two logs (or two prompt versions of the same traffic): the headline
metrics (hit rates of the unbounded, in-batch and configured caches, reusable and prompt tokens,
GPU-seconds saved), the cache breakers (fixed, new, changed cost) and the shared prefixes (new,
gone, changed hits or reusable tokens). Prefixes are matched by their token hash (the key
contract's ``pp1:tok:`` hash), else by key, else by (namespace, kind, length); breakers by kind,
pattern and position. The privacy rule of each record is kept: a withheld prefix shows no text.

Output is deterministic (no times, stable order), so a PR comment can be updated in place.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from prefixplan.report import views as v

TOP = 10


@dataclass(frozen=True, slots=True)
class MetricChange:
    """One headline figure before and after (``unit``: ``rate``, ``tokens``, ``seconds`` or ``count``)."""

    metric: str
    before: float | None
    after: float | None
    unit: str = "count"

    @property
    def delta(self) -> float | None:
        return self.after - self.before if self.before is not None and self.after is not None else None


@dataclass(frozen=True, slots=True)
class BreakerChange:
    """A cache breaker that was ``fixed`` (only before), is ``new`` (only after) or ``changed``."""

    status: str
    kind: str
    pattern: str
    where: str
    cost_before: int | None
    cost_after: int | None
    context: str


@dataclass(frozen=True, slots=True)
class PrefixChange:
    """A shared prefix that is ``new``, ``gone`` or ``changed`` (hits or reusable tokens)."""

    status: str
    label: str
    length: int | None
    rank_before: int | None
    rank_after: int | None
    hits_before: int | None
    hits_after: int | None
    reusable_before: int | None
    reusable_after: int | None
    preview: str | None  # None when withheld in either record

    @property
    def reusable_delta(self) -> int:
        return (self.reusable_after or 0) - (self.reusable_before or 0)


@dataclass
class RecordDiff:
    """:func:`diff_records`' result."""

    before: str
    after: str
    metrics: list[MetricChange] = field(default_factory=list)
    breakers: list[BreakerChange] = field(default_factory=list)
    prefixes: list[PrefixChange] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def metric(self, name: str) -> MetricChange:
        return next(m for m in self.metrics if m.metric == name)

    def to_json(self) -> dict[str, Any]:
        return {
            "before": self.before,
            "after": self.after,
            "metrics": [{**asdict(m), "delta": m.delta} for m in self.metrics],
            "breakers": [asdict(b) for b in self.breakers],
            "prefixes": [{**asdict(p), "reusable_delta": p.reusable_delta} for p in self.prefixes],
            "notes": list(self.notes),
        }


def _inputs(record: Mapping[str, Any]) -> str:
    return ", ".join(str(p) for p in (record.get("inputs") or {}).get("paths") or []) or "-"


def _rate(sim: Mapping[str, Any] | None, name: str) -> float | None:
    g = v.generations(sim).get(name)
    return g["hit_rate"] if g else None


def _metrics(before: Mapping[str, Any], after: Mapping[str, Any]) -> tuple[list[MetricChange], list[str]]:
    sb, sa = before.get("summary") or {}, after.get("summary") or {}
    simb, sima = before.get("simulation"), after.get("simulation")
    out = [
        MetricChange("hit rate, unbounded cache", sb.get("hit_rate_tokens"), sa.get("hit_rate_tokens"), "rate"),
        MetricChange("requests that hit", sb.get("hit_rate_requests"), sa.get("hit_rate_requests"), "rate"),
        MetricChange("hit rate, in-batch sharing only", _rate(simb, "in_batch"), _rate(sima, "in_batch"), "rate"),
    ]
    notes = []
    hb, ha = v.generations(simb).get("headline"), v.generations(sima).get("headline")
    if hb and ha and hb.get("capacity_tokens") == ha.get("capacity_tokens"):
        out.append(MetricChange(f"hit rate, {ha['label']}", hb["hit_rate"], ha["hit_rate"], "rate"))
    elif hb or ha:
        notes.append("the configured capacities differ (or one record has none): their hit rates are not compared")
    out += [
        MetricChange("reusable tokens", sb.get("reusable_tokens"), sa.get("reusable_tokens"), "tokens"),
        MetricChange("prompt tokens", sb.get("prompt_tokens"), sa.get("prompt_tokens"), "tokens"),
        MetricChange("requests", sb.get("requests"), sa.get("requests")),
        MetricChange("shared prefixes", sb.get("candidates"), sa.get("candidates")),
    ]
    savb = (simb or {}).get("savings") if isinstance(simb, Mapping) else None
    sava = (sima or {}).get("savings") if isinstance(sima, Mapping) else None
    if isinstance(savb, Mapping) and isinstance(sava, Mapping):
        out.append(
            MetricChange("GPU-seconds saved", savb.get("gpu_seconds_saved"), sava.get("gpu_seconds_saved"), "seconds")
        )
        out.append(
            MetricChange("TTFT p50 with caching", savb.get("ttft_p50_with_s"), sava.get("ttft_p50_with_s"), "seconds")
        )
    cost_b = sum(int(b.get("cost_tokens") or 0) for b in before.get("breakers") or [])
    cost_a = sum(int(b.get("cost_tokens") or 0) for b in after.get("breakers") or [])
    out.append(MetricChange("cache-breaker cost", cost_b, cost_a, "tokens"))
    out.append(MetricChange("malformed lines", sb.get("malformed_lines"), sa.get("malformed_lines")))
    if (before.get("tokenizer") or {}).get("fingerprint") != (after.get("tokenizer") or {}).get("fingerprint"):
        notes.append("the two analyses used different tokenizers: token counts are not directly comparable")
    if (before.get("granularity") or {}).get("block_size") != (after.get("granularity") or {}).get("block_size"):
        notes.append("the two analyses used different block sizes")
    return [m for m in out if m.before is not None or m.after is not None], notes


def _breaker_key(b: Mapping[str, Any]) -> tuple[Any, ...]:
    if b.get("kind") == "dynamic-system":
        return (b.get("kind"), b.get("pattern"), b.get("line"), b.get("column"))
    return (b.get("kind"), b.get("pattern"), "" if b.get("withheld") else b.get("example"))


def _context(*bs: Mapping[str, Any] | None) -> str:
    if any(b is not None and b.get("withheld") for b in bs):
        return "(withheld)"
    b = next(b for b in bs if b is not None)
    return str(b.get("preview") or b.get("example") or "")


def _breakers(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[BreakerChange]:
    bb = {_breaker_key(b): b for b in before.get("breakers") or []}
    ba = {_breaker_key(b): b for b in after.get("breakers") or []}
    out = []
    for key in list(dict.fromkeys([*bb, *ba])):
        b0, b1 = bb.get(key), ba.get(key)
        ref = b0 if b0 is not None else b1
        assert ref is not None
        c0 = int(b0.get("cost_tokens") or 0) if b0 is not None else None
        c1 = int(b1.get("cost_tokens") or 0) if b1 is not None else None
        status = "fixed" if b1 is None else "new" if b0 is None else "changed" if c0 != c1 else "unchanged"
        out.append(
            BreakerChange(
                status, str(ref.get("kind")), str(ref.get("pattern")), v.breaker_where(ref), c0, c1, _context(b0, b1)
            )
        )
    order = {"fixed": 0, "new": 1, "changed": 2, "unchanged": 3}
    return sorted(out, key=lambda b: (order[b.status], -max(b.cost_before or 0, b.cost_after or 0), b.kind))


def _prefix_key(c: Mapping[str, Any]) -> tuple[Any, ...]:
    if c.get("token_hash"):
        return ("hash", c["token_hash"])
    if c.get("key"):
        return ("key", c["key"])
    return ("shape", c.get("namespace"), c.get("label"), c.get("length"))


def _prefixes(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[PrefixChange]:
    cb: dict[tuple[Any, ...], Mapping[str, Any]] = {}
    for c in before.get("candidates") or []:
        cb.setdefault(_prefix_key(c), c)
    ca: dict[tuple[Any, ...], Mapping[str, Any]] = {}
    for c in after.get("candidates") or []:
        ca.setdefault(_prefix_key(c), c)
    out = []
    for key in list(dict.fromkeys([*cb, *ca])):
        c0, c1 = cb.get(key), ca.get(key)
        ref = c1 if c1 is not None else c0
        assert ref is not None
        withheld = any(c is not None and c.get("withheld") for c in (c0, c1))
        status = "gone" if c1 is None else "new" if c0 is None else "changed"
        if (
            c0 is not None
            and c1 is not None
            and (c0.get("hits"), c0.get("reusable_tokens")) == (c1.get("hits"), c1.get("reusable_tokens"))
        ):
            continue  # unchanged
        out.append(
            PrefixChange(
                status,
                str(ref.get("label")),
                ref.get("length"),
                c0.get("rank") if c0 is not None else None,
                c1.get("rank") if c1 is not None else None,
                c0.get("hits") if c0 is not None else None,
                c1.get("hits") if c1 is not None else None,
                c0.get("reusable_tokens") if c0 is not None else None,
                c1.get("reusable_tokens") if c1 is not None else None,
                None if withheld else v.safe_preview(ref),
            )
        )
    return sorted(out, key=lambda p: (-abs(p.reusable_delta), p.rank_after or p.rank_before or 0))


def diff_records(
    before: Mapping[str, Any], after: Mapping[str, Any], *, before_name: str = "", after_name: str = ""
) -> RecordDiff:
    """Compare two analysis records (their JSON form)."""
    metrics, notes = _metrics(before, after)
    return RecordDiff(
        before_name or _inputs(before),
        after_name or _inputs(after),
        metrics,
        _breakers(before, after),
        _prefixes(before, after),
        notes,
    )


def diff_files(before: str | Path, after: str | Path) -> RecordDiff:
    """Read two analysis records (``prefixplan analyze --json``) and compare them.

    Raises:
        InputError: a file is missing, not JSON, not an analysis record or from a newer schema.
    """
    from prefixplan.analysis.record_io import load_record

    rb, ra = load_record(before).to_json(), load_record(after).to_json()
    return diff_records(rb, ra, before_name=f"{before} ({_inputs(rb)})", after_name=f"{after} ({_inputs(ra)})")


# --- formatting shared by the Markdown, HTML and console renderers ---------------------------


def fmt_value(x: float | None, unit: str) -> str:
    if x is None:
        return "-"
    if unit == "rate":
        return v.pct(x)
    if unit == "seconds":
        return f"{x * 1000:,.0f} ms" if abs(x) < 1 else f"{x:,.2f} s"
    return v.n(x)


def fmt_delta(m: MetricChange) -> str:
    d = m.delta
    if d is None:
        return "-"
    if m.unit == "rate":
        return f"{100 * d:+.1f} pp"
    if m.unit == "seconds":
        return f"{d * 1000:+,.0f} ms" if abs(d) < 1 else f"{d:+,.2f} s"
    return f"{d:+,.0f}" if float(d).is_integer() else f"{d:+,.2f}"


def metric_rows(d: RecordDiff) -> list[list[str]]:
    return [[m.metric, fmt_value(m.before, m.unit), fmt_value(m.after, m.unit), fmt_delta(m)] for m in d.metrics]


def breaker_rows(d: RecordDiff) -> list[list[str]]:
    return [
        [
            b.status,
            b.kind,
            b.pattern,
            b.where,
            "-" if b.cost_before is None else "≈" + v.n(b.cost_before),
            "-" if b.cost_after is None else "≈" + v.n(b.cost_after),
            b.context,
        ]
        for b in d.breakers
    ]


def prefix_rows(d: RecordDiff, top: int | None = TOP) -> list[list[str]]:
    rows = []
    for p in d.prefixes[: top or None]:
        ranks = f"{v.n(p.rank_before)} → {v.n(p.rank_after)}"
        rows.append(
            [
                p.status,
                ranks,
                p.label,
                v.n(p.length),
                f"{v.n(p.hits_before)} → {v.n(p.hits_after)}",
                f"{v.n(p.reusable_before)} → {v.n(p.reusable_after)}",
                f"{p.reusable_delta:+,}",
                p.preview if p.preview is not None else "(withheld)",
            ]
        )
    return rows


METRIC_HEAD = ["metric", "before", "after", "change"]
BREAKER_HEAD = ["status", "kind", "pattern", "where", "cost before", "cost after", "context"]
PREFIX_HEAD = ["status", "rank", "kind", "tokens", "hits", "reusable", "change", "preview"]


def render_diff_markdown(d: RecordDiff, *, top: int | None = TOP, title: str | None = None, level: int = 2) -> str:
    """The comparison as GitHub Markdown (a PR comment, or a section of ``report --baseline``)."""
    from prefixplan.report.markdown import md_escape, md_table

    h = "#" * level
    out = [f"{h} {md_escape(title or 'prefixplan diff')}", "", f"Before: {md_escape(d.before)}  "]
    out += [f"After: {md_escape(d.after)}", ""]
    out += [f"{h}# What changed", ""] + md_table(METRIC_HEAD, metric_rows(d), right={1, 2, 3}) + [""]
    out += [f"{h}# Cache breakers", ""]
    if d.breakers:
        out += md_table(BREAKER_HEAD, breaker_rows(d), right={4, 5}) + [""]
    else:
        out += ["None in either analysis.", ""]
    shown = d.prefixes[: top or None]
    out += [f"{h}# Shared prefixes ({len(shown)} of {len(d.prefixes)} changes, largest first)", ""]
    if shown:
        out += md_table(PREFIX_HEAD, prefix_rows(d, top), right={1, 3, 4, 5, 6}) + [""]
    else:
        out += ["No change.", ""]
    out += [md_escape(n) for n in d.notes] + ([""] if d.notes else [])
    return "\n".join(out) + "\n"


def render_diff_html(d: RecordDiff, *, top: int | None = TOP) -> str:
    """The comparison as an HTML section (``report --baseline``)."""
    from prefixplan.report.html_sections import table, td
    from prefixplan.report.svg import esc, num_attr

    def rows(data: Sequence[Sequence[str]], right: set[int], attrs: Sequence[str] = ()) -> list[str]:
        return [
            f"<tr{attrs[i] if attrs else ''}>"
            + "".join(td(c, "r" if j in right else "") for j, c in enumerate(r))
            + "</tr>"
            for i, r in enumerate(data)
        ]

    m_attrs = [
        f' data-metric="{esc(m.metric)}"'
        + (f' data-before="{esc(num_attr(m.before))}"' if m.before is not None else "")
        + (f' data-after="{esc(num_attr(m.after))}"' if m.after is not None else "")
        for m in d.metrics
    ]
    b_attrs = [f' data-status="{esc(b.status)}" data-kind="{esc(b.kind)}"' for b in d.breakers]
    body = (
        f'<section id="diff"><h2>Compared with the baseline</h2><p class="note">Before: {esc(d.before)}<br>'
        f"After: {esc(d.after)}</p>"
        + table("data", METRIC_HEAD, rows(metric_rows(d), {1, 2, 3}, m_attrs))
        + "<h3>Cache breakers</h3>"
        + (table("data", BREAKER_HEAD, rows(breaker_rows(d), {4, 5}, b_attrs)) if d.breakers else "<p>None.</p>")
        + "<h3>Shared prefixes</h3>"
        + (
            table("data", PREFIX_HEAD, rows(prefix_rows(d, top), {1, 3, 4, 5, 6}))
            if d.prefixes
            else "<p>No change.</p>"
        )
        + "".join(f'<p class="note">{esc(n)}</p>' for n in d.notes)
        + "</section>"
    )
    return body
