"""The one place where errors become messages and exit codes.

Every failure the user can cause ends in exit 2 (usage), 3, 4 or 5 with two lines on stderr::

    error: <what is wrong, naming the option, file or field>
    hint: <what to do next>

Errors of the command line itself (unknown option or command, missing argument, bad value) come
from typer, which bundles its own copy of Click in recent versions and used the ``click``
package before: they are recognised by their ``exit_code`` and ``format_message`` (the interface
both share), never by importing ``click``. Anything else is a bug: its traceback is shown and the
exit code is 70, so a crash is never mistaken for exit 1 (findings) by a CI gate.
"""

from __future__ import annotations

import sys
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape

from prefixplan.errors import ExitCode, PrefixplanError


def error_console() -> Console:
    return Console(stderr=True, highlight=False, soft_wrap=True)


def report(message: str, hint: str | None, code: int) -> int:
    """Print ``error:`` / ``hint:`` lines on stderr and return ``code``."""
    con = error_console()
    con.print(f"[bold red]error:[/] {escape(message)}")
    if hint:
        con.print(f"[dim]hint:[/] {escape(hint)}")
    return code


def report_error(err: PrefixplanError) -> int:
    return report(str(err), err.hint, err.exit_code)


def _is_cli_usage_error(exc: BaseException) -> bool:
    """A usage error raised by typer's parser (its own Click or the click package)."""
    names = {cls.__name__ for cls in type(exc).__mro__}
    return "UsageError" in names and callable(getattr(exc, "format_message", None))


def _command_path(exc: Any) -> str:
    ctx = getattr(exc, "ctx", None)
    return str(getattr(ctx, "command_path", "") or "prefixplan")


def usage_error(exc: Any) -> int:
    """Report a command-line usage error (exit 2)."""
    path = _command_path(exc)
    if type(exc).__name__ == "NoArgsIsHelpError":
        # ``prefixplan`` (or a group) without a command: show the help, then say what is missing.
        typer.echo(exc.format_message())
        return report("missing command", f"run `{path} COMMAND`; `{path} --help` lists the commands", ExitCode.USAGE)
    message = " ".join(str(exc.format_message()).split())
    return report(message, f"see `{path} --help`", ExitCode.USAGE)


STDOUT_CLOSED = 141
"""Exit code when the reader of stdout went away (as a shell reports a SIGPIPE death)."""


def _from_broken_pipe(exc: BaseException) -> bool:
    seen: BaseException | None = exc.__context__
    for _ in range(8):
        if seen is None:
            return False
        if isinstance(seen, BrokenPipeError):
            return True
        seen = seen.__context__
    return False


def run_with_error_boundary(command: Any, argv: list[str]) -> int:
    """Run the command tree; known errors -> message + exit code, unknown -> traceback + exit 70."""
    try:
        # In non-standalone mode the parser *returns* the code of a `typer.Exit(code)`.
        rc = command.main(args=argv, prog_name="prefixplan", standalone_mode=False)
    except PrefixplanError as err:
        return report_error(err)
    except typer.Exit as exc:  # raised by commands to set an exit code
        return int(exc.exit_code or 0)
    except typer.Abort:
        error_console().print("aborted")
        return 130
    except SystemExit as exc:
        # click and rich answer a closed stdout (`prefixplan ... | head`) with exit 1, the findings
        # code (click swaps sys.stdout for its PacifyFlushWrapper, rich raises from the
        # BrokenPipeError). Say what a shell would for a writer killed by SIGPIPE (128 + 13), so a
        # CI gate never reads it as findings.
        if type(sys.stdout).__name__.lstrip("_") == "PacifyFlushWrapper" or _from_broken_pipe(exc):
            return STDOUT_CLOSED
        raise
    except KeyboardInterrupt:
        error_console().print("interrupted")
        return 130
    except Exception as exc:
        if _is_cli_usage_error(exc):
            return usage_error(exc)
        if type(exc).__name__ == "Exit" and hasattr(exc, "exit_code"):  # click.exceptions.Exit (older typer)
            return int(exc.exit_code or 0)
        # A bug: show the traceback (typer's hook when installed, locals never shown) and exit
        # INTERNAL, so a crash is never mistaken for exit 1 (findings) by a CI gate.
        sys.excepthook(type(exc), exc, exc.__traceback__)
        return ExitCode.INTERNAL
    return rc if isinstance(rc, int) and not isinstance(rc, bool) else ExitCode.OK
