"""``prefixplan report ANALYSIS.json`` — HTML and Markdown reports from an analysis record."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from prefixplan.cli import options as o
from prefixplan.cli.help import PlainCommand


def register(app: typer.Typer) -> None:
    @app.command(cls=PlainCommand)
    def report(
        analysis: Annotated[
            str,
            typer.Argument(
                metavar="ANALYSIS",
                help="Analysis record from prefixplan analyze --json (or - for stdin).",
                show_default=False,
            ),
        ],
        html: o.Html = None,
        markdown: o.Markdown = None,
        check: Annotated[
            Optional[Path],
            typer.Option("--check", metavar="FILE", help="Add the findings of prefixplan check --json FILE."),
        ] = None,
        baseline: o.Baseline = None,
        model: o.Model = None,
        model_config: o.ModelConfig = None,
        top: o.Top = None,
        title: Annotated[Optional[str], typer.Option("--title", metavar="TEXT", help="Report title.")] = None,
    ) -> None:
        """Render an analysis record as a self-contained HTML page (next steps, plots, no network) and/or
        Markdown for PR comments; --baseline adds what changed since an earlier record."""
        from prefixplan.report.files import load_report_input, write_reports

        if html is None and markdown is None:
            markdown = "-"
        report_input = load_report_input(
            analysis,
            check=check,
            baseline=baseline,
            model=model,
            model_config=str(model_config) if model_config else None,
        )
        written = write_reports(report_input, html=html, markdown=markdown, top=top, title=title)
        for fmt, path in written.files:
            if path != "-":
                typer.echo(f"wrote {fmt} report: {path}", err=html == "-" or markdown == "-")
