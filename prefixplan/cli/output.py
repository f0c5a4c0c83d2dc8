"""What commands write besides their console report: JSON to a file or stdout, and the rule that
at most one output takes stdout."""

from __future__ import annotations

import json
from typing import Any


def write_json(target: str, data: Any, *, ensure_ascii: bool = False, allow_nan: bool = True) -> None:
    """``data`` as indented JSON to ``target`` (``-``: stdout), atomically for a file.
    ``ensure_ascii`` escapes non-ASCII text (as lock, status, calibrate, formats and diff have
    always written it); ``allow_nan=False`` refuses NaN and infinities (diff)."""
    from prefixplan.core.fileio import atomic_write_text

    text = json.dumps(data, indent=2, ensure_ascii=ensure_ascii, allow_nan=allow_nan, default=str)
    atomic_write_text(target, text + "\n")


def one_stdout(*outputs: tuple[str, str | None]) -> bool:
    """Whether one of ``(flag, target)`` writes to stdout; two or more is a usage error.

    Raises:
        UsageError: more than one output names ``-``.
    """
    from prefixplan.errors import UsageError

    to_stdout = [flag for flag, target in outputs if target == "-"]
    if len(to_stdout) > 1:
        raise UsageError(
            f"only one output can write to stdout, not {' and '.join(to_stdout)}",
            hint="give all but one a file name",
        )
    return bool(to_stdout)
