"""Read the Python ``repr`` text that engine servers write into their logs.

vLLM's request logger writes ``prompt: %r`` (a Python string literal), ``prompt_token_ids: [1, 2]``
and ``SamplingParams(n=1, ...)``; SGLang writes ``GenerateReqInput(rid='..', input_ids=[..], ...)``
and dicts. :func:`parse_value` reads one such value at a position and returns it with the position
after it: string literals (decoded with :func:`ast.literal_eval`, never ``eval``), numbers,
``None``/``True``/``False``, lists, tuples, dicts, sets and calls ``Name(k=v, ...)`` (a
:class:`Call`). Anything else (``torch.Size([3])``, ``<Enum.X: 1>``) is kept as its source text
(:class:`Bare`), skipped with brackets and quotes balanced, so one odd field never hides the rest.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from prefixplan.logs.intlist import TooManyItems, scan_int_list
from prefixplan.logs.limits import MAX_RECORD_TOKENS

_NUMBER = re.compile(r"-?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|inf|nan)")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
_END = re.compile(r"\s*\.?\s*\Z")
_CONSTANTS = {"None": None, "True": True, "False": False}
_CLOSE = {"(": ")", "[": "]", "{": "}"}
_MAX_DEPTH = 256


class ReprError(ValueError):
    """The text at a position is not a value this reader understands (the message says where)."""


class ListTooLong(ReprError):
    """A list holds more items than the reader's limit (:data:`~prefixplan.logs.limits.MAX_RECORD_TOKENS`
    unless the caller names another): refused before its items are read."""

    def __init__(self, count: int, limit: int) -> None:
        super().__init__(f"a list of {count:,} items, more than the limit of {limit:,} per record")
        self.count = count
        self.limit = limit


@dataclass(frozen=True, slots=True)
class Call:
    """``Name(a, k=v)`` as logged: a dataclass, msgspec struct or pydantic repr."""

    name: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    args: tuple[Any, ...] = ()


@dataclass(frozen=True, slots=True)
class Truncated:
    """SGLang's cut form of a long string or list: ``'head' ... 'tail'`` / ``[..] ... [..]``; the
    middle was not logged."""

    head: Any
    tail: Any


@dataclass(frozen=True, slots=True)
class Bare:
    """Source text of a value that is not a Python literal (kept, not interpreted)."""

    text: str


def skip_spaces(text: str, pos: int) -> int:
    """The first position at or after ``pos`` that is not a space or tab."""
    n = len(text)
    while pos < n and text[pos] in " \t":
        pos += 1
    return pos


def parse_value(text: str, pos: int, limit: int = MAX_RECORD_TOKENS) -> tuple[Any, int]:
    """The value starting at ``pos`` (spaces skipped) and the position just after it. A list of
    integers comes back as a numpy ``int64`` array (token ids: 8 bytes an id, not 36).

    Raises:
        ListTooLong: a list holds more than ``limit`` items.
        ReprError: an unterminated string or bracket, or nothing at ``pos``.
    """
    try:
        value, end = _value(text, pos, limit)
        if isinstance(value, (str, list, np.ndarray)) and text.startswith(" ... ", end):
            tail, end = _value(text, end + 5, limit)
            return Truncated(value, tail), end
    except ReprError:
        raise
    except ValueError as exc:  # a number past Python's digit limit (4300 digits)
        raise ReprError(f"bad value at column {pos + 1}: {str(exc)[:120]}") from None
    return value, end


def _value(text: str, pos: int, limit: int) -> tuple[Any, int]:
    pos = skip_spaces(text, pos)
    if pos >= len(text):
        raise ReprError(f"expected a value at column {pos + 1}, found the end of the line")
    c = text[pos]
    if c in "'\"":
        return _string(text, pos)
    if c in "bru" and pos + 1 < len(text) and text[pos + 1] in "'\"":
        value, end = _string(text, pos + 1, prefix=c)
        return value, end
    if c == "[":
        try:
            ints = scan_int_list(text, pos, limit)  # the common, long case: token ids
        except TooManyItems as exc:
            raise ListTooLong(exc.count, exc.limit) from None
        if ints is not None:
            return ints
        items, end = _sequence(text, pos + 1, "]", limit)
        return items, end
    if c == "(":
        items, end = _sequence(text, pos + 1, ")", limit)
        return tuple(items), end
    if c == "{":
        return _mapping(text, pos + 1, limit)
    m = _NUMBER.match(text, pos)
    if m is not None and (m.end() >= len(text) or not (text[m.end()].isalnum() or text[m.end()] == "_")):
        word = m.group(0)
        return (float(word) if any(ch in word for ch in ".eEn") else int(word)), m.end()
    m = _NAME.match(text, pos)
    if m is not None:
        word, end = m.group(0), m.end()
        if word in _CONSTANTS:
            return _CONSTANTS[word], end
        if end < len(text) and text[end] == "(":
            return _call(text, word, end + 1, limit)
    end = skip_bare(text, pos)
    if end == pos:
        raise ReprError(f"expected a value at column {pos + 1}, found {text[pos : pos + 20]!r}")
    return Bare(text[pos:end].rstrip()), end


def skip_bare(text: str, pos: int) -> int:
    """The end of a value that is not a literal: the next ``,``, ``)``, ``]`` or ``}`` outside
    brackets and quotes (or the end of the text)."""
    depth: list[str] = []
    n = len(text)
    while pos < n:
        c = text[pos]
        if c in "'\"":
            end = string_end(text, pos)
            if end is None:
                return n
            pos = end
            continue
        if c in _CLOSE:
            if len(depth) >= _MAX_DEPTH:
                return n  # brackets nested past any real value: the rest of the line is this value
            depth.append(_CLOSE[c])
        elif depth and c == depth[-1]:
            depth.pop()
        elif not depth and c in ",)]}":
            return pos
        pos += 1
    return pos


def string_end(text: str, pos: int) -> int | None:
    """The position after the string literal whose quote is ``text[pos]`` (None: unterminated on
    this line). Quotes are found with ``str.find`` and a quote preceded by an odd run of
    backslashes is skipped: no state per escape (a regular expression kept some for each)."""
    quote = text[pos]
    at = pos + 1
    while True:
        end = text.find(quote, at)
        if end < 0:
            return None
        slashes = 0
        while text[end - 1 - slashes] == "\\":
            slashes += 1
        if slashes % 2 == 0:
            return None if text.find("\n", pos, end) >= 0 else end + 1
        at = end + 1


def _string(text: str, pos: int, prefix: str = "") -> tuple[Any, int]:
    end = string_end(text, pos)
    if end is None:
        raise ReprError(f"unterminated string starting at column {pos + 1}")
    try:
        value = ast.literal_eval(prefix + text[pos:end])
    except (ValueError, SyntaxError) as exc:
        raise ReprError(f"bad string literal at column {pos + 1}: {str(exc)[:120]}") from None
    return value, end


def _sequence(text: str, pos: int, close: str, limit: int) -> tuple[list[Any], int]:
    items: list[Any] = []
    while True:
        pos = skip_spaces(text, pos)
        if pos < len(text) and text[pos] == close:
            return items, pos + 1
        if len(items) >= limit:
            raise ListTooLong(len(items) + 1, limit)
        value, pos = parse_value(text, pos, limit)
        items.append(value)
        pos = skip_spaces(text, pos)
        if pos < len(text) and text[pos] == ",":
            pos += 1
            continue
        if pos < len(text) and text[pos] == close:
            return items, pos + 1
        raise ReprError(f"expected ',' or {close!r} at column {pos + 1}")


def _mapping(text: str, pos: int, limit: int) -> tuple[Any, int]:
    out: dict[Any, Any] = {}
    items: list[Any] = []
    while True:
        pos = skip_spaces(text, pos)
        if pos < len(text) and text[pos] == "}":
            return (out if out or not items else set(map(str, items))), pos + 1
        if len(out) + len(items) >= limit:
            raise ListTooLong(len(out) + len(items) + 1, limit)
        key, pos = parse_value(text, pos, limit)
        pos = skip_spaces(text, pos)
        if pos < len(text) and text[pos] == ":":
            value, pos = parse_value(text, pos + 1, limit)
            out[_key(key)] = value
        else:
            items.append(key)
        pos = skip_spaces(text, pos)
        if pos < len(text) and text[pos] == ",":
            pos += 1
            continue
        if pos < len(text) and text[pos] == "}":
            return (out if out or not items else set(map(str, items))), pos + 1
        raise ReprError(f"expected ',' or '}}' at column {pos + 1}")


def _key(key: Any) -> Any:
    """A dict key as a dict can hold it (unhashable values as their text)."""
    if isinstance(key, np.ndarray):
        return str(key.tolist())
    return key if not isinstance(key, (list, dict, set)) else str(key)


def _call(text: str, name: str, pos: int, limit: int) -> tuple[Call, int]:
    kwargs: dict[str, Any] = {}
    args: list[Any] = []
    while True:
        pos = skip_spaces(text, pos)
        if pos < len(text) and text[pos] == ")":
            return Call(name, kwargs, tuple(args)), pos + 1
        if len(kwargs) + len(args) >= limit:
            raise ListTooLong(len(kwargs) + len(args) + 1, limit)
        m = _NAME.match(text, pos)
        if m is not None and m.end() < len(text) and text[m.end()] == "=" and text[m.end() : m.end() + 2] != "==":
            value, pos = parse_value(text, m.end() + 1, limit)
            kwargs[m.group(0)] = value
        else:
            value, pos = parse_value(text, pos, limit)
            args.append(value)
        pos = skip_spaces(text, pos)
        if pos < len(text) and text[pos] == ",":
            pos += 1
            continue
        if pos < len(text) and text[pos] == ")":
            return Call(name, kwargs, tuple(args)), pos + 1
        raise ReprError(f"expected ',' or ')' in {name}(...) at column {pos + 1}")


def parse_labelled(text: str, pos: int, labels: frozenset[str], limit: int = MAX_RECORD_TOKENS) -> dict[str, Any]:
    """``label: value, label: value.`` (vLLM's request-logger layout) from ``pos`` to the end.

    Raises:
        ListTooLong: a list holds more than ``limit`` items.
        ReprError: a label outside ``labels`` (named), a value that does not parse, or text left
            after the last value other than a closing ``.``.
    """
    out: dict[str, Any] = {}
    while True:
        pos = skip_spaces(text, pos)
        colon = text.find(": ", pos)
        if colon < 0:
            raise ReprError(f"expected 'label: value' at column {pos + 1}")
        label = text[pos:colon]
        if label not in labels:
            raise ReprError(f"unknown field {label[:60]!r} (known: {', '.join(sorted(labels))})")
        value, pos = parse_value(text, colon + 2, limit)
        out[label] = value
        if _END.match(text, pos) is not None:  # no copy of the rest of a long line
            return out
        if text.startswith(", ", pos):
            pos += 2
            continue
        raise ReprError(f"unexpected text after {label!r} at column {pos + 1}: {text[pos : pos + 30]!r}")
