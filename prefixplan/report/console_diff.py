"""Console output of ``prefixplan diff``: what changed between two analysis records."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from prefixplan.report.diff import (
    BREAKER_HEAD,
    METRIC_HEAD,
    PREFIX_HEAD,
    TOP,
    RecordDiff,
    breaker_rows,
    metric_rows,
    prefix_rows,
)


def _table(title: str, head: Sequence[str], rows: Sequence[Sequence[str]], right: set[int]) -> Table:
    t = Table(title=title, title_justify="left")
    for i, h in enumerate(head):
        if h in ("context", "preview"):
            t.add_column(h, no_wrap=True, overflow="ellipsis", max_width=60)
        else:
            t.add_column(h, justify="right" if i in right else "left", no_wrap=True)
    for r in rows:
        t.add_row(*(escape(str(c)) for c in r))
    return t


def render_diff(d: RecordDiff, console: Console, *, top: int | None = TOP) -> None:
    """Metrics, breakers (fixed / new / changed) and the largest prefix changes."""
    console.print(f"[bold]prefixplan diff[/]\nbefore: {escape(d.before)}\nafter:  {escape(d.after)}")
    console.print(_table("What changed", METRIC_HEAD, metric_rows(d), {1, 2, 3}))
    if d.breakers:
        console.print(_table("Cache breakers", BREAKER_HEAD, breaker_rows(d), {4, 5}))
    else:
        console.print("Cache breakers: none in either analysis")
    if d.prefixes:
        shown = min(len(d.prefixes), top or len(d.prefixes))
        title = f"Shared prefixes ({shown} of {len(d.prefixes)} changes, largest first)"
        console.print(_table(title, PREFIX_HEAD, prefix_rows(d, top), {1, 3, 4, 5, 6}))
    for note in d.notes:
        console.print(f"[yellow]note:[/] {escape(note)}")
