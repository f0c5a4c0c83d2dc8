"""``prefixplan check``: the CI gate over recipes, lock file and (optionally) a base ref."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from prefixplan.cli import options as o
from prefixplan.cli.help import PlainCommand

Base = Annotated[
    str | None, typer.Option("--base", metavar="REF", help="Git ref to compare the lock with (e.g. origin/main).")
]
FailOn = Annotated[
    str, typer.Option("--fail-on", metavar="LEVEL", help="Fail on 'error' (default) or also on lint 'warning'.")
]
OutputFormat = Annotated[
    str,
    typer.Option(
        "--output-format", metavar="FORMAT", help="Console output: human, github (workflow annotations) or json."
    ),
]
NoLint = Annotated[bool, typer.Option("--no-lint", metavar="", help="Skip the cache-breaker lint.")]


def register(app: typer.Typer) -> None:
    app.command("check", cls=PlainCommand)(check)


def check(
    recipes: o.Recipes = Path("recipes"),
    lock: o.LockFile = Path("prefixplan.lock"),
    base: Base = None,
    fail_on: FailOn = "error",
    fmt: OutputFormat = "human",
    json_out: o.Json = None,
    no_lint: NoLint = False,
) -> None:
    """Fail when recipe content changed under an unchanged name@vN, or a bump is not locked.

    Exit codes: 0 clean; 1 content changed / lock hand-edited / lint at --fail-on level;
    2 malformed recipe or lock; 3 version bumped but `prefixplan lock` not run.
    """
    from prefixplan.api import CheckRequest, run_check
    from prefixplan.cli.output import write_json
    from prefixplan.errors import UsageError

    if fmt not in ("human", "github", "json"):
        raise UsageError(f"--output-format must be human, github or json, got {fmt!r}")
    result = run_check(CheckRequest(recipes, lock, base_ref=base, fail_on=fail_on, lint=not no_lint))
    if json_out is not None:
        write_json(json_out, result.to_dict())
    if fmt == "json" and json_out != "-":
        write_json("-", result.to_dict())
    elif fmt == "github":
        from prefixplan.report.console_gate import github_lines

        for line in github_lines(result):
            typer.echo(line)
    elif fmt == "human" and json_out != "-":
        from prefixplan.report.console_gate import render_check

        render_check(result)
    raise typer.Exit(result.exit_code)
