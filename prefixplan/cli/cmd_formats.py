"""``prefixplan formats`` -- every input format, how it is detected and what it needs."""

from __future__ import annotations

import typer

from prefixplan.cli import options as o
from prefixplan.cli.help import PlainCommand


def register(app: typer.Typer) -> None:
    app.command("formats", cls=PlainCommand)(formats)


def formats(json_out: o.Json = None) -> None:
    """List the log formats prefixplan reads: how each is detected, what it needs, where token ids come from."""
    from prefixplan.api import FormatsRequest, run_formats

    table = run_formats(FormatsRequest())
    if json_out is not None:
        from prefixplan.cli.output import write_json

        write_json(json_out, {"formats": [f.to_json() for f in table]}, ensure_ascii=True)
        if json_out == "-":
            return
    from prefixplan.report.console_formats import render_formats
    from prefixplan.report.terminal import report_console

    render_formats(table, report_console())
