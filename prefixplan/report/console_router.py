"""Console output of routing: ``simulate --replicas N --router ...`` fleet runs, side by side."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import Console


def render_fleet(runs: Sequence[dict[str, Any]], console: Console) -> None:
    """One row per routing policy: fleet hit rate, cached tokens, requests per replica, decisions."""
    from rich.table import Table

    if not runs:
        return
    n = runs[0]["replicas"]
    table = Table(title=f"Fleet of {n} replicas (each its own cache)", title_justify="left")
    for col in ("router", "fleet hit rate", "cached tokens", "prompt tokens", "requests per replica", "decisions"):
        table.add_column(col, justify="left" if col in ("router", "decisions") else "right")
    for run in runs:
        per = " / ".join(str(p["requests"]) for p in run["per_replica"])
        decisions = ", ".join(f"{k} {v}" for k, v in sorted(run["decisions"].items()))
        table.add_row(
            run["policy"],
            f"{100 * run['hit_rate']:.1f}%",
            f"{run['cached_tokens']:,}",
            f"{run['prompt_tokens']:,}",
            per,
            decisions,
        )
    console.print(table)


def render_key_stats(rows: Sequence[dict[str, Any]], console: Console) -> None:
    """Per (key, replica): requests, tokens, hit rate, mean TTFT and warm status."""
    from rich.markup import escape
    from rich.table import Table

    table = Table(title="gateway keys (from the store)", title_justify="left")
    for col in (
        "key",
        "replica",
        "requests",
        "errors",
        "prompt tokens",
        "cached tokens",
        "hit rate",
        "mean TTFT",
        "warm",
        "resident (KV events)",
        "last verified",
        "evictions",
        "re-warms",
    ):
        left = col in ("key", "replica", "warm", "resident (KV events)", "last verified")
        table.add_column(col, justify="left" if left else "right")
    for r in rows:
        rate = r.get("hit_rate")
        ttft = r.get("mean_ttft_s")
        warm = r.get("warm") or "-"
        if r.get("fleet"):
            warm += f" (fleet: {r['fleet']})"
        table.add_row(
            escape(r["key"]),
            escape(r["replica"]),
            f"{r['requests']:,}",
            f"{r['errors']:,}",
            f"{r['prompt_tokens']:,}",
            f"{r['cached_tokens']:,}",
            f"{100 * rate:.1f}%" if rate is not None else "-",
            f"{1000 * ttft:.1f} ms" if ttft is not None else "-",
            warm,
            *_residency_cells(r.get("residency")),
        )
    if not rows:
        console.print("no gateway statistics in the store yet (prefixplan gateway writes them)")
        return
    console.print(table)


def _residency_cells(res: dict[str, Any] | None) -> tuple[str, str, str, str]:
    """Resident state and blocks, last verified (UTC), evictions, re-warms; dashes without events."""
    if not res:
        return ("-", "-", "-", "-")
    import time

    when = res.get("last_verified")
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(float(when))) if when else "never"
    held = f"{res.get('state')} {res.get('resident_blocks')}/{res.get('blocks')} blocks"
    return (held, stamp, str(res.get("evictions", 0)), str(res.get("rewarms", 0)))
