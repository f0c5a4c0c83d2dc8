"""``prefixplan keys list|show|history|expire|gc``: the versioned keys in the store."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from prefixplan.cli import options as o
from prefixplan.cli.help import PlainCommand, PlainGroup

DbOpt = o.Db
JsonOpt = o.Json
Status = Annotated[str | None, typer.Option("--status", metavar="STATUS", help="active, superseded or expired.")]
Key = Annotated[str, typer.Argument(metavar="KEY", help="name@vN, or a name for its active version.")]
Name = Annotated[str, typer.Argument(metavar="NAME", help="Prefix name (without @vN).")]
Now = Annotated[float | None, typer.Option("--now", metavar="EPOCH", help="Pretend the time is this epoch second.")]
Yes = Annotated[bool, typer.Option("--yes", metavar="", help="Really delete (default: dry run).")]


def register(app: typer.Typer) -> None:
    keys = typer.Typer(
        help="List, inspect, expire and collect versioned cache keys.", no_args_is_help=True, cls=PlainGroup
    )
    keys.command("list", cls=PlainCommand)(list_cmd)
    keys.command("show", cls=PlainCommand)(show_cmd)
    keys.command("history", cls=PlainCommand)(history_cmd)
    keys.command("expire", cls=PlainCommand)(expire_cmd)
    keys.command("gc", cls=PlainCommand)(gc_cmd)
    app.add_typer(keys, name="keys")


def _db(db: Path | None) -> str | None:
    return str(db) if db else None


def list_cmd(status: Status = None, db: DbOpt = None, json_out: JsonOpt = None) -> None:
    """List all versions (optionally of one status)."""
    from prefixplan.api import KeysListRequest, run_keys_list
    from prefixplan.cli.output import write_json

    records = run_keys_list(KeysListRequest(status, _db(db)))
    if json_out is not None:
        write_json(json_out, [r.to_dict() for r in records])
        if json_out == "-":
            return
    from prefixplan.report.console_fleet import render_versions

    render_versions(records, "keys" + (f" ({status})" if status else ""))


def show_cmd(key: Key, db: DbOpt = None, json_out: JsonOpt = None) -> None:
    """Show one version with all its fields."""
    from prefixplan.api import KeysShowRequest, run_keys_show
    from prefixplan.cli.output import write_json

    rec = run_keys_show(KeysShowRequest(key, _db(db)))
    if json_out is not None:
        write_json(json_out, rec.to_dict())
        if json_out == "-":
            return
    from prefixplan.report.terminal import report_console

    con = report_console()
    for k, v in rec.to_dict().items():
        con.print(f"[bold]{k}[/]: {v}")


def history_cmd(name: Name, db: DbOpt = None, json_out: JsonOpt = None) -> None:
    """All versions of one name, oldest first."""
    from prefixplan.api import KeysHistoryRequest, run_keys_history
    from prefixplan.cli.output import write_json

    records = run_keys_history(KeysHistoryRequest(name, _db(db)))
    if json_out is not None:
        write_json(json_out, [r.to_dict() for r in records])
        if json_out == "-":
            return
    from prefixplan.report.console_fleet import render_versions

    render_versions(records, f"history of {name}")


def expire_cmd(now: Now = None, db: DbOpt = None, json_out: JsonOpt = None) -> None:
    """Mark superseded versions past their retention as expired."""
    from prefixplan.api import KeysExpireRequest, run_keys_expire
    from prefixplan.cli.output import write_json

    records = run_keys_expire(KeysExpireRequest(now, _db(db)))
    if json_out is not None:
        write_json(json_out, [r.to_dict() for r in records])
        if json_out == "-":
            return
    typer.echo(
        f"expired {len(records)} version(s)" + (": " + ", ".join(str(r.key) for r in records) if records else "")
    )


def gc_cmd(yes: Yes = False, db: DbOpt = None, json_out: JsonOpt = None) -> None:
    """Delete expired versions (dry run unless --yes)."""
    from prefixplan.api import KeysGcRequest, run_keys_gc
    from prefixplan.cli.output import write_json

    records = run_keys_gc(KeysGcRequest(delete=yes, db=_db(db)))
    if json_out is not None:
        write_json(json_out, {"deleted": yes, "keys": [str(r.key) for r in records]})
        if json_out == "-":
            return
    verb = "deleted" if yes else "would delete (dry run; pass --yes)"
    typer.echo(
        f"{verb} {len(records)} expired version(s)" + (": " + ", ".join(str(r.key) for r in records) if records else "")
    )
