"""Reading a client's request body without letting one client hold the gateway.

* A body must arrive within ``body_timeout`` seconds (408 otherwise) and be at most
  ``max_bytes`` (413); at most ``max_in_flight`` bodies are read at once (503 with ``Retry-After``
  beyond), so stalled uploads hold at most ``max_in_flight x max_bytes`` of memory.
* It must be a JSON object whose fields the gateway reads have the shapes the OpenAI API defines
  (``messages``: a list of objects with a string ``role``; ``tools``: a list of objects;
  ``prompt``: text, token ids, or lists of them; ``stream``: a boolean), nested at most
  :data:`MAX_DEPTH` deep. Anything else is a 400 that names the field, never a 500.

Header read time is bounded by the server's protocol (:mod:`prefixplan.gateway.protocol`).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from prefixplan.gateway.rules import GatewayError

if TYPE_CHECKING:  # pragma: no cover
    from starlette.requests import Request

MAX_DEPTH = 64
"""How deep a request's JSON may nest (JSON schemas of tools included)."""


def _bad(field: str, what: str) -> GatewayError:
    return GatewayError(400, "invalid_request", f"{field}: {what}")


def depth_ok(value: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether ``value`` nests at most ``limit`` containers deep (iterative: no recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return False
        children = item.values() if isinstance(item, dict) else item
        for child in children:
            if isinstance(child, (dict, list)):
                stack.append((child, depth + 1))
    return True


def _check_messages(messages: Any) -> None:
    if not isinstance(messages, list):
        raise _bad("messages", "must be a list of message objects")
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            raise _bad(where, "must be an object with a role and content")
        if not isinstance(m.get("role"), str):
            raise _bad(f"{where}.role", "must be a string")
        content = m.get("content")
        if content is not None and not isinstance(content, (str, list)):
            raise _bad(f"{where}.content", "must be a string, a list of content parts, or null")
        if isinstance(content, list) and not all(isinstance(p, dict) for p in content):
            raise _bad(f"{where}.content", "a list content holds content-part objects")
        if m.get("name") is not None and not isinstance(m.get("name"), str):
            raise _bad(f"{where}.name", "must be a string")
        if m.get("tool_calls") is not None and not isinstance(m.get("tool_calls"), list):
            raise _bad(f"{where}.tool_calls", "must be a list")


def _check_prompt(prompt: Any) -> None:
    if isinstance(prompt, str):
        return
    if isinstance(prompt, list):
        if all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            return
        if all(isinstance(p, str) for p in prompt):
            return
        if all(isinstance(p, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in p) for p in prompt):
            return
    raise _bad("prompt", "must be text, a list of token ids, or a list of either")


def check_body(body: Any) -> dict[str, Any]:
    """``body`` when it is a request the gateway can handle (module docstring); else 400."""
    if not isinstance(body, dict):
        raise GatewayError(400, "invalid_json", "the request body must be a JSON object")
    for field in ("messages", "tools", "prompt", "stream_options", "response_format"):
        value = body.get(field)
        if isinstance(value, (dict, list)) and not depth_ok(value, MAX_DEPTH - 1):
            raise _bad(field, f"nested deeper than {MAX_DEPTH} levels")
    if "messages" in body:
        _check_messages(body["messages"])
    tools = body.get("tools")
    if tools is not None and (not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools)):
        raise _bad("tools", "must be a list of tool objects")
    if "prompt" in body:
        _check_prompt(body["prompt"])
    if "stream" in body and not isinstance(body["stream"], bool) and body["stream"] is not None:
        raise _bad("stream", "must be true or false")
    opts = body.get("stream_options")
    if opts is not None and not isinstance(opts, dict):
        raise _bad("stream_options", "must be an object")
    return body


class BodyReader:
    """Reads request bodies with the bounds of the module docstring."""

    def __init__(self, *, max_bytes: int, timeout_s: float = 30.0, max_in_flight: int = 64) -> None:
        self.max_bytes = max_bytes
        self.timeout_s = timeout_s
        self.max_in_flight = max_in_flight
        self.in_flight = 0

    def _too_large(self) -> GatewayError:
        return GatewayError(413, "request_too_large", f"the request body exceeds {self.max_bytes} bytes")

    async def _collect(self, request: Request) -> bytes:
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > self.max_bytes:
                raise self._too_large()
            chunks.append(chunk)
        return b"".join(chunks)

    async def read(self, request: Request) -> dict[str, Any]:
        """The request's JSON object (errors: 408, 413, 503, 400; see module docstring)."""
        import orjson

        length = request.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > self.max_bytes:
            raise self._too_large()
        if self.in_flight >= self.max_in_flight:
            err = GatewayError(
                503,
                "too_many_uploads",
                f"{self.in_flight} request bodies are being received: try again shortly",
                "server_error",
            )
            err.headers = {"retry-after": "1"}
            raise err
        self.in_flight += 1
        try:
            raw = await asyncio.wait_for(self._collect(request), self.timeout_s)
        except asyncio.TimeoutError:
            err = GatewayError(408, "request_timeout", f"the request body did not arrive within {self.timeout_s:g} s")
            err.headers = {"connection": "close"}
            raise err from None
        finally:
            self.in_flight -= 1
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError as e:
            raise GatewayError(400, "invalid_json", f"the request body is not JSON: {str(e)[:200]}") from None
        return check_body(body)
