"""Convert Anthropic Messages requests to the OpenAI Chat Completions shape.

The rule (also in docs/logs.md):

* ``system`` becomes a leading ``{"role": "system"}`` message.
* A content made of exactly one text block becomes a plain string; otherwise content is a
  list of OpenAI parts (``text`` -> ``{"type": "text"}``, ``image`` -> ``image_url`` with a
  ``data:`` URL or the image URL; other blocks are kept without ``cache_control``).
* Assistant ``tool_use`` blocks become ``tool_calls`` (``arguments`` is
  ``json.dumps(input, ensure_ascii=False)``); ``thinking`` blocks are joined into
  ``reasoning_content``; ``redacted_thinking`` blocks are dropped.
* Each user ``tool_result`` block becomes its own ``{"role": "tool", "tool_call_id": ...}``
  message, in block order; text and images around them stay in user messages.
* Tools ``{name, description, input_schema}`` become
  ``{"type": "function", "function": {name, description, parameters}}``.
* ``cache_control`` markers become :class:`~prefixplan.core.types.Breakpoint` records: ``tools``
  with the tool index, ``system`` with the system block index, ``message`` with the index
  of the converted message in ``Request.messages`` that holds the marked block.
"""

from __future__ import annotations

import json
from typing import Any

from prefixplan.core.types import Breakpoint
from prefixplan.logs.badline import BadLine, jtype
from prefixplan.logs.limits import clip_repr

ANTHROPIC_BLOCK_MARKERS = frozenset({"tool_use", "tool_result", "thinking", "redacted_thinking"})


def looks_anthropic(body: dict[str, Any], outer: dict[str, Any] | None = None) -> bool:
    """Whether a request body with ``messages`` is an Anthropic Messages request."""
    if "system" in body or "anthropic_version" in body:
        return True
    if outer is not None and "anthropic_version" in outer:
        return True
    tools = body.get("tools")
    if isinstance(tools, list):
        for tool in tools:
            if isinstance(tool, dict) and "input_schema" in tool:
                return True
    messages = body.get("messages")
    if isinstance(messages, list):
        # OpenAI-compatible gateways (LiteLLM, OpenRouter) accept cache_control on OpenAI chat
        # parts: it marks Anthropic only in a body without OpenAI-only shapes
        openai = _openai_only(body, messages)
        for msg in messages:
            content = msg.get("content") if isinstance(msg, dict) else None
            if not isinstance(content, list):
                continue
            for block in content:
                if not isinstance(block, dict):
                    continue
                if block.get("type") in ANTHROPIC_BLOCK_MARKERS or ("cache_control" in block and not openai):
                    return True
                if block.get("type") == "image" and "source" in block:
                    return True
    return False


def _openai_only(body: dict[str, Any], messages: list[Any]) -> bool:
    """Shapes the Anthropic Messages API does not have: function tools, system/developer/tool
    roles among the messages, assistant ``tool_calls``."""
    tools = body.get("tools")
    if isinstance(tools, list) and any(isinstance(t, dict) and isinstance(t.get("function"), dict) for t in tools):
        return True
    return any(
        isinstance(m, dict) and (m.get("role") in ("system", "developer", "tool") or "tool_calls" in m)
        for m in messages
    )


def _ttl(block: dict[str, Any]) -> str | None:
    cc = block.get("cache_control")
    if not isinstance(cc, dict):
        return None
    ttl = cc.get("ttl")
    return ttl if isinstance(ttl, str) and ttl else "5m"


def _part(block: Any, where: str) -> dict[str, Any]:
    if not isinstance(block, dict) or not isinstance(block.get("type"), str):
        raise BadLine(f"wrong type: {where} is {jtype(block)}, expected a content block object")
    kind = block["type"]
    if kind == "text":
        text = block.get("text")
        if not isinstance(text, str):
            raise BadLine(f"wrong type: {where} text is {jtype(text)}, expected string")
        return {"type": "text", "text": text}
    if kind == "image":
        source = block.get("source")
        if isinstance(source, dict):
            if source.get("type") == "base64":
                url = f"data:{source.get('media_type', '')};base64,{source.get('data', '')}"
                return {"type": "image_url", "image_url": {"url": url}}
            if source.get("type") == "url":
                return {"type": "image_url", "image_url": {"url": source.get("url", "")}}
    return {k: v for k, v in block.items() if k != "cache_control"}


def _content(parts: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    if len(parts) == 1 and parts[0].get("type") == "text":
        return parts[0]["text"]
    return parts


def _tool_result_content(block: dict[str, Any], where: str) -> str | list[dict[str, Any]]:
    content = block.get("content")
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return _content([_part(b, f"{where} content {k}") for k, b in enumerate(content)])
    raise BadLine(f"wrong type: {where} content is {jtype(content)}, expected string or list")


def _system(system: Any, out: list[dict[str, Any]], bps: list[Breakpoint]) -> None:
    if isinstance(system, str):
        out.append({"role": "system", "content": system})
        return
    if not isinstance(system, list):
        raise BadLine(f"wrong type: system is {jtype(system)}, expected string or list")
    parts = []
    for j, block in enumerate(system):
        parts.append(_part(block, f"system block {j}"))
        ttl = _ttl(block)
        if ttl:
            bps.append(Breakpoint("system", j, ttl))
    if parts:
        out.append({"role": "system", "content": _content(parts)})


def _assistant(i: int, blocks: list[Any], out: list[dict[str, Any]], bps: list[Breakpoint]) -> None:
    parts: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    thinking: list[str] = []
    marked = None
    for j, block in enumerate(blocks):
        where = f"message {i} block {j}"
        if not isinstance(block, dict):
            raise BadLine(f"wrong type: {where} is {jtype(block)}, expected object")
        kind = block.get("type")
        if kind == "tool_use":
            args = block.get("input", {})
            if not isinstance(args, dict):
                raise BadLine(f"wrong type: {where} tool_use input is {jtype(args)}, expected object")
            name = block.get("name")
            if not isinstance(name, str):
                raise BadLine(f"missing field: {where} tool_use has no name")
            calls.append(
                {
                    "id": block.get("id"),
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)},
                }
            )
        elif kind == "thinking":
            text = block.get("thinking")
            if isinstance(text, str):
                thinking.append(text)
        elif kind == "redacted_thinking":
            pass
        else:
            parts.append(_part(block, where))
        marked = marked or _ttl(block)
    content = _content(parts) if parts else (None if calls or thinking else "")
    msg: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        msg["tool_calls"] = calls
    if thinking:
        msg["reasoning_content"] = "\n".join(thinking)
    if marked:
        bps.append(Breakpoint("message", len(out), marked))
    out.append(msg)


def _user(i: int, role: str, blocks: list[Any], out: list[dict[str, Any]], bps: list[Breakpoint]) -> None:
    parts: list[dict[str, Any]] = []
    marked: str | None = None

    def flush() -> None:
        nonlocal parts, marked
        if parts:
            if marked:
                bps.append(Breakpoint("message", len(out), marked))
            out.append({"role": role, "content": _content(parts)})
        parts, marked = [], None

    for j, block in enumerate(blocks):
        where = f"message {i} block {j}"
        if isinstance(block, dict) and block.get("type") == "tool_result":
            flush()
            ttl = _ttl(block)
            if ttl:
                bps.append(Breakpoint("message", len(out), ttl))
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": block.get("tool_use_id"),
                    "content": _tool_result_content(block, where),
                }
            )
            continue
        parts.append(_part(block, where))
        marked = _ttl(block) or marked
    flush()


def _tools(tools: Any, bps: list[Breakpoint]) -> list[dict[str, Any]] | None:
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise BadLine(f"wrong type: tools is {jtype(tools)}, expected list")
    out = []
    for k, tool in enumerate(tools):
        if not isinstance(tool, dict):
            raise BadLine(f"wrong type: tool {k} is {jtype(tool)}, expected object")
        out.append(anthropic_tool(tool, k))
        ttl = _ttl(tool)
        if ttl:
            bps.append(Breakpoint("tools", k, ttl))
    return out


def anthropic_tool(tool: dict[str, Any], k: int) -> dict[str, Any]:
    """One Anthropic tool definition in OpenAI function-tool shape."""
    name = tool.get("name")
    if not isinstance(name, str):
        raise BadLine(f"missing field: tool {k} has no name")
    fn: dict[str, Any] = {"name": name}
    if isinstance(tool.get("description"), str):
        fn["description"] = tool["description"]
    schema = tool.get("input_schema")
    fn["parameters"] = schema if isinstance(schema, dict) else {"type": "object", "properties": {}}
    return {"type": "function", "function": fn}


def _tool_choice(choice: Any) -> Any:
    if not isinstance(choice, dict):
        return choice
    kind = choice.get("type")
    if kind == "any":
        return "required"
    if kind == "tool":
        return {"type": "function", "function": {"name": choice.get("name")}}
    return kind


def convert(
    body: dict[str, Any],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None, list[Breakpoint], dict[str, Any]]:
    """Convert an Anthropic Messages body.

    Returns:
        ``(messages, tools, breakpoints, extra)`` in OpenAI shape; ``extra`` holds the
        converted ``tool_choice`` and the ``thinking`` parameter when present.

    Raises:
        BadLine: the body is malformed (the reason names the message and block).
    """
    messages = body.get("messages")
    if messages is None:
        raise BadLine("missing field: messages")
    if not isinstance(messages, list):
        raise BadLine(f"wrong type: messages is {jtype(messages)}, expected list")
    out: list[dict[str, Any]] = []
    bps: list[Breakpoint] = []
    tools = _tools(body.get("tools"), bps)
    if body.get("system") is not None:
        _system(body["system"], out, bps)
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict):
            raise BadLine(f"wrong type: message {i} is {jtype(msg)}, expected object")
        role = msg.get("role")
        if not isinstance(role, str):
            raise BadLine(f"missing field: message {i} has no role")
        if role not in ("user", "assistant", "system"):
            raise BadLine(f"bad message: message {i} role {clip_repr(role, 40)} is not user or assistant")
        content = msg.get("content")
        if isinstance(content, str):
            out.append({"role": role, "content": content})
        elif isinstance(content, list):
            if role == "assistant":
                _assistant(i, content, out, bps)
            else:
                _user(i, role, content, out, bps)
        else:
            raise BadLine(f"wrong type: message {i} content is {jtype(content)}, expected string or list")
    if not out:
        raise BadLine("missing field: messages is empty")
    extra: dict[str, Any] = {}
    if "tool_choice" in body:
        extra["tool_choice"] = _tool_choice(body["tool_choice"])
    if "thinking" in body:
        extra["thinking"] = body["thinking"]
    return out, tools, bps, extra
