"""``prefixplan keys list|show|history|expire|gc``: the versioned keys in the store."""

from __future__ import annotations

import json
import time
from typing import Annotated

import typer

from prefixplan.cli import options as o
from prefixplan.cli.help import PlainCommand, PlainGroup

DbOpt = o.Db
JsonOpt = o.Json


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


def _emit_json(target: str, data: object) -> None:
    from prefixplan.core.fileio import atomic_write_text

    atomic_write_text(target, json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def list_cmd(
    status: Annotated[
        str | None, typer.Option("--status", metavar="STATUS", help="active, superseded or expired.")
    ] = None,
    db: DbOpt = None,
    json_out: JsonOpt = None,
) -> None:
    """List all versions (optionally of one status)."""
    from prefixplan.store import open_store

    with open_store(str(db) if db else None, create=False) as store:
        records = store.list_keys(status)
    if json_out is not None:
        _emit_json(json_out, [r.to_dict() for r in records])
        if json_out == "-":
            return
    from prefixplan.report.console_fleet import render_versions

    render_versions(records, "keys" + (f" ({status})" if status else ""))


def show_cmd(
    key: Annotated[str, typer.Argument(metavar="KEY", help="name@vN, or a name for its active version.")],
    db: DbOpt = None,
    json_out: JsonOpt = None,
) -> None:
    """Show one version with all its fields."""
    from prefixplan.errors import UsageError
    from prefixplan.keys import parse_key_ref
    from prefixplan.store import open_store

    name, version = parse_key_ref(key)
    with open_store(str(db) if db else None, create=False) as store:
        rec = store.get(name, version)
    if rec is None:
        raise UsageError(f"no such key {key!r} in the store", hint="see `prefixplan keys list`")
    if json_out is not None:
        _emit_json(json_out, rec.to_dict())
        if json_out == "-":
            return
    from prefixplan.report.terminal import report_console

    con = report_console()
    for k, v in rec.to_dict().items():
        con.print(f"[bold]{k}[/]: {v}")


def history_cmd(
    name: Annotated[str, typer.Argument(metavar="NAME", help="Prefix name (without @vN).")],
    db: DbOpt = None,
    json_out: JsonOpt = None,
) -> None:
    """All versions of one name, oldest first."""
    from prefixplan.errors import UsageError
    from prefixplan.keys import parse_key_ref
    from prefixplan.store import open_store

    key_name = parse_key_ref(name)[0]  # a malformed name is a usage error, store or not
    with open_store(str(db) if db else None, create=False) as store:
        records = store.versions(key_name)
    if not records:
        raise UsageError(f"no versions of {name!r} in the store", hint="see `prefixplan keys list`")
    if json_out is not None:
        _emit_json(json_out, [r.to_dict() for r in records])
        if json_out == "-":
            return
    from prefixplan.report.console_fleet import render_versions

    render_versions(records, f"history of {name}")


def expire_cmd(
    now: Annotated[
        float | None, typer.Option("--now", metavar="EPOCH", help="Pretend the time is this epoch second.")
    ] = None,
    db: DbOpt = None,
    json_out: JsonOpt = None,
) -> None:
    """Mark superseded versions past their retention as expired."""
    from prefixplan.store import open_store

    with open_store(str(db) if db else None, create=False) as store:
        records = store.expire(now if now is not None else time.time())
    if json_out is not None:
        _emit_json(json_out, [r.to_dict() for r in records])
        if json_out == "-":
            return
    typer.echo(
        f"expired {len(records)} version(s)" + (": " + ", ".join(str(r.key) for r in records) if records else "")
    )


def gc_cmd(
    yes: Annotated[bool, typer.Option("--yes", metavar="", help="Really delete (default: dry run).")] = False,
    db: DbOpt = None,
    json_out: JsonOpt = None,
) -> None:
    """Delete expired versions (dry run unless --yes)."""
    from prefixplan.store import open_store

    with open_store(str(db) if db else None, create=False) as store:
        records = store.gc(dry_run=not yes)
    if json_out is not None:
        _emit_json(json_out, {"deleted": yes, "keys": [str(r.key) for r in records]})
        if json_out == "-":
            return
    verb = "deleted" if yes else "would delete (dry run; pass --yes)"
    typer.echo(
        f"{verb} {len(records)} expired version(s)" + (": " + ", ".join(str(r.key) for r in records) if records else "")
    )
