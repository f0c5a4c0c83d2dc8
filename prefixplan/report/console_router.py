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
