"""``prefixplan diff BEFORE.json AFTER.json`` — what changed between two analysis records."""

from __future__ import annotations

from typing import Annotated

import typer

from prefixplan.cli import options as o
from prefixplan.cli.help import PlainCommand

Before = Annotated[
    str,
    typer.Argument(
        metavar="BEFORE", help="The earlier analysis record (prefixplan analyze --json).", show_default=False
    ),
]
After = Annotated[
    str,
    typer.Argument(metavar="AFTER", help="The later analysis record (prefixplan analyze --json).", show_default=False),
]


def register(app: typer.Typer) -> None:
    app.command("diff", cls=PlainCommand)(diff)


def diff(before: Before, after: After, markdown: o.Markdown = None, json_out: o.Json = None, top: o.Top = None) -> None:
    """Compare two analyses (two logs, or two prompt versions): hit rates, reusable tokens, cache breakers
    fixed or new, shared prefixes gained or lost. --markdown writes a PR comment."""
    from prefixplan.api import DiffRequest, run_diff
    from prefixplan.cli.output import write_json
    from prefixplan.core.fileio import atomic_write_text
    from prefixplan.report.diff import TOP, render_diff_markdown
    from prefixplan.report.terminal import report_console

    if markdown == "-" and json_out == "-":
        from prefixplan.errors import UsageError

        raise UsageError("--markdown - and --json - cannot both write to stdout")
    result = run_diff(DiffRequest(before, after))
    shown = TOP if top is None else top
    if json_out is not None:
        write_json(json_out, result.to_json(), ensure_ascii=True, allow_nan=False)
    if markdown is not None:
        atomic_write_text(markdown, render_diff_markdown(result, top=shown))
    if "-" not in (markdown, json_out):
        from prefixplan.report.console_diff import render_diff

        render_diff(result, report_console(), top=shown)
