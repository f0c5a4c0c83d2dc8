"""OpenTelemetry GenAI spans as OTLP JSON (format ``otel-genai``).

One line is one OTLP ``ExportTraceServiceRequest`` in the OTLP JSON encoding (what the collector's
file exporter writes): ``{"resourceSpans": [{"resource", "scopeSpans": [{"scope", "spans": [...]}]}]}``,
attribute values as ``AnyValue`` (``stringValue``, ``intValue``, ``arrayValue``, ``kvlistValue``...).
Each span whose ``gen_ai.operation.name`` is a model call (``chat``, ``text_completion``,
``generate_content``; absent in the older conventions) becomes one request; agent and tool spans
and spans without ``gen_ai.*`` attributes are skipped.

The prompt is read from, in order:

- **current conventions** (semantic conventions 1.37 and later, GenAI registry):
  ``gen_ai.input.messages`` -- ``[{"role", "parts": [{"type": "text", "content"}, {"type":
  "tool_call", "id", "name", "arguments"}, {"type": "tool_call_response", "id", "response"}]}]``
  -- with ``gen_ai.system_instructions`` (parts) in front and ``gen_ai.tool.definitions`` as tools;
- **the older form** (1.26-1.27): the span event ``gen_ai.content.prompt`` whose ``gen_ai.prompt``
  attribute holds the OpenAI-shaped messages as JSON (or a ``gen_ai.prompt`` span attribute), and
  the flattened ``gen_ai.prompt.{i}.role`` / ``.content`` attributes some instrumentations write.

Spans are reconstructions of the request (tool-call arguments are re-serialised from objects,
tools are only there when ``gen_ai.tool.definitions`` was recorded), so their token counts are
labelled approximate. Unknown ``gen_ai.*`` attributes, part types and roles are refused (the span
is reported), never guessed at.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import replace
from typing import Any

from prefixplan.core.types import Request
from prefixplan.logs.badline import BadLine, jtype
from prefixplan.logs.envelope import LineContext
from prefixplan.logs.formats import parse_object
from prefixplan.logs.limits import clip_repr

OTEL_FORMAT = "otel-genai"
_MODEL_CALLS = frozenset({"chat", "text_completion", "generate_content"})
_KNOWN_ATTRS = frozenset(
    {
        "gen_ai.system", "gen_ai.provider.name", "gen_ai.operation.name", "gen_ai.input.messages",
        "gen_ai.output.messages", "gen_ai.system_instructions", "gen_ai.prompt", "gen_ai.completion",
        "gen_ai.tool.definitions",
    }
)  # fmt: skip
_KNOWN_FAMILIES = (
    "gen_ai.request.", "gen_ai.response.", "gen_ai.usage.", "gen_ai.agent.", "gen_ai.tool.", "gen_ai.openai.",
    "gen_ai.evaluation.", "gen_ai.embeddings.", "gen_ai.data_source.", "gen_ai.conversation.", "gen_ai.output.",
    "gen_ai.token.", "gen_ai.retrieval.",
)  # fmt: skip
_FLAT = re.compile(r"^gen_ai\.(prompt|completion)\.(\d+)\.([a-z_]+)(?:\.(\d+)\.([a-z_.]+))?$")
_FLAT_FIELDS = ("role", "content", "tool_call_id", "name")
_ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})
CAPTURE_HINT = (
    "the span has no prompt: turn on content capture "
    "(OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT, or the instrumentation's own switch)"
)


def looks_otel(obj: dict[str, Any]) -> bool:
    """An OTLP JSON trace export (``resourceSpans``)."""
    return isinstance(obj.get("resourceSpans"), list)


def any_value(value: Any) -> Any:
    """An OTLP JSON ``AnyValue`` as a Python value (int64 values arrive as strings)."""
    if not isinstance(value, dict):
        return value
    if "stringValue" in value:
        return value["stringValue"]
    if "intValue" in value:
        try:
            return int(value["intValue"])
        except (TypeError, ValueError):
            raise BadLine(f"wrong type: intValue {str(value['intValue'])[:20]!r} is not an integer") from None
    if "doubleValue" in value:
        return float(value["doubleValue"])
    if "boolValue" in value:
        return bool(value["boolValue"])
    if "arrayValue" in value:
        return [any_value(v) for v in (value["arrayValue"] or {}).get("values") or []]
    if "kvlistValue" in value:
        return attributes((value["kvlistValue"] or {}).get("values") or [])
    if "bytesValue" in value:
        return value["bytesValue"]
    return None


def attributes(items: Any) -> dict[str, Any]:
    """``[{"key", "value": AnyValue}]`` as a dict."""
    if not isinstance(items, list):
        raise BadLine(f"wrong type: attributes is {jtype(items)}, expected list")
    out = {}
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("key"), str):
            raise BadLine("wrong type: an attribute is not {key, value}")
        out[item["key"]] = any_value(item.get("value"))
    return out


def parse_otlp(obj: dict[str, Any], ctx: LineContext) -> list[Request | BadLine]:
    """One request per model-call span; a span that cannot be read is a :class:`BadLine` value."""
    out: list[Request | BadLine] = []
    for rs in obj.get("resourceSpans") or []:
        if not isinstance(rs, dict):
            out.append(BadLine("wrong type: a resourceSpans item is not an object"))
            continue
        resource = attributes((rs.get("resource") or {}).get("attributes") or [])
        for ss in rs.get("scopeSpans") or rs.get("instrumentationLibrarySpans") or []:
            for span in (ss or {}).get("spans") or []:
                try:
                    req = _span(span, resource, ctx)
                except BadLine as exc:
                    sid = span.get("spanId") if isinstance(span, dict) else None
                    out.append(BadLine(f"{exc.reason} (span {sid})" if sid else exc.reason))
                    continue
                if req is not None:
                    out.append(req)
    return out


def _span(span: Any, resource: dict[str, Any], ctx: LineContext) -> Request | None:
    if not isinstance(span, dict):
        raise BadLine(f"wrong type: span is {jtype(span)}, expected object")
    attrs = attributes(span.get("attributes") or [])
    genai = [k for k in attrs if k.startswith("gen_ai.")]
    events = span.get("events") or []
    prompt_events = [e for e in events if isinstance(e, dict) and e.get("name") == "gen_ai.content.prompt"]
    if not genai and not prompt_events:
        return None
    for key in genai:
        flat = _FLAT.match(key)
        if flat is not None and flat.group(1) == "prompt" and (flat.group(4) or flat.group(3) not in _FLAT_FIELDS):
            raise BadLine(
                f"unknown field: span attribute {clip_repr(key, 80)} (prompt fields read: {', '.join(_FLAT_FIELDS)})"
            )
        if key not in _KNOWN_ATTRS and not key.startswith(_KNOWN_FAMILIES) and flat is None:
            raise BadLine(
                f"unknown field: span attribute {clip_repr(key, 80)} is not a GenAI convention prefixplan reads"
            )
    operation = attrs.get("gen_ai.operation.name")
    if operation is not None and operation not in _MODEL_CALLS:
        return None  # an agent, tool or embeddings span: not a model call with a prompt
    messages, tools = _prompt(attrs, prompt_events)
    body: dict[str, Any] = {"model": attrs.get("gen_ai.request.model") or attrs.get("gen_ai.response.model")}
    if operation == "text_completion" and len(messages) == 1 and isinstance(messages[0].get("content"), str):
        body["prompt"] = messages[0]["content"]
    else:
        body["messages"] = messages
    if tools:
        body["tools"] = tools
    user = attrs.get("user.id") or attrs.get("enduser.id") or resource.get("enduser.id")
    if isinstance(user, str) and user:
        body["user"] = user
    req = parse_object(body, ctx)[0]
    start = span.get("startTimeUnixNano")
    try:
        stamp = int(start) / 1e9 if start not in (None, "", "0", 0) else None
    except (TypeError, ValueError):
        raise BadLine(f"bad timestamp: startTimeUnixNano {str(start)[:30]!r}") from None
    usage = attrs.get("gen_ai.usage.input_tokens", attrs.get("gen_ai.usage.prompt_tokens"))
    output = attrs.get("gen_ai.request.max_tokens")
    return replace(
        req,
        id=str(span.get("spanId") or req.id),
        format=OTEL_FORMAT,
        time=stamp,
        logged_prompt_tokens=usage if isinstance(usage, int) else None,
        output_length=output if isinstance(output, int) else req.output_length,
    )


def _decode(value: Any, what: str) -> Any:
    """A structured attribute, or one recorded as a JSON string (the conventions allow both)."""
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except ValueError:
        try:  # the 1.26 conventions' own example is a Python-style list
            return ast.literal_eval(value)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            # TypeError: a literal that cannot be built ({[1]: 2}, an unhashable key)
            raise BadLine(f"bad JSON: {what} is not JSON") from None


def _prompt(
    attrs: dict[str, Any], prompt_events: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    tools = [_tool(t) for t in _decode(attrs.get("gen_ai.tool.definitions") or [], "gen_ai.tool.definitions")]
    if "gen_ai.input.messages" in attrs:
        messages: list[dict[str, Any]] = []
        system = attrs.get("gen_ai.system_instructions")
        if system is not None:
            parts = _decode(system, "gen_ai.system_instructions")
            messages.append({"role": "system", "content": _text(parts, "gen_ai.system_instructions")})
        raw = _decode(attrs["gen_ai.input.messages"], "gen_ai.input.messages")
        if not isinstance(raw, list):
            raise BadLine(f"wrong type: gen_ai.input.messages is {jtype(raw)}, expected list")
        for i, msg in enumerate(raw):
            messages.extend(_message(i, msg))
        return messages, tools
    for event in prompt_events:
        ev = attributes(event.get("attributes") or [])
        if "gen_ai.prompt" in ev:
            return _openai_messages(_decode(ev["gen_ai.prompt"], "gen_ai.prompt")), tools
    if "gen_ai.prompt" in attrs:
        return _openai_messages(_decode(attrs["gen_ai.prompt"], "gen_ai.prompt")), tools
    flat = _flattened(attrs)
    if flat:
        return flat, tools
    raise BadLine(f"no prompt: {CAPTURE_HINT}")


def _tool(tool: Any) -> dict[str, Any]:
    if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
        raise BadLine("wrong type: a gen_ai.tool.definitions item has no name")
    fn = {k: tool[k] for k in ("name", "description", "parameters", "strict") if k in tool}
    return {"type": tool.get("type") or "function", "function": fn}


def _text(parts: Any, what: str) -> str:
    if isinstance(parts, str):
        return parts
    if not isinstance(parts, list):
        raise BadLine(f"wrong type: {what} is {jtype(parts)}, expected list of parts")
    texts = []
    for k, part in enumerate(parts):
        if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("content"), str):
            # the part's type, never its text (system instructions may hold anything)
            shape = f"type {clip_repr(part.get('type'), 40)}" if isinstance(part, dict) else jtype(part)
            raise BadLine(f"unsupported: {what} part {k} ({shape}) is not text")
        texts.append(part["content"])
    return "\n".join(texts)


def _arguments(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value if value is not None else {}, ensure_ascii=False)


def _message(i: int, msg: Any) -> list[dict[str, Any]]:
    """One semantic-conventions message as OpenAI chat messages (tool responses: one per part)."""
    if not isinstance(msg, dict):
        raise BadLine(f"wrong type: input message {i} is {jtype(msg)}, expected object")
    role = msg.get("role")
    if role not in _ROLES:
        raise BadLine(f"unknown field: input message {i} role {str(role)[:30]!r}")
    parts = msg.get("parts")
    if not isinstance(parts, list):
        raise BadLine(f"missing field: input message {i} has no parts list")
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    reasoning: list[str] = []
    for j, part in enumerate(parts):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
            texts.append(str(part.get("content", "")))
        elif kind == "tool_call":
            calls.append(
                {
                    "id": part.get("id") or f"call_{i}_{j}",
                    "type": "function",
                    "function": {"name": part.get("name"), "arguments": _arguments(part.get("arguments"))},
                }
            )
        elif kind == "tool_call_response":
            response = part.get("response")
            content = response if isinstance(response, str) else json.dumps(response, ensure_ascii=False)
            results.append({"role": "tool", "tool_call_id": part.get("id"), "content": content})
        elif kind == "reasoning":
            reasoning.append(str(part.get("content", "")))
        elif kind in ("blob", "file_data", "file", "uri"):
            raise BadLine(f"unsupported: input message {i} part {j} is {kind} (media is not rendered)")
        else:
            raise BadLine(f"unknown field: input message {i} part {j} type {str(kind)[:30]!r}")
    if results:
        if texts or calls:
            raise BadLine(f"unsupported: input message {i} mixes tool responses with other parts")
        return results
    out: dict[str, Any] = {"role": role, "content": "\n".join(texts) if texts else (None if calls else "")}
    if calls:
        out["tool_calls"] = calls
    if reasoning:
        out["reasoning_content"] = "\n".join(reasoning)
    return [out]


def _openai_messages(value: Any) -> list[dict[str, Any]]:
    if isinstance(value, dict) and isinstance(value.get("messages"), list):
        value = value["messages"]
    if not isinstance(value, list):
        raise BadLine(f"wrong type: gen_ai.prompt is {jtype(value)}, expected a list of messages")
    return value


def _flattened(attrs: dict[str, Any]) -> list[dict[str, Any]]:
    """``gen_ai.prompt.{i}.role`` / ``.content`` (/ ``.tool_call_id``) attributes as messages."""
    found: dict[int, dict[str, Any]] = {}
    for key, value in attrs.items():
        m = _FLAT.match(key)
        if m is None or m.group(1) != "prompt":
            continue
        found.setdefault(int(m.group(2)), {})[m.group(3)] = value  # fields checked in _span
    return [found[i] for i in sorted(found)]
