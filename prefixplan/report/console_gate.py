"""Console output of ``prefixplan check``: findings with their place, diff and fix."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Console

if TYPE_CHECKING:
    from prefixplan.gate.findings import CheckResult


def _one_line(text: str) -> str:
    """Recipe text (a file name, a message quoting it) on one line: a newline in it would start
    a line of its own, where ``::`` is a GitHub workflow command and a fence closes a PR
    comment's code block."""
    return text.replace("\r\n", "⏎").replace("\r", "⏎").replace("\n", "⏎")


def render_check(result: Any) -> None:
    from rich.markup import escape

    con = Console(highlight=False, soft_wrap=True)
    style = {"error": "bold red", "warning": "yellow", "notice": "cyan"}
    findings = result.findings
    for f in findings:
        where = f"{f.file}:{f.line}" if f.file and f.line else (f.file or "")
        con.print(f"[{style.get(f.severity, '')}]{f.severity}[/] [bold]{f.code}[/] {escape(_one_line(where))}")
        con.print(f"  {escape(_one_line(f.message))}")
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


def github_lines(result: CheckResult) -> list[str]:
    """``check --output-format github``: one GitHub Actions workflow command per finding
    (:func:`prefixplan.gate.annotations.github_annotations`), for the command to print."""
    from prefixplan.gate.annotations import github_annotations

    return github_annotations(result)
