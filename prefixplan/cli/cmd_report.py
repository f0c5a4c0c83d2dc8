"""``prefixplan report ANALYSIS.json`` — HTML and Markdown reports from an analysis record."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from prefixplan.cli import options as o
from prefixplan.cli.help import PlainCommand

AnalysisRecord = Annotated[
    str,
    typer.Argument(
        metavar="ANALYSIS",
        help="Analysis record from prefixplan analyze --json (or - for stdin).",
        show_default=False,
    ),
]
Check = Annotated[
    Optional[Path],
    typer.Option("--check", metavar="FILE", help="Add the findings of prefixplan check --json FILE."),
]
Title = Annotated[Optional[str], typer.Option("--title", metavar="TEXT", help="Report title.")]


def register(app: typer.Typer) -> None:
    app.command("report", cls=PlainCommand)(report)


def report(
    analysis: AnalysisRecord,
    html: o.Html = None,
    markdown: o.Markdown = None,
    check: Check = None,
    baseline: o.Baseline = None,
    model: o.Model = None,
    model_config: o.ModelConfig = None,
    top: o.Top = None,
    title: Title = None,
) -> None:
    """Render an analysis record as a self-contained HTML page (next steps, plots, no network) and/or
    Markdown for PR comments; --baseline adds what changed since an earlier record."""
    from prefixplan.api import ReportRequest, run_report

    if html is None and markdown is None:
        markdown = "-"
    request = ReportRequest(
        analysis,
        html=html,
        markdown=markdown,
        check=str(check) if check is not None else None,
        baseline=str(baseline) if baseline is not None else None,
        model=model,
        model_config=str(model_config) if model_config else None,
        top=top,
        title=title,
    )
    written = run_report(request)
    for fmt, path in written.files:
        if path != "-":
            typer.echo(f"wrote {fmt} report: {path}", err=html == "-" or markdown == "-")
