"""Limits every log reader applies to one record, whatever its format.

A record is a JSON line, a CSV row, a Parquet row or an engine server-log line. One over a limit is
a malformed line (counted, reported with its file and line or row, skipped), never a crash: a
hostile or broken log cannot make a reader, a tokenizer or a render worker run out of memory.
``ReadOptions(max_line_bytes=..., max_record_tokens=...)`` overrides them per run; the defaults are
read when the options are made.
"""

from __future__ import annotations

MAX_RECORD_BYTES = 64 * 2**20
"""Bytes of one record: a JSON or server-log line, a CSV row (its cells), a Parquet row (its cells'
values, measured from the column buffers before any is turned into Python objects)."""

MAX_RECORD_TOKENS = 2_000_000
"""Token ids of one request as a log gives them (an engine log's ``prompt_token_ids`` /
``input_ids``, a completions ``prompt`` of ids); counted before the ids are read."""

MAX_QUOTED_CHARS = 200
"""The most characters of a value from the input that a message quotes."""

MAX_REASON_CHARS = 600
"""The longest reason a malformed line is recorded with (longer ones are cut, and say so)."""


def clip(value: object, limit: int = MAX_QUOTED_CHARS) -> str:
    """``value`` as a message quotes it: its text, at most ``limit`` characters, then how long it was."""
    text = value if isinstance(value, str) else str(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}…({len(text):,} chars)"


def clip_repr(value: object, limit: int = MAX_QUOTED_CHARS) -> str:
    """``repr(value)`` of a string (quotes and escapes), cut like :func:`clip`."""
    if isinstance(value, str) and len(value) > limit:
        return f"{value[:limit]!r}…({len(value):,} chars)"
    return clip(repr(value), limit)
