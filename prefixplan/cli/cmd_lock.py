"""``prefixplan lock``: write prefixplan.lock from the recipes and register their versions."""

from __future__ import annotations

from pathlib import Path

import typer

from prefixplan.cli import options as o
from prefixplan.cli.help import PlainCommand


def register(app: typer.Typer) -> None:
    app.command("lock", cls=PlainCommand)(lock)


def lock(
    recipes: o.Recipes = Path("recipes"),
    lock_path: o.LockFile = Path("prefixplan.lock"),
    db: o.Db = None,
    store: o.Store = True,
    json_out: o.Json = None,
) -> None:
    """Lock every recipe's content hash under its name@vN; refuse to change an existing one."""
    from prefixplan.api import LockRequest, run_lock
    from prefixplan.cli.output import write_json

    result = run_lock(LockRequest(recipes, lock_path, db=str(db) if db else None, store=store))
    if json_out is not None:
        write_json(json_out, result.to_dict(), ensure_ascii=True)
        if json_out == "-":
            return
    from prefixplan.report.terminal import report_console

    con = report_console()
    state = "written" if result.written else "unchanged"
    con.print(f"{result.path}: {state}; {len(result.added) + len(result.unchanged)} keys")
    for k in result.added:
        con.print(f"  [green]+ {k}[/]")
    for k in result.removed:
        con.print(f"  [red]- {k}[/]")
    if result.registered:
        con.print(f"registered in the store: {', '.join(result.registered)}")
