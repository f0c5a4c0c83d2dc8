"""``prefixplan check``: the CI gate over recipes, lock file and (optionally) a base ref."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from prefixplan.cli import options as o
from prefixplan.cli.help import PlainCommand


def register(app: typer.Typer) -> None:
    app.command("check", cls=PlainCommand)(check)


def _write_json(target: str, data: object) -> None:
    from prefixplan.core.fileio import atomic_write_text

    atomic_write_text(target, json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def check(
    recipes: o.Recipes = Path("recipes"),
    lock: o.LockFile = Path("prefixplan.lock"),
    base: Annotated[
        str | None, typer.Option("--base", metavar="REF", help="Git ref to compare the lock with (e.g. origin/main).")
    ] = None,
    fail_on: Annotated[
        str, typer.Option("--fail-on", metavar="LEVEL", help="Fail on 'error' (default) or also on lint 'warning'.")
    ] = "error",
    fmt: Annotated[
        str,
        typer.Option(
            "--output-format", metavar="FORMAT", help="Console output: human, github (workflow annotations) or json."
        ),
    ] = "human",
    json_out: o.Json = None,
    no_lint: Annotated[bool, typer.Option("--no-lint", metavar="", help="Skip the cache-breaker lint.")] = False,
) -> None:
    """Fail when recipe content changed under an unchanged name@vN, or a bump is not locked.

    Exit codes: 0 clean; 1 content changed / lock hand-edited / lint at --fail-on level;
    2 malformed recipe or lock; 3 version bumped but `prefixplan lock` not run.
    """
    from prefixplan.errors import UsageError
    from prefixplan.gate.annotations import github_annotations
    from prefixplan.gate.check import run_check

    if fmt not in ("human", "github", "json"):
        raise UsageError(f"--output-format must be human, github or json, got {fmt!r}")
    result = run_check(recipes, lock, base_ref=base, fail_on=fail_on, lint=not no_lint)
    if json_out is not None:
        _write_json(json_out, result.to_dict())
    if fmt == "json" and json_out != "-":
        _write_json("-", result.to_dict())
    elif fmt == "github":
        for line in github_annotations(result):
            typer.echo(line)
    elif fmt == "human" and json_out != "-":
        from prefixplan.report.console_gate import render_check

        render_check(result)
    raise typer.Exit(result.exit_code)
