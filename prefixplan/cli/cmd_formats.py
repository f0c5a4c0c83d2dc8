"""``prefixplan formats`` -- every input format, how it is detected and what it needs."""

from __future__ import annotations

import json

import typer

from prefixplan.cli import options as o
from prefixplan.cli.help import PlainCommand


def register(app: typer.Typer) -> None:
    app.command("formats", cls=PlainCommand)(formats)


def formats(json_out: o.Json = None) -> None:
    """List the log formats prefixplan reads: how each is detected, what it needs, where token ids come from."""
    from prefixplan.logs.detect import formats_table

    table = formats_table()
    if json_out is not None:
        from prefixplan.core.fileio import atomic_write_text

        atomic_write_text(json_out, json.dumps({"formats": [f.to_json() for f in table]}, indent=2) + "\n")
        if json_out == "-":
            return
    from prefixplan.report.console_formats import render_formats
    from prefixplan.report.terminal import report_console

    render_formats(table, report_console())
