"""What the engine server-log readers share: their line protocol, problems, the log's clock.

An engine server log is plain text: the logger's prefix (level, time, file) and a message, mixed
with every other line the server writes. A reader (:class:`TextLogReader`) is fed the decoded
lines of one file in order and yields requests as soon as they are complete, joining the lines
that belong to one request by its id. A line it cannot read is a :class:`Problem` (line number,
reason), counted with the malformed lines of JSON logs.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Protocol

import numpy as np

from prefixplan.core.promptids import PromptIds
from prefixplan.core.types import Request

ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclass(frozen=True, slots=True)
class Problem:
    """A line a reader could not use: ``reason`` reads ``"<category>: <detail>"``."""

    line_no: int
    reason: str


Item = Request | Problem


@dataclass
class SourceInfo:
    """What a reader learned about one file (kept in :class:`~prefixplan.logs.LineErrors`)."""

    reader: str  # the format the file was read as ("vllm-log", "sglang-log", "jsonl")
    detected: str  # how: "auto-detected: ..." or "forced by --log-format"
    notes: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)

    def count(self, what: str, n: int = 1) -> None:
        self.counts[what] = self.counts.get(what, 0) + n

    def to_json(self) -> dict[str, object]:
        return {
            "reader": self.reader,
            "detected": self.detected,
            "notes": list(self.notes),
            "counts": dict(self.counts),
        }


def token_ids(value: Any) -> PromptIds | None:
    """A logged list of token ids (a numpy array from :func:`~prefixplan.logs.pyrepr.parse_value`,
    or a list) as :class:`PromptIds`; None when it is not a list of ints in ``[0, 2**32)``."""
    if isinstance(value, np.ndarray):
        if value.dtype.kind != "i" or (value.size and (int(value.min()) < 0 or int(value.max()) >= 2**32)):
            return None
        return PromptIds(value)
    if isinstance(value, list) and all(type(t) is int and 0 <= t < 2**32 for t in value):
        return PromptIds(value)
    return None


class TextLogReader(Protocol):
    """Reads one server log: ``feed`` every line in order, then ``finish``."""

    info: SourceInfo

    def feed(self, line_no: int, text: str) -> Iterator[Item]: ...

    def finish(self) -> Iterator[Item]: ...


class LogClock:
    """Turns a log prefix time into epoch seconds.

    vLLM writes ``MM-DD HH:MM:SS`` without a year: the year is taken from the file's
    modification time (the current year for stdin), one year earlier when the log's first month
    lies after that month, and advanced when the month wraps from December to January. Times are
    read as UTC (the server's time zone is not logged); only differences matter to the analysis.
    """

    def __init__(self, source: str) -> None:
        try:
            stamp = os.stat(source).st_mtime if source != "-" else time.time()
        except OSError:
            stamp = time.time()
        ref = datetime.fromtimestamp(stamp, tz=timezone.utc)
        self._ref_month = ref.month
        self.year = ref.year
        self._last_month: int | None = None

    def month_day(self, month: int, day: int, hour: int, minute: int, second: int, frac: float = 0.0) -> float | None:
        """Epoch seconds of a yearless time (None when the fields are not a date)."""
        if self._last_month is None:
            if month > self._ref_month:
                self.year -= 1
        elif month < self._last_month and self._last_month == 12 and month == 1:
            self.year += 1
        self._last_month = month
        try:
            dt = datetime(self.year, month, day, hour, minute, second, tzinfo=timezone.utc)
        except ValueError:
            return None
        return dt.timestamp() + frac

    @staticmethod
    def full(year: int, month: int, day: int, hour: int, minute: int, second: int, frac: float = 0.0) -> float | None:
        """Epoch seconds of a complete ``YYYY-MM-DD HH:MM:SS`` time read as UTC."""
        try:
            dt = datetime(year, month, day, hour, minute, second, tzinfo=timezone.utc)
        except ValueError:
            return None
        return dt.timestamp() + frac
