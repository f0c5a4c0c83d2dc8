"""``prefixplan lock``: write prefixplan.lock from the recipes and register their versions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer


def register(app: typer.Typer) -> None:
    app.command("lock")(lock)


def lock(
    recipes: Annotated[Path, typer.Option("--recipes", help="Recipes folder (*.yaml) or file.")] = Path("recipes"),
    lock_path: Annotated[Path, typer.Option("--lock", help="Lock file to write.")] = Path("prefixplan.lock"),
    db: Annotated[
        str | None, typer.Option("--db", help="Store path (default $PREFIXPLAN_DB or ./prefixplan.db).")
    ] = None,
    no_store: Annotated[
        bool, typer.Option("--no-store", help="Only write the lock; do not register versions.")
    ] = False,
    json_out: Annotated[
        str | None, typer.Option("--json", help="Write the result as JSON to FILE ('-' = stdout).")
    ] = None,
) -> None:
    """Lock every recipe's content hash under its name@vN; refuse to change an existing one."""
    from prefixplan.api import lock as run_lock

    result = run_lock(recipes, lock_path, db=db, store=not no_store)
    if json_out is not None:
        from prefixplan.core.fileio import atomic_write_text

        atomic_write_text(json_out, json.dumps(result.to_dict(), indent=2) + "\n")
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
