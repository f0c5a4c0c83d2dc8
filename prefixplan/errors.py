"""The one error hierarchy of prefixplan.

Library code raises these; only :mod:`prefixplan.cli.errors` turns them into messages and
exit codes. Each class carries the exit code the CLI uses for it (see docs/cli.md).
"""

from __future__ import annotations


class ExitCode:
    """Process exit codes; documented in docs/cli.md."""

    OK = 0
    FINDINGS = 1  # check failed, lint findings at --fail-on level, warm partial
    USAGE = 2  # bad option, bad input file, malformed recipe, --strict log error
    NOT_LOCKED = 3  # a version was bumped but `prefixplan lock` was not run
    ENDPOINT = 4  # an endpoint could not be reached or answered wrongly
    STORE = 5  # the SQLite store could not be opened or migrated
    INTERNAL = 70  # a bug: unexpected exception (traceback shown)


class PrefixplanError(Exception):
    """Base class of all errors prefixplan reports to users."""

    exit_code: int = ExitCode.USAGE
    hint: str | None = None

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        if hint is not None:
            self.hint = hint


class UsageError(PrefixplanError):
    """An option or argument is invalid."""


class InputError(PrefixplanError):
    """An input file cannot be read or parsed."""


class LogLineError(InputError):
    """A log line is malformed (raised only in --strict mode; otherwise counted)."""

    def __init__(self, source: str, line_no: int, reason: str) -> None:
        super().__init__(f"{source}:{line_no}: {reason}")
        self.source = source
        self.line_no = line_no
        self.reason = reason

    def __reduce__(self) -> tuple[type, tuple[str, int, str]]:  # travels from render processes intact
        return (type(self), (self.source, self.line_no, self.reason))


class DamagedTraceError(InputError):
    """A trace file is damaged or inconsistent (a corrupt page, an impossible value, a column of
    the wrong type): refused as a whole, never read into wrong results. The message reads
    ``damaged trace FILE: reason``."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(
            f"damaged trace {path}: {reason}",
            hint="write the trace again from its log: prefixplan trace LOG --out FILE",
        )
        self.path = path
        self.reason = reason

    def __reduce__(self) -> tuple[type, tuple[str, str]]:
        return (type(self), (self.path, self.reason))


class TokenizerError(PrefixplanError):
    """A tokenizer spec cannot be loaded or a request cannot be rendered."""


class RecipeError(InputError):
    """A recipe file is invalid; the message names the file and the field path."""


class StoreError(PrefixplanError):
    """The SQLite store cannot be opened, migrated or written."""

    exit_code = ExitCode.STORE


class KeyConflictError(PrefixplanError):
    """Content changed under an unchanged name@vN."""

    exit_code = ExitCode.FINDINGS


class EndpointError(PrefixplanError):
    """An engine endpoint is unreachable or answered wrongly; the message names it."""

    exit_code = ExitCode.ENDPOINT


class OutputsFailed(UsageError):
    """Some output files could not be written; the others were (``written``: ``(what, path)``)."""

    def __init__(self, failures: list[str], written: list[tuple[str, str]]) -> None:
        self.failures = failures
        self.written = written
        done = ", ".join(f"{path} ({what})" for what, path in written if path != "-")
        super().__init__(
            "; ".join(failures),
            hint=(f"written anyway: {done}" if done else "nothing else was written")
            + "; fix the path or its permissions and run again",
        )
