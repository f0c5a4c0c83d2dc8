"""Console output of ``prefixplan check``: findings with their place, diff and fix."""

from __future__ import annotations

from typing import Any

from rich.console import Console


def render_check(result: Any) -> None:
    from rich.markup import escape

    con = Console(highlight=False, soft_wrap=True)
    style = {"error": "bold red", "warning": "yellow", "notice": "cyan"}
    findings = result.findings
    for f in findings:
        where = f"{f.file}:{f.line}" if f.file and f.line else (f.file or "")
        con.print(f"[{style.get(f.severity, '')}]{f.severity}[/] [bold]{f.code}[/] {escape(where)}")
        con.print(f"  {escape(f.message)}")
        for d in f.diff:
            color = (
                "green"
                if d.startswith("+") and not d.startswith("+++")
                else ("red" if d.startswith("-") and not d.startswith("---") else "dim")
            )
            con.print(f"    [{color}]{escape(d)}[/]")
    counts = {s: sum(1 for f in findings if f.severity == s) for s in ("error", "warning", "notice")}
    keys = len(result.keys)
    verdict = "[green]ok[/]" if result.ok else f"[red]failed (exit {result.exit_code})[/]"
    con.print(
        f"check: {keys} keys, {counts['error']} errors, {counts['warning']} warnings, "
        f"{counts['notice']} notices: {verdict}"
    )
