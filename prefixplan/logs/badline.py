"""The internal signal for a malformed log line."""

from __future__ import annotations

from typing import Any


class BadLine(Exception):
    """A log line cannot be turned into requests.

    ``reason`` reads ``"<category>: <detail>"``; the category (text before the first colon)
    is what :class:`prefixplan.logs.LineErrors` counts by.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


_JSON_TYPES = {
    dict: "object",
    list: "list",
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    type(None): "null",
}


def jtype(value: Any) -> str:
    """JSON type name of ``value`` for error messages."""
    return _JSON_TYPES.get(type(value), type(value).__name__)
