"""What a content-aware router sees of a request: its content as bytes, cut in chained units.

Routers in front of engines (SGLang's cache-aware router, the gateway) do not tokenize: they
match requests on their content. :func:`request_route_bytes` is that content (tools, then each
message), :func:`route_units` its chained 64-bit identities per :data:`UNIT_BYTES` bytes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

UNIT_BYTES = 64
"""Bytes of request content per routing unit."""


def route_units(data: bytes, unit: int = UNIT_BYTES) -> list[int]:
    """Chained hashes of ``data`` cut in ``unit``-byte pieces (the last piece may be shorter):
    element ``i`` identifies ``data[:(i+1)*unit]``."""
    h = hashlib.blake2b(digest_size=8)
    out = []
    for start in range(0, len(data), unit):
        h.update(data[start : start + unit])
        out.append(int.from_bytes(h.copy().digest(), "little"))
    return out


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def request_route_bytes(
    messages: Sequence[Mapping[str, Any]] | None = None,
    tools: Sequence[Mapping[str, Any]] | None = None,
    prompt: Any = None,
) -> bytes:
    """The content of a request as routing sees it: the tools (compact JSON, key order kept), then
    each message's role, content, name and tool calls, in order; or a completion's prompt (text,
    or token ids)."""
    parts: list[str] = []
    if tools:
        parts.append("T" + _compact(list(tools)) + "\x1e")
    for m in messages or ():
        content = m.get("content")
        text = content if isinstance(content, str) else _compact(content) if content is not None else ""
        parts.append(f"{m.get('role', '')}\x1f{text}")
        if m.get("name"):
            parts.append(f"\x1f{m['name']}")
        if m.get("tool_calls"):
            parts.append("\x1f" + _compact(m["tool_calls"]))
        parts.append("\x1e")
    if prompt is not None:
        parts.append(prompt if isinstance(prompt, str) else _compact(prompt))
    return "".join(parts).encode("utf-8", "surrogatepass")
