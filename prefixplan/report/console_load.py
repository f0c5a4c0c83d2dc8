"""Console output of ``simulate --rate-scale``: TTFT under load per fleet size and router, a model."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.console import Console


def _ms(p: Mapping[str, float]) -> str:
    return " / ".join(f"{1000 * p[k]:,.0f}" for k in ("p50_s", "p95_s", "p99_s"))


def load_title(doc: Mapping[str, Any]) -> str:
    """What the table is and what it assumed, in one line."""
    rate = doc.get("requests_per_s")
    at = f"{doc['rate_scale']:g}x the log's arrival rate" + (f" ({rate:,.2f} requests/s)" if rate else "")
    return (
        f"TTFT under load, a model ({at}; chunked prefill {doc['max_num_batched_tokens']:,} tokens a step, "
        f"at most {doc['max_num_seqs']:,} running: {doc['engine_limits_from']}; profile {doc['profile']}, "
        f"{doc['profile_provenance']})"
    )


def render_load(doc: Mapping[str, Any], console: Console) -> None:
    """One row per fleet size and router: TTFT p50 / p95 / p99 without and with caching."""
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=escape(load_title(doc)), title_justify="left")
    for col in ("replicas", "router", "cache", "hit rate", "TTFT ms p50/p95/p99 without", "with caching"):
        table.add_column(col, justify="left" if col in ("router", "cache") else "right")
    for row in doc["rows"]:
        table.add_row(
            str(row["replicas"]),
            row["router"] or "-",
            escape(row["cache"]),
            f"{100 * row['hit_rate_tokens']:.1f}%",
            _ms(row["without"]),
            _ms(row["with"]),
        )
    console.print(table)
    missing = doc.get("requests_without_output_tokens") or 0
    if missing:
        console.print(
            f"[dim]note: {missing:,} requests have no output length in the log: "
            f"{doc['default_output_tokens']} output tokens assumed[/]"
        )
    for text in doc.get("assumptions") or ():
        console.print(f"[dim]assumes: {escape(text)}[/]")
