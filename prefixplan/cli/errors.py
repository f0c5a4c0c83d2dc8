"""The one place where library errors become messages and exit codes."""

from __future__ import annotations

import sys

import typer
from rich.console import Console

from prefixplan.errors import ExitCode, PrefixplanError


def error_console() -> Console:
    return Console(stderr=True, highlight=False, soft_wrap=True)


def report_error(err: PrefixplanError) -> int:
    con = error_console()
    con.print(f"[bold red]error:[/] {err}", markup=True, highlight=False)
    if err.hint:
        con.print(f"[dim]hint:[/] {err.hint}")
    return err.exit_code


def run_with_error_boundary(app: typer.Typer, argv: list[str]) -> int:
    """Run the typer app; known errors -> message + exit code, unknown -> traceback + exit 70."""
    try:
        # In non-standalone mode click *returns* the code of a `typer.Exit(code)`.
        rc = app(args=argv, prog_name="prefixplan", standalone_mode=False)
    except PrefixplanError as err:
        return report_error(err)
    except typer.Exit as exc:  # raised by commands to set an exit code
        return int(exc.exit_code or 0)
    except typer.Abort:
        error_console().print("aborted")
        return 130
    except KeyboardInterrupt:
        error_console().print("interrupted")
        return 130
    except Exception as exc:  # click usage errors arrive here in non-standalone mode
        from click.exceptions import ClickException  # typer's own dependency

        if isinstance(exc, ClickException):
            exc.show(file=sys.stderr)
            return ExitCode.USAGE
        # A bug: show the traceback (typer's hook when installed, locals never shown) and exit
        # INTERNAL, so a crash is never mistaken for exit 1 (findings) by a CI gate.
        sys.excepthook(type(exc), exc, exc.__traceback__)
        return ExitCode.INTERNAL
    return rc if isinstance(rc, int) and not isinstance(rc, bool) else ExitCode.OK
