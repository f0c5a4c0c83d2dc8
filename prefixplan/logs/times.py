"""Timestamps in logs and on the command line.

Numbers are epoch seconds; values that are too large to be seconds are taken as
milliseconds (> 1e11), microseconds (> 1e14) or nanoseconds (> 1e17). Strings are
ISO-8601 (``2024-05-01T12:00:00Z``, ``2024-05-01 12:00:00+02:00``, ``2024-05-01``) or
numbers; an ISO time without an offset is UTC.
"""

from __future__ import annotations

import math
from datetime import datetime, timezone
from typing import Any

from prefixplan.errors import UsageError

TIME_FIELDS = ("timestamp", "time", "created", "created_at", "request_time", "start_time")


def epoch_seconds(value: float) -> float:
    """Scale a numeric timestamp to seconds (ms / µs / ns are recognised by magnitude).

    Raises:
        ValueError: not a finite number (an integer too large for a float included).
    """
    try:
        v = float(value)
    except OverflowError:
        raise ValueError(f"not a timestamp: a number of {len(str(value))} digits") from None
    if not math.isfinite(v):
        raise ValueError(f"not a finite number: {value!r}")
    a = abs(v)
    if a > 1e17:
        return v / 1e9
    if a > 1e14:
        return v / 1e6
    if a > 1e11:
        return v / 1e3
    return v


def _iso_seconds(text: str) -> float:
    t = text.strip()
    if t.endswith(("z", "Z")):
        t = t[:-1] + "+00:00"
    dt = datetime.fromisoformat(t)
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return dt.timestamp()


def timestamp_value(value: Any) -> float:
    """Seconds since epoch for a logged timestamp (number, numeric string or ISO-8601).

    Raises:
        ValueError: the value is not a timestamp.
    """
    if isinstance(value, bool) or value is None:
        raise ValueError(f"not a timestamp: {value!r}")
    if isinstance(value, (int, float)):
        return epoch_seconds(value)
    if isinstance(value, str):
        try:
            return epoch_seconds(float(value))
        except ValueError:
            pass
        try:
            return _iso_seconds(value)
        except ValueError:
            raise ValueError(f"not a number or ISO-8601 time: {value[:40]!r}") from None
    raise ValueError(f"not a timestamp: {type(value).__name__}")


def find_time(*objs: Any) -> float | None:
    """The first timestamp field found in ``objs`` (dicts, searched in order), else None.

    Raises:
        ValueError: a timestamp field is present but unreadable (message names the field).
    """
    for obj in objs:
        if not isinstance(obj, dict):
            continue
        for name in TIME_FIELDS:
            value = obj.get(name)
            if value is None:
                continue
            try:
                return timestamp_value(value)
            except ValueError as exc:
                raise ValueError(f"field {name!r}: {exc}") from None
    return None


def parse_time(text: str) -> float:
    """Parse a ``--since`` / ``--until`` value: ISO-8601 or epoch seconds.

    Args:
        text: e.g. ``"2024-05-01T00:00:00Z"``, ``"2024-05-01"`` or ``"1714521600"``.

    Returns:
        Seconds since the epoch.

    Raises:
        UsageError: the text is neither.
    """
    try:
        return timestamp_value(text)
    except ValueError:
        raise UsageError(
            f"cannot read time {text!r}",
            hint="use ISO-8601 (2024-05-01T12:00:00Z) or epoch seconds (1714564800)",
        ) from None
