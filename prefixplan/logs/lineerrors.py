"""Malformed lines: where each is and why it was skipped, counted by reason, with the first
:data:`MAX_SAMPLES` kept in input order (:class:`LineErrors`), and partial counts from other
processes merged as if one reader had read everything in turn."""

from __future__ import annotations

import bisect
import json
import re
from dataclasses import dataclass, field
from typing import Any

from prefixplan.core.types import Request
from prefixplan.logs.limits import MAX_REASON_CHARS, clip
from prefixplan.logs.textlog import SourceInfo

MAX_SAMPLES = 100
FIRST_LINES = 3


@dataclass(frozen=True, slots=True)
class LineErrorRecord:
    """One malformed line: where it is and why it was skipped."""

    source: str
    line_no: int
    reason: str


@dataclass(slots=True)
class LineErrors:
    """Collects malformed lines; never raises.

    ``by_reason`` counts by category: the reason's text before its first colon
    (``"bad JSON"``, ``"wrong type"``, ``"line too long"``...). ``samples`` keeps the first
    :data:`MAX_SAMPLES` records in input order (inputs in the order first seen, then line
    number), whatever order they were reported in: a render failure found after later lines were
    read, or a shard of the input read elsewhere (:meth:`merge`), lands where its line is.
    """

    count: int = 0
    by_reason: dict[str, int] = field(default_factory=dict)
    samples: list[LineErrorRecord] = field(default_factory=list)
    lines_read: int = 0  # non-blank lines (or in-memory records) seen
    requests_read: int = 0  # requests those lines gave, before the time window
    first_lines: list[str] = field(default_factory=list)  # what the first lines looked like
    sources: dict[str, SourceInfo] = field(default_factory=dict)  # per file: reader, detection, notes
    _rank: dict[str, int] = field(default_factory=dict)  # input -> its position among the inputs seen
    _keys: list[tuple[int, int, int]] = field(default_factory=list)  # (rank, line, seq) of each sample
    _seq: int = 0

    def _rank_of(self, source: str) -> int:
        rank = self._rank.get(source)
        if rank is None:
            rank = self._rank[source] = len(self._rank)
        return rank

    def opened(self, source: str) -> None:
        """Note that reading ``source`` began (inputs rank by when they were opened)."""
        self._rank_of(source)

    def in_order(self) -> list[str]:
        """The inputs with a :attr:`sources` entry, in the order they were opened (those never
        noted as opened last), whatever order their entries arrived in (a worker's merge)."""
        last = len(self._rank)
        return sorted(self.sources, key=lambda source: self._rank.get(source, last))

    def saw(self, source: str, line_no: int, data: bytes | Any) -> None:
        """Count one non-blank line; remember the shape of the first few."""
        self.lines_read += 1
        self._rank_of(source)
        if len(self.first_lines) < FIRST_LINES:
            self.first_lines.append(f"{source} line {line_no} is {describe(data)}")

    def add(self, source: str, line_no: int, reason: str) -> None:
        """Record one malformed line (a reason longer than :data:`~prefixplan.logs.limits.MAX_REASON_CHARS`
        is cut: it may quote the input)."""
        reason = clip(reason, MAX_REASON_CHARS)
        self.count += 1
        category = reason.split(":", 1)[0]
        self.by_reason[category] = self.by_reason.get(category, 0) + 1
        self._seq += 1
        self._keep((self._rank_of(source), line_no, self._seq), LineErrorRecord(source, line_no, reason))

    def _keep(self, key: tuple[int, int, int], record: LineErrorRecord) -> None:
        if len(self._keys) != len(self.samples):  # samples were set from a stored record: keep its order
            self._keys = [(-1, i, 0) for i in range(len(self.samples))]
        if len(self.samples) >= MAX_SAMPLES and key >= self._keys[-1]:
            return
        at = bisect.bisect_right(self._keys, key)
        self._keys.insert(at, key)
        self.samples.insert(at, record)
        if len(self.samples) > MAX_SAMPLES:
            self._keys.pop()
            self.samples.pop()

    def merge(self, other: LineErrors) -> None:
        """Add the errors of ``other``, a later part of the same input (e.g. the next file read by
        another process): the result is what one reader of both parts in turn would have kept."""
        self.count += other.count
        for category, n in other.by_reason.items():
            self.by_reason[category] = self.by_reason.get(category, 0) + n
        for source in other._rank:  # other's inputs rank after ours, in its order
            self._rank_of(source)
        base = self._seq
        aligned = len(other._keys) == len(other.samples)
        for i, record in enumerate(other.samples):
            seq = other._keys[i][2] if aligned else i
            self._keep((self._rank_of(record.source), record.line_no, base + seq), record)
        self._seq = base + other._seq + len(other.samples)
        self.lines_read += other.lines_read
        self.requests_read += other.requests_read
        for line in other.first_lines:
            if len(self.first_lines) < FIRST_LINES:
                self.first_lines.append(line)
        for source, info in other.sources.items():
            self.sources.setdefault(source, info)

    def summary(self, limit: int = 3) -> str:
        """One human line, e.g. ``2 malformed lines (bad JSON: 2); first: a.jsonl:3: ...``."""
        if not self.count:
            return "no malformed lines"
        kinds = ", ".join(f"{k}: {v}" for k, v in sorted(self.by_reason.items(), key=lambda kv: -kv[1]))
        first = "; ".join(f"{s.source}:{s.line_no}: {s.reason}" for s in self.samples[:limit])
        noun = "line" if self.count == 1 else "lines"
        return f"{self.count} malformed {noun} ({kinds}); first: {first}"


_SECRETISH = re.compile(rb"(?i)(bearer|basic|token|key|secret|password|passwd)([\s:=\"']+)\S+|[A-Za-z0-9_\-+/=.]{16,}")


def _head(data: bytes) -> str:
    """The first 40 characters of a line that is not JSON, enough to recognise a format (a
    timestamp, a log level), with anything credential-like masked: a message may quote a header
    (``Authorization: Bearer ...``) or a key, and error messages are printed and stored."""
    masked = _SECRETISH.sub(lambda m: (m.group(1) + m.group(2) + b"***") if m.group(1) else b"***", data)
    return masked.decode("utf-8", "replace").rstrip()[:40]


def describe(data: Any) -> str:
    """The shape of one log line for messages: a JSON object's first keys, else its first characters."""
    obj = data
    if isinstance(data, (bytes, bytearray)):
        try:
            obj = json.loads(data)
        except (ValueError, RecursionError):
            return f"not JSON ({len(data)} bytes): {_head(bytes(data[:160]))!r}" + ("..." if len(data) > 40 else "")
    if isinstance(obj, dict):
        keys = list(obj)[:6]
        return "a JSON object with keys " + ", ".join(map(str, keys)) + (", ..." if len(obj) > 6 else "")
    if isinstance(obj, Request):
        return "a request record"
    return f"a JSON {type(obj).__name__}" if not isinstance(obj, str) else f"a string {obj[:60]!r}"
