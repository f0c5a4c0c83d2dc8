"""Console output of ``prefixplan status`` (replica hit rates and verified keys) and ``prefixplan keys`` tables."""

from __future__ import annotations

from typing import Any

from rich.console import Console


def _pct(x: float | None) -> str:
    return f"{100 * x:.1f}%" if x is not None else "-"


def render_status(rows: list[Any]) -> None:
    from rich.markup import escape
    from rich.table import Table

    con = Console(highlight=False, soft_wrap=True)
    t = Table(title="prefix cache")
    for col in ("endpoint", "engine", "model", "block", "hit rate (since start)", "hit rate (window)", "verdict"):
        t.add_column(col)
    for r in rows:
        color = {"ok": "green", "below-target": "yellow", "unreachable": "red"}.get(r.verdict, "dim")
        t.add_row(
            escape(r.endpoint),
            r.engine or "-",
            escape(str(r.model or "-")),
            str(r.block_size or "-"),
            _pct(r.hit_rate),
            _pct(r.window_hit_rate) if r.window_s else "-",
            f"[{color}]{r.verdict}[/]",
        )
    con.print(t)
    for r in rows:
        if r.error:
            con.print(f"[red]{escape(r.endpoint)}[/]: {escape(r.error)}")
        for k in r.keys:
            con.print(
                f"  {escape(r.endpoint)} {escape(k.key)}: last verified {k.last_verified or 'never'} "
                f"(last run {k.last_run}: {k.last_status})"
            )


def render_versions(records: list[Any], title: str) -> None:
    from rich.table import Table

    from prefixplan.report.terminal import report_console

    t = Table(title=title)
    for col in (
        "key",
        "status",
        "kind",
        "content hash",
        "tokens",
        "created",
        "retain until",
        "pin",
        "source",
    ):
        t.add_column(col)
    for r in records:
        t.add_row(
            str(r.key),
            r.status,
            r.kind or "",
            r.content_hash[:23] + "…",
            "" if r.token_count is None else str(r.token_count),
            r.created,
            r.retain_until or "",
            "yes" if r.pinned else "",
            r.source or "",
        )
    report_console().print(t)
