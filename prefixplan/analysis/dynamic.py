"""Dynamic content (dates, ids, numbers) that defeats prefix caching: the patterns and their spans.

An engine reuses KV only up to the first token that differs, so a date, a request id or a
random number inside a prefix makes everything *after* it recomputed on every request.
Each finding therefore carries its position (part, line, column, character offset into
the part and into the whole prefix) and its cost: the tokens of the prefix after the
breaker. Without a tokenizer the cost is ``ceil(chars / 4)`` and marked approximate.

Codes found in one text (:func:`find_dynamic`; recipe lint in :mod:`prefixplan.gate.lint`
and the log breaker report in :mod:`prefixplan.analysis.breakers` both use them):

``date-time``     ISO dates/timestamps, ``March 3, 2025``, ``3 Mar 2025``, ``03/07/2025``,
                  ``Today is Monday``, clock times with seconds or AM/PM/UTC, Unix timestamps
``uuid``          RFC-4122-shaped UUIDs
``request-id``    ids such as ``req_8f2c91ab77d04e`` or long hex strings
``long-number``   runs of 8 or more digits
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

CHARS_PER_TOKEN = 4

_MONTHS = (
    r"(?:Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?|"
    r"Sep(?:t(?:ember)?)?|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?)"
)
_WEEKDAYS = r"(?:Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday)"
_PATTERNS: tuple[tuple[str, re.Pattern[str], str], ...] = (
    (
        "uuid",
        re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b"),
        "UUID",
    ),
    (
        "date-time",
        re.compile(r"\b\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?\b"),
        "ISO date/time",
    ),
    (
        "date-time",
        re.compile(rf"\b(?:{_WEEKDAYS},?\s+)?{_MONTHS}\.?\s+\d{{1,2}}(?:st|nd|rd|th)?,?\s+\d{{4}}\b"),
        "date",
    ),
    (
        "date-time",
        re.compile(rf"\b(?:{_WEEKDAYS},?\s+)?\d{{1,2}}(?:st|nd|rd|th)?\s+{_MONTHS}\.?,?\s+\d{{4}}\b"),
        "date",
    ),
    ("date-time", re.compile(r"\b\d{1,2}[/.]\d{1,2}[/.]\d{4}\b"), "date"),
    ("date-time", re.compile(rf"\b(?:today|current date|date) is,?\s+{_WEEKDAYS}\b", re.I), "weekday"),
    (
        "date-time",
        re.compile(r"\b\d{1,2}:\d{2}:\d{2}(?:\s*(?:AM|PM|UTC|Z))?\b|\b\d{1,2}:\d{2}\s*(?:AM|PM|am|pm|UTC)\b"),
        "clock time",
    ),
    (
        "request-id",
        re.compile(
            r"\b(?:req|request|trace|span|session|sess|conv|chatcmpl|msg|run|call|txn)[-_:=]"
            r"(?=[A-Za-z0-9-]*\d)[A-Za-z0-9][A-Za-z0-9-]{7,}\b",
            re.I,
        ),
        "request/session id",
    ),
    ("request-id", re.compile(r"\b[0-9a-f]{16,}\b"), "hex id"),  # must mix letters and digits (checked)
    ("date-time", re.compile(r"\b1[4-9]\d{8}(?:\d{3})?\b"), "Unix timestamp"),
    ("long-number", re.compile(r"\b\d{8,}\b"), "long number"),
)


TokenCounter = Callable[[str], int]


def estimate_tokens(text: str, counter: TokenCounter | None = None) -> tuple[int, bool]:
    """``(tokens, exact)``: ``counter(text)`` when given, else ``ceil(len/4)`` (approximate)."""
    if counter is not None:
        return int(counter(text)), True
    return math.ceil(len(text) / CHARS_PER_TOKEN), False


def line_col(text: str, offset: int) -> tuple[int, int]:
    """1-based line and column of a character offset."""
    line = text.count("\n", 0, offset) + 1
    col = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return line, col


_CROSSES_LINES = tuple(r"\s" in pat.pattern for _, pat, _ in _PATTERNS)
"""Patterns with ``\\s`` can match a line feed; the others never can (their classes and
literals exclude it, and ``\\b`` next to a line feed is what it is at either end of a string),
so those find the same spans line by line as in the whole text."""
_LINE_CACHE_CHARS = 4_000_000
"""Characters of lines whose spans are kept (system texts repeat most of their lines from
request to request); past it the cache starts over."""


class _LineCache:
    def __init__(self) -> None:
        self.spans: dict[str, tuple[tuple[int, int, int], ...]] = {}
        self.chars = 0


_lines = _LineCache()


def _pattern_spans(k: int, text: str) -> list[tuple[int, int]]:
    _code, pat, what = _PATTERNS[k]
    out = []
    for m in pat.finditer(text):
        if what == "hex id" and (m.group(0).isdigit() or m.group(0).isalpha()):
            continue
        out.append(m.span())
    return out


def _line_spans(line: str) -> tuple[tuple[int, int, int], ...]:
    """``(pattern, start, end)`` of the patterns that stay within a line, found in ``line``."""
    found = _lines.spans.get(line)
    if found is None:
        found = tuple(
            (k, s, e) for k in range(len(_PATTERNS)) if not _CROSSES_LINES[k] for s, e in _pattern_spans(k, line)
        )
        if _lines.chars + len(line) > _LINE_CACHE_CHARS:
            _lines.spans.clear()
            _lines.chars = 0
        _lines.spans[line] = found
        _lines.chars += len(line)
    return found


def find_dynamic(text: str) -> list[tuple[int, int, str, str]]:
    """Dynamic spans of ``text``: non-overlapping ``(start, end, code, what)``, in order;
    earlier patterns win overlaps. Shared by recipe lint and the log breaker report.

    Each pattern's spans are those of ``finditer`` over the whole text; patterns that never
    match a line feed are run line by line, each distinct line once."""
    spans: list[list[tuple[int, int]]] = [[] for _ in _PATTERNS]
    pos = 0
    for line in text.split("\n"):
        for k, s, e in _line_spans(line):
            spans[k].append((pos + s, pos + e))
        pos += len(line) + 1
    taken: list[tuple[int, int]] = []
    out = []
    for k, (code, _pat, what) in enumerate(_PATTERNS):
        for s, e in _pattern_spans(k, text) if _CROSSES_LINES[k] else spans[k]:
            if any(s < te and ts < e for ts, te in taken):
                continue
            taken.append((s, e))
            out.append((s, e, code, what))
    return sorted(out)
