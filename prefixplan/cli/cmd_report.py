"""``prefixplan report ANALYSIS.json`` — HTML and Markdown reports from an analysis record."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer


def register(app: typer.Typer) -> None:
    @app.command(no_args_is_help=True)
    def report(
        analysis: Annotated[
            str,
            typer.Argument(help="Analysis record from prefixplan analyze --json (or - for stdin).", show_default=False),
        ],
        html: Annotated[
            Optional[str], typer.Option("--html", help="Write a self-contained HTML report to FILE (- = stdout).")
        ] = None,
        markdown: Annotated[
            Optional[str],
            typer.Option(
                "--markdown", help="Write a GitHub Markdown report to FILE (- = stdout). Default when no --html."
            ),
        ] = None,
        check: Annotated[
            Optional[Path], typer.Option("--check", help="Add the findings of prefixplan check --json FILE.")
        ] = None,
        top: Annotated[
            Optional[int],
            typer.Option("--top", help="Prefixes to list (default: all in the record for HTML, 10 for Markdown)."),
        ] = None,
        title: Annotated[Optional[str], typer.Option("--title", help="Report title.")] = None,
    ) -> None:
        """Render an analysis record as a self-contained HTML page (plots, no network) and/or Markdown for PR comments."""
        from prefixplan.report.files import load_report_input, write_reports

        if html is None and markdown is None:
            markdown = "-"
        written = write_reports(
            load_report_input(analysis, check=check), html=html, markdown=markdown, top=top, title=title
        )
        for fmt, path in written.files:
            if path != "-":
                typer.echo(f"wrote {fmt} report: {path}", err=html == "-" or markdown == "-")
