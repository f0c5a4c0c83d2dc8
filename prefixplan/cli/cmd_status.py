"""``prefixplan status``: prefix-cache hit rate per replica and which warmed keys were verified when."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from prefixplan.cli import options as o
from prefixplan.cli.help import PlainCommand

Window = Annotated[
    Optional[str],
    typer.Option("--window", metavar="DURATION", help="Also measure the hit rate over this interval (e.g. 30s)."),
]
Target = Annotated[float, typer.Option("--target", metavar="RATE", help="Hit-rate target (0-1).")]


def register(app: typer.Typer) -> None:
    app.command("status", cls=PlainCommand)(status)


def status(
    endpoint: o.Endpoint = None,
    endpoints_file: o.EndpointsFile = None,
    engine: o.Engine = "auto",
    api_key_env: o.ApiKeyEnv = None,
    window: Window = None,
    target: Target = 0.7,
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
    from prefixplan.api import StatusRequest, run_status
    from prefixplan.cli.output import write_json
    from prefixplan.errors import ExitCode

    request = StatusRequest(
        endpoints=tuple(endpoint or ()),
        endpoints_file=str(endpoints_file) if endpoints_file else None,
        engine=engine,
        api_key_env=api_key_env,
        window=window,
        target=target,
        timeout=timeout,
        key_stats=key_stats,
        db=str(db) if db else None,
    )
    outcome = run_status(request)
    if outcome.keys is not None:
        if json_out is not None and outcome.replicas is None:
            write_json(json_out, {"keys": outcome.keys}, ensure_ascii=True)
        if json_out != "-":
            from prefixplan.report.console_router import render_key_stats
            from prefixplan.report.terminal import report_console

            render_key_stats(outcome.keys, report_console())
    if outcome.replicas is None:
        raise typer.Exit(ExitCode.OK)
    if json_out is not None:
        write_json(json_out, outcome.to_dict(), ensure_ascii=True)
    if prometheus is not None:
        from prefixplan.core.fileio import atomic_write_text
        from prefixplan.report.prometheus import render_prometheus

        atomic_write_text(prometheus, render_prometheus(outcome.replicas, target))
    if "-" not in (json_out, prometheus):
        from prefixplan.report.console_fleet import render_status

        render_status(outcome.replicas)
    raise typer.Exit(outcome.exit_code)
