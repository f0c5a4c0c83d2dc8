"""``prefixplan status``: prefix-cache hit rate per replica and which warmed keys were verified when."""

from __future__ import annotations

import json
from typing import Annotated, Optional

import typer

from prefixplan.cli import options as o
from prefixplan.cli.help import PlainCommand


def register(app: typer.Typer) -> None:
    app.command("status", cls=PlainCommand)(status)


def status(
    endpoint: o.Endpoint = None,
    endpoints_file: o.EndpointsFile = None,
    engine: o.Engine = "auto",
    api_key_env: o.ApiKeyEnv = None,
    window: Annotated[
        Optional[str],
        typer.Option("--window", metavar="DURATION", help="Also measure the hit rate over this interval (e.g. 30s)."),
    ] = None,
    target: Annotated[float, typer.Option("--target", metavar="RATE", help="Hit-rate target (0-1).")] = 0.7,
    timeout: o.Timeout = 10.0,
    json_out: o.Json = None,
    prometheus: o.Prometheus = None,
    key_stats: o.KeyStats = False,
    db: o.Db = None,
) -> None:
    """Per replica: engine, model, prefix-cache hit rate (since start and over --window), verdict, warmed keys.
    --prometheus writes them for node_exporter's textfile collector (docs/warm.md). --key-stats
    shows the per-key statistics prefixplan gateway wrote to the store (no endpoint needed).

    Exit codes: 0 every replica at or above target (or without traffic); 1 below target;
    4 a replica unreachable.
    """
    from prefixplan.errors import ExitCode, UsageError
    from prefixplan.warming.keepalive import parse_duration
    from prefixplan.warming.service import endpoints_for
    from prefixplan.warming.status import replica_status

    if not 0 <= target <= 1:
        raise UsageError("--target must be between 0 and 1")
    eps = endpoints_for(endpoint or [], str(endpoints_file) if endpoints_file else None, api_key_env)
    if key_stats:
        from prefixplan.gateway.stats import key_stats as read_key_stats

        keys = read_key_stats(str(db) if db else None)
        if json_out is not None and not eps:
            from prefixplan.core.fileio import atomic_write_text

            atomic_write_text(json_out, json.dumps({"keys": keys}, indent=2) + "\n")
        if json_out != "-":
            from prefixplan.report.console_router import render_key_stats
            from prefixplan.report.terminal import report_console

            render_key_stats(keys, report_console())
        if not eps:
            raise typer.Exit(ExitCode.OK)
    if not eps:
        raise UsageError("no endpoint given", hint="pass --endpoint URL or --endpoints FILE")
    rows = replica_status(
        eps,
        engine=engine,
        window_s=parse_duration(window) if window else 0.0,
        target=target,
        timeout=timeout,
        db=str(db) if db else None,
    )
    data = {"target": target, "replicas": [r.to_dict() for r in rows]}
    if json_out is not None:
        from prefixplan.core.fileio import atomic_write_text

        atomic_write_text(json_out, json.dumps(data, indent=2) + "\n")
    if prometheus is not None:
        from prefixplan.core.fileio import atomic_write_text
        from prefixplan.report.prometheus import render_prometheus

        atomic_write_text(prometheus, render_prometheus(rows, target))
    if "-" not in (json_out, prometheus):
        from prefixplan.report.console_fleet import render_status

        render_status(rows)
    if any(r.verdict == "unreachable" for r in rows):
        raise typer.Exit(ExitCode.ENDPOINT)
    if any(r.verdict == "below-target" for r in rows):
        raise typer.Exit(ExitCode.FINDINGS)
    raise typer.Exit(ExitCode.OK)
