"""The hit-loss waterfall (``waterfall`` of simulate's JSON and of the analysis record's
``simulation`` section) as rows every report prints: console, Markdown and HTML."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rich.console import Console

SHORT = {
    "unique": "not shared (no earlier request has the prefix)",
    "breakers": "cache breakers, unstable serialization (fix estimate)",
    "block": "block granularity (prefixes, tails < 1 block)",
    "capacity": "capacity",
    "ttl": "TTL / idle eviction",
    "replicas": "spreading over replicas",
}

UNIQUE_IN_BLOCKS = "not shared in whole blocks (token level not computed)"


@dataclass(frozen=True, slots=True)
class Bar:
    """One line: ``sign`` is ``""`` (a total), ``-`` (a loss) or ``=`` (what is left)."""

    sign: str
    label: str
    tokens: int | None
    share: float | None
    source: str


def _options(doc: Mapping[str, Any], name: str) -> str:
    return next((r["options"] for r in doc["runs"] if r["name"] == name), name)


def _source(doc: Mapping[str, Any], step: Mapping[str, Any]) -> str:
    if not step["asked"]:
        return "not asked" if step["name"] != "breakers" else "not estimated (needs analyze's findings)"
    a, b = step["difference_of"]
    if step["name"] == "breakers":
        return "analyze's breaker findings"
    if a == "prompt":
        return f"prompt - hits of `{_options(doc, b)}`"
    first, second = _options(doc, a), _options(doc, b)
    if second.startswith(first + " "):
        return f"hits without - with `{second[len(first) + 1 :]}`"
    return f"`{first}` - `{second}`"


def waterfall_bars(doc: Mapping[str, Any]) -> list[Bar]:
    """The waterfall as lines, from the prompt tokens to the prediction (and the achieved hits)."""
    total = doc["prompt_tokens"]

    def share(tokens: int | None) -> float | None:
        return tokens / total if tokens is not None and total else None

    steps = {s["name"]: s for s in doc["steps"]}
    bars = [Bar("", "prompt tokens", total, share(total), "the log")]
    token = next(r for r in doc["runs"] if r["name"] == "token")
    for name in ("unique", "breakers"):
        label = SHORT[name] if name != "unique" or token["hit_tokens"] is not None else UNIQUE_IN_BLOCKS
        bars.append(Bar("-", label, steps[name]["tokens"], share(steps[name]["tokens"]), _source(doc, steps[name])))
    bound = doc.get("token_level_bound")
    if token["hit_tokens"] is None and bound:
        bars.append(
            Bar(
                "",
                "shared at token level: a bound (keys per block)",
                None,
                None,
                f"{bound['low']:,} to {bound['high']:,} tokens ({_pct(share(bound['low']))}-{_pct(share(bound['high']))})",
            )
        )
    if token["hit_tokens"] is not None:
        bars.append(
            Bar(
                "=",
                "shared at token level (exact)",
                token["hit_tokens"],
                share(token["hit_tokens"]),
                f"`{token['options']}`",
            )
        )
    for name in ("block", "capacity", "ttl", "replicas"):
        step = steps[name]
        if step["tokens"] is None:
            continue
        bars.append(Bar("-", SHORT[name], step["tokens"], share(step["tokens"]), _source(doc, step)))
    fleet = next(r for r in doc["runs"] if r["name"] == "fleet")
    bars.append(
        Bar(
            "=",
            "predicted hits (the model)",
            doc["predicted_tokens"],
            share(doc["predicted_tokens"]),
            f"`{fleet['options']}`",
        )
    )
    if doc.get("achieved_tokens") is not None:
        n = doc["achieved_requests"]
        where = doc.get("achieved_source") or (f"the log, {n:,} requests" if n is not None else "the log")
        bars.append(
            Bar(
                "",
                "achieved (what the engine reused)",
                doc["achieved_tokens"],
                share(doc["achieved_tokens"]),
                where,
            )
        )
        bars.append(
            Bar(
                "",
                "unexplained (predicted - achieved)",
                doc["unexplained_tokens"],
                share(doc["unexplained_tokens"]),
                "the difference",
            )
        )
    return bars


def _num(tokens: int | None) -> str:
    return "-" if tokens is None else f"{tokens:,}"


def _pct(share: float | None) -> str:
    return "" if share is None else f"{100 * share:.1f}%"


def render_waterfall(doc: Mapping[str, Any], console: Console) -> None:
    """The waterfall as a console table."""
    from rich.markup import escape
    from rich.table import Table

    table = Table(
        title="Where the hits go (tokens; each step is the difference of two simulate runs)", title_justify="left"
    )
    for col in ("", "tokens", "share", "difference of"):
        table.add_column(col, justify="right" if col in ("tokens", "share") else "left")
    for bar in waterfall_bars(doc):
        table.add_row(
            escape(f"{bar.sign} {bar.label}".strip()),
            _num(bar.tokens),
            _pct(bar.share),
            escape(bar.source.replace("`", "")),
        )
    console.print(table)
    for note in doc.get("notes") or ():
        console.print(f"[dim]note: {escape(note)}[/]")


def waterfall_markdown(doc: Mapping[str, Any]) -> list[str]:
    """The waterfall as a Markdown table (lines)."""
    lines = [
        "| | tokens | share | difference of |",
        "|---|---:|---:|---|",
    ]
    for bar in waterfall_bars(doc):
        label = f"{bar.sign} {bar.label}".strip()
        lines.append(f"| {label} | {_num(bar.tokens)} | {_pct(bar.share)} | {bar.source} |")
    lines.extend(f"\n_{note}_" for note in doc.get("notes") or ())
    return lines


def waterfall_html(doc: Mapping[str, Any]) -> str:
    """The waterfall as an HTML table, each bar drawn to scale."""
    from html import escape

    rows = []
    for bar in waterfall_bars(doc):
        width = max(0.0, min(1.0, bar.share or 0.0)) * 100
        rows.append(
            f"<tr><td>{escape(f'{bar.sign} {bar.label}'.strip())}</td><td class='num'>{_num(bar.tokens)}</td>"
            f"<td class='num'>{_pct(bar.share)}</td>"
            f"<td><span style='display:inline-block;height:0.8em;width:{width:.1f}%;background:#4a7'></span></td>"
            f"<td>{escape(bar.source.replace('`', ''))}</td></tr>"
        )
    notes = "".join(f"<p class='note'>{escape(n)}</p>" for n in doc.get("notes") or ())
    return (
        "<table class='waterfall'><tr><th></th><th>tokens</th><th>share</th><th></th><th>difference of</th></tr>"
        + "".join(rows)
        + "</table>"
        + notes
    )
