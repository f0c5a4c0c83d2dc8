"""Bracketed lists of integers in log text (``[151644, 8948, 198]``), read without a Python object
per item.

Engine server logs carry a request's token ids as one list on one line: millions of ids for a long
prompt. A Python ``int`` and its list slot cost 36 bytes an id, and a regular expression over the
whole list kept backtracking state per item (about 290 bytes an id). :func:`scan_int_list` counts
the items first (refusing a list longer than the caller's limit before reading it), then parses the
digits with numpy a slice of :data:`CHUNK_CHARS` characters at a time into one ``int64`` array:
8 bytes an item, plus a bounded working set.
"""

from __future__ import annotations

import re

import numpy as np

CHUNK_CHARS = 1 << 16
"""Characters of the list parsed per numpy pass (the working set is a small multiple of it)."""
_MAX_DIGITS = 18  # an int64 holds every 18-digit number; longer ones go the general way
_NOT_INT_CHAR = re.compile(r"[^0-9,\- \t]")
_DIGIT0, _COMMA, _MINUS, _SPACE, _TAB = 48, 44, 45, 32, 9
_POW10 = np.array([10**k for k in range(_MAX_DIGITS)], dtype=np.int64)


class TooManyItems(ValueError):
    """A list holds more items than the caller allows (counted before anything is parsed)."""

    def __init__(self, count: int, limit: int) -> None:
        super().__init__(f"{count:,} items > the limit of {limit:,}")
        self.count = count
        self.limit = limit


def count_items(text: str, start: int, end: int) -> int:
    """Items of the comma-separated text ``text[start:end]`` (0 when it is blank)."""
    commas = text.count(",", start, end)
    if commas:
        return commas + 1
    return 0 if not text[start:end].strip(" \t") else 1


def scan_int_list(text: str, pos: int, max_items: int) -> tuple[np.ndarray, int] | None:
    """The list of optionally signed decimal integers opening at ``text[pos] == "["`` as an
    ``int64`` array, and the position after its ``]``; None when the brackets hold nothing or
    anything else (strings, nested lists, numbers of more than 18 digits, odd spacing): the caller
    reads those its general way.

    Raises:
        TooManyItems: the list has more than ``max_items`` items.
    """
    close = text.find("]", pos + 1)
    if close < 0 or _NOT_INT_CHAR.search(text, pos + 1, close) is not None:
        return None
    n = count_items(text, pos + 1, close)
    if n == 0:
        return None  # ``[]``: a plain empty list
    if n > max_items:
        raise TooManyItems(n, max_items)
    out = np.empty(n, dtype=np.int64)
    filled = 0
    start = pos + 1
    while start < close:
        end = min(start + CHUNK_CHARS, close)
        if end < close:
            cut = text.rfind(",", start, end)
            if cut < 0:
                return None  # a number longer than a chunk
            end = cut  # the comma itself is skipped below
        values = _parse_chunk(text[start:end])
        if values is None or filled + values.shape[0] > n:
            return None
        out[filled : filled + values.shape[0]] = values
        filled += values.shape[0]
        start = end + 1 if end < close else close
    if filled != n:
        return None  # an empty item (``1,,2``, ``[1,]``)
    return out, close + 1


def _parse_chunk(chunk: str) -> np.ndarray | None:
    """The integers of ``chunk`` (``-?digits`` separated by commas, spaces around them allowed),
    or None when it is not exactly that."""
    raw = np.frombuffer(chunk.encode("ascii"), dtype=np.uint8)
    blank = (raw == _SPACE) | (raw == _TAB)
    where = np.flatnonzero(~blank)
    if where.shape[0] == 0:
        return np.zeros(0, dtype=np.int64)
    s = raw[where]
    numeric = s != _COMMA  # a digit or a minus sign
    spaced = np.diff(where) > 1  # a blank run between two kept characters
    if bool(np.any(spaced & numeric[:-1] & numeric[1:])):
        return None  # ``1 2``: two numbers without a comma, or ``- 1``
    digit = (s >= _DIGIT0) & (s <= _DIGIT0 + 9)
    comma = ~numeric
    minus = numeric & ~digit
    if not digit[-1] or comma[0]:
        return None
    after_comma = np.concatenate(([True], comma[:-1]))
    if bool(np.any(comma[1:] & ~digit[:-1])):  # a comma after a comma or a minus sign
        return None
    if bool(np.any(minus & ~after_comma)) or bool(np.any(minus[:-1] & ~digit[1:])):
        return None
    item = np.cumsum(comma) - comma  # the item each character belongs to
    n_items = int(item[-1]) + 1
    d_item = item[digit]
    starts = np.flatnonzero(np.concatenate(([True], d_item[1:] != d_item[:-1])))
    counts = np.diff(np.append(starts, d_item.shape[0]))
    if counts.shape[0] != n_items or int(counts.max()) > _MAX_DIGITS:
        return None
    # each digit times 10 to the power of the digits after it in its item
    ends = np.repeat(starts + counts, counts)
    exponent = ends - 1 - np.arange(d_item.shape[0])
    values = np.add.reduceat((s[digit] - _DIGIT0).astype(np.int64) * _POW10[exponent], starts)
    negative = np.zeros(n_items, dtype=bool)
    negative[item[minus]] = True
    values[negative] *= -1
    return values
