"""Turn one decoded JSON log line into :class:`~prefixplan.core.types.Request` records.

Detection is per line (a file may mix shapes); see docs/logs.md for the rules:

1. Envelope: ``{"custom_id", "body", "url"}`` is an OpenAI Batch input line,
   ``{"custom_id", "params"}`` an Anthropic Message Batches line, ``{"request": {...}}``
   (or ``{"body": {...}}``) a wrapper whose ``response`` carries usage; anything else is
   the request body itself.
2. Body: ``hash_ids`` -> mooncake; ``messages`` -> anthropic when Anthropic markers are
   present, else openai-chat; ``prompt`` with ``model`` -> openai-completion; ``prompt``
   or ``input`` without ``model`` -> raw.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from prefixplan.core.types import Request
from prefixplan.logs.anthropic import anthropic_tool, convert, looks_anthropic
from prefixplan.logs.badline import BadLine, jtype
from prefixplan.logs.times import find_time, timestamp_value

CHAT_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})

# Chat request fields kept in ``Request.extra`` because they change what the engine renders
# or are needed to re-send the request.
CHAT_EXTRA_KEYS = (
    "tool_choice",
    "function_call",
    "parallel_tool_calls",
    "chat_template",
    "chat_template_kwargs",
    "add_generation_prompt",
    "continue_final_message",
    "documents",
    "reasoning_effort",
    "response_format",
)

_ID_KEYS = ("custom_id", "id", "request_id")
_TENANT_KEYS = ("tenant", "tenant_id", "user", "user_id")
_UINT32 = 1 << 32
_BODY_KEYS = ("messages", "prompt", "input", "hash_ids")


@dataclass(frozen=True, slots=True)
class LineContext:
    """Where a line came from and the options that shape its records."""

    source: str
    line_no: int
    trace_block_size: int = 512


@dataclass(slots=True)
class _Envelope:
    outer: dict[str, Any]
    body: dict[str, Any]
    response: dict[str, Any] | None
    batch: str | None  # "openai" | "anthropic" | None
    url: str | None


def _unwrap(obj: dict[str, Any]) -> _Envelope:
    response = obj.get("response")
    if isinstance(response, dict) and "usage" not in response and isinstance(response.get("body"), dict):
        response = response["body"]
    if not isinstance(response, dict):
        response = None
    body = obj.get("body")
    if isinstance(body, dict) and ("custom_id" in obj or "url" in obj or "method" in obj):
        url = obj.get("url")
        return _Envelope(obj, body, response, "openai", url if isinstance(url, str) else None)
    params = obj.get("params")
    if "custom_id" in obj and isinstance(params, dict):
        return _Envelope(obj, params, response, "anthropic", None)
    request = obj.get("request")
    if isinstance(request, dict):
        inner = request.get("body")
        if isinstance(inner, dict) and not any(k in request for k in _BODY_KEYS):
            # an HTTP-style record: {"request": {"method", "url", "headers", "body": {...}}}
            url = request.get("url")
            return _Envelope(obj, inner, response, None, url if isinstance(url, str) else None)
        return _Envelope(obj, request, response, None, None)
    if isinstance(body, dict) and "messages" not in obj and "prompt" not in obj:
        return _Envelope(obj, body, response, None, None)
    return _Envelope(obj, obj, response, None, None)


def _classify(env: _Envelope) -> str:
    body = env.body
    if "hash_ids" in body:
        return "mooncake"
    if "messages" in body:
        return "anthropic" if looks_anthropic(body, env.outer) else "openai-chat"
    if "prompt" in body:
        return "openai-completion" if "model" in body else "raw"
    if "input" in body:
        return "raw"
    raise BadLine("missing field: no messages, prompt, input or hash_ids")


def _batch_kind(env: _Envelope) -> str:
    """Kind of request from the envelope's endpoint URL (batch lines, HTTP records)."""
    url = env.url
    if url is None:
        return _classify(env)
    path = url.split("?", 1)[0].rstrip("/")
    if path.endswith("/chat/completions"):
        return "openai-chat"
    if path.endswith("/completions"):
        return "openai-completion"
    if path.endswith("/messages"):
        return "anthropic"
    what = "batch url" if env.batch else "url"
    raise BadLine(f"unsupported: {what} {url[:80]!r} is not a chat, completion or messages endpoint")


def parse_object(obj: Any, ctx: LineContext, fmt: str = "auto") -> list[Request]:
    """Requests for one decoded log line.

    Args:
        obj: the line's JSON value.
        ctx: source, line number and trace block size.
        fmt: ``"auto"`` or one of :data:`prefixplan.core.types.FORMATS` to force a reader.

    Raises:
        BadLine: the line is malformed; ``reason`` says why.
    """
    if not isinstance(obj, dict):
        raise BadLine(f"not an object: line is a JSON {jtype(obj)}")
    env = _unwrap(obj)
    if fmt == "auto":
        if env.batch == "openai":
            kind, label = _batch_kind(env), "openai-batch"
        elif env.batch == "anthropic":
            kind = label = "anthropic"
        elif env.url is not None:
            kind = label = _batch_kind(env)
        else:
            kind = label = _classify(env)
    elif fmt == "openai-batch":
        if env.batch != "openai":
            raise BadLine("missing field: not an OpenAI Batch line (needs custom_id and body)")
        kind, label = _batch_kind(env), "openai-batch"
    else:
        kind = label = fmt
    if kind == "mooncake":
        return [_mooncake(env, ctx, label)]
    if kind == "anthropic":
        return [_anthropic(env, ctx, label)]
    if kind == "openai-chat":
        return [_chat(env, ctx, label)]
    return _completion(env, ctx, label, kind)


# ---------------------------------------------------------------- shared fields


def _scalar_str(value: Any) -> str | None:
    if isinstance(value, str) and value:
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _sources(env: _Envelope) -> tuple[dict[str, Any], ...]:
    return (env.outer,) if env.outer is env.body else (env.outer, env.body)


def _request_id(env: _Envelope, ctx: LineContext) -> str:
    for obj in (*_sources(env), env.response or {}):
        for key in _ID_KEYS:
            value = obj.get(key)
            if value is not None:
                found = _scalar_str(value)
                if found is not None:
                    return found
    return f"{ctx.source}:{ctx.line_no}"


def _tenant(env: _Envelope) -> str | None:
    for obj in _sources(env):
        for key in _TENANT_KEYS:
            value = obj.get(key)
            if value is not None:
                found = _scalar_str(value)
                if found is not None:
                    return found
        meta = obj.get("metadata")
        if isinstance(meta, dict):
            found = _scalar_str(meta.get("user_id"))
            if found is not None:
                return found
    return None


def _model(env: _Envelope) -> str | None:
    for obj in (env.body, env.outer):
        model = obj.get("model")
        if model is None:
            continue
        if not isinstance(model, str):
            raise BadLine(f"wrong type: model is {jtype(model)}, expected string")
        return model
    return None


def _lora(env: _Envelope) -> str | None:
    for obj in _sources(env)[::-1]:
        for key in ("lora", "lora_request", "lora_name"):
            value = obj.get(key)
            if value is None:
                continue
            if isinstance(value, dict):
                value = value.get("lora_name", value.get("name"))
            found = _scalar_str(value)
            if found is not None:
                return found
    return None


def _salt(env: _Envelope) -> str | None:
    for obj in _sources(env)[::-1]:
        salt = obj.get("cache_salt")
        if isinstance(salt, str) and salt:
            return salt
    return None


def _usage(env: _Envelope) -> dict[str, Any]:
    for obj in (env.response, env.outer, env.body):
        if isinstance(obj, dict) and isinstance(obj.get("usage"), dict):
            return obj["usage"]
    return {}


def _time(env: _Envelope) -> float | None:
    try:
        return find_time(*_sources(env), env.response)
    except ValueError as exc:
        raise BadLine(f"bad timestamp: {exc}") from None


def _common(env: _Envelope, ctx: LineContext, label: str) -> dict[str, Any]:
    usage = _usage(env)
    prompt_tokens = _int(usage.get("prompt_tokens"))
    cached = None
    details = usage.get("prompt_tokens_details")
    if isinstance(details, dict):
        cached = _int(details.get("cached_tokens"))
    if prompt_tokens is None and _int(usage.get("input_tokens")) is not None:  # Anthropic usage
        read = _int(usage.get("cache_read_input_tokens")) or 0
        created = _int(usage.get("cache_creation_input_tokens")) or 0
        prompt_tokens = usage["input_tokens"] + read + created
        cached = read
    output = _int(usage.get("completion_tokens"))
    if output is None:
        output = _int(usage.get("output_tokens"))
    if output is None:
        output = _int(env.body.get("max_completion_tokens"))
    if output is None:
        output = _int(env.body.get("max_tokens"))
    return {
        "source": ctx.source,
        "line_no": ctx.line_no,
        "id": _request_id(env, ctx),
        "format": label,
        "time": _time(env),
        "model": _model(env),
        "tenant": _tenant(env),
        "lora": _lora(env),
        "cache_salt": _salt(env),
        "logged_prompt_tokens": prompt_tokens,
        "logged_cached_tokens": cached,
        "output_length": output,
    }


# ---------------------------------------------------------------- chat


def check_message(i: int, msg: Any) -> None:
    """Validate one OpenAI chat message in place (no copy).

    Raises:
        BadLine: the message is malformed.
    """
    if not isinstance(msg, dict):
        raise BadLine(f"wrong type: message {i} is {jtype(msg)}, expected object")
    role = msg.get("role")
    if role is None:
        raise BadLine(f"missing field: message {i} has no role")
    if not isinstance(role, str):
        raise BadLine(f"wrong type: message {i} role is {jtype(role)}, expected string")
    if role not in CHAT_ROLES:
        raise BadLine(f"bad message: message {i} role {role[:40]!r} is not one of {', '.join(sorted(CHAT_ROLES))}")
    content = msg.get("content")
    if isinstance(content, str):
        pass
    elif isinstance(content, list):
        for j, part in enumerate(content):
            if not isinstance(part, dict):
                raise BadLine(f"wrong type: message {i} content part {j} is {jtype(part)}, expected object")
    elif content is None:
        if role != "assistant" or not (
            msg.get("tool_calls") or msg.get("function_call") or msg.get("reasoning_content")
        ):
            raise BadLine(f"missing field: message {i} ({role}) has no content")
    else:
        raise BadLine(f"wrong type: message {i} content is {jtype(content)}, expected string, list or null")
    calls = msg.get("tool_calls")
    if calls is not None:
        if not isinstance(calls, list):
            raise BadLine(f"wrong type: message {i} tool_calls is {jtype(calls)}, expected list")
        for j, call in enumerate(calls):
            if not isinstance(call, dict):
                raise BadLine(f"wrong type: message {i} tool_call {j} is {jtype(call)}, expected object")


def _chat_tool(tool: Any, k: int) -> dict[str, Any]:
    if not isinstance(tool, dict):
        raise BadLine(f"wrong type: tool {k} is {jtype(tool)}, expected object")
    if isinstance(tool.get("function"), dict):
        return tool
    if "input_schema" in tool:
        return anthropic_tool(tool, k)
    if isinstance(tool.get("name"), str) and tool.get("type", "function") == "function":
        # flat function definition (Responses API style or a bare legacy function)
        fn = {key: tool[key] for key in ("name", "description", "parameters", "strict") if key in tool}
        return {"type": "function", "function": fn}
    return tool


def _chat_tools(body: dict[str, Any]) -> tuple[dict[str, Any], ...] | None:
    tools = body.get("tools")
    functions = body.get("functions")
    if tools is None and functions is None:
        return None
    out: list[dict[str, Any]] = []
    if tools is not None:
        if not isinstance(tools, list):
            raise BadLine(f"wrong type: tools is {jtype(tools)}, expected list")
        out.extend(_chat_tool(tool, k) for k, tool in enumerate(tools))
    if functions is not None:
        if not isinstance(functions, list):
            raise BadLine(f"wrong type: functions is {jtype(functions)}, expected list")
        for k, fn in enumerate(functions):
            if not isinstance(fn, dict):
                raise BadLine(f"wrong type: function {k} is {jtype(fn)}, expected object")
            out.append({"type": "function", "function": fn})
    return tuple(out)


def _chat(env: _Envelope, ctx: LineContext, label: str) -> Request:
    body = env.body
    messages = body.get("messages")
    if messages is None:
        raise BadLine("missing field: messages")
    if not isinstance(messages, list):
        raise BadLine(f"wrong type: messages is {jtype(messages)}, expected list")
    if not messages:
        raise BadLine("missing field: messages is empty")
    for i, msg in enumerate(messages):
        check_message(i, msg)
    extra = {key: body[key] for key in CHAT_EXTRA_KEYS if key in body}
    return Request(
        **_common(env, ctx, label),
        messages=tuple(messages),
        tools=_chat_tools(body),
        extra=extra or None,
    )


def _anthropic(env: _Envelope, ctx: LineContext, label: str) -> Request:
    messages, tools, bps, extra = convert(env.body)
    return Request(
        **_common(env, ctx, label),
        messages=tuple(messages),
        tools=tuple(tools) if tools is not None else None,
        breakpoints=tuple(bps),
        extra=extra or None,
    )


# ---------------------------------------------------------------- completions / raw


def _ids(value: list[Any], what: str) -> tuple[int, ...]:
    for k, tok in enumerate(value):
        if not isinstance(tok, int) or isinstance(tok, bool) or not 0 <= tok < _UINT32:
            raise BadLine(f"wrong type: {what} not ints in [0, 2^32) (item {k} is {jtype(tok)} {str(tok)[:20]})")
    return tuple(value)


def _prompts(prompt: Any, key: str) -> list[tuple[str | None, tuple[int, ...] | None]]:
    if isinstance(prompt, str):
        return [(prompt, None)]
    if not isinstance(prompt, list):
        raise BadLine(f"wrong type: {key} is {jtype(prompt)}, expected string or list")
    if not prompt:
        raise BadLine(f"missing field: {key} is empty")
    first = prompt[0]
    if isinstance(first, int) and not isinstance(first, bool):
        return [(None, _ids(prompt, f"{key} ids"))]
    out: list[tuple[str | None, tuple[int, ...] | None]] = []
    for k, item in enumerate(prompt):
        if isinstance(item, str):
            out.append((item, None))
        elif isinstance(item, list):
            if not item:
                raise BadLine(f"missing field: {key} {k} is empty")
            out.append((None, _ids(item, f"{key} {k} ids")))
        else:
            raise BadLine(f"wrong type: {key} {k} is {jtype(item)}, expected string or token ids")
    return out


def _completion(env: _Envelope, ctx: LineContext, label: str, kind: str) -> list[Request]:
    body = env.body
    key = "prompt" if "prompt" in body or kind == "openai-completion" else "input"
    if body.get(key) is None:
        raise BadLine("missing field: prompt" if kind == "openai-completion" else "missing field: prompt or input")
    prompts = _prompts(body[key], key)
    common = _common(env, ctx, label)
    base = common.pop("id")
    many = len(prompts) > 1
    return [
        Request(
            **common,
            id=f"{base}#{k}" if many else base,
            prompt=text,
            prompt_ids=ids,
            input_length=len(ids) if ids is not None else None,
        )
        for k, (text, ids) in enumerate(prompts)
    ]


# ---------------------------------------------------------------- mooncake


def _mooncake(env: _Envelope, ctx: LineContext, label: str) -> Request:
    body = env.body
    hash_ids = body.get("hash_ids")
    if hash_ids is None:
        raise BadLine("missing field: hash_ids")
    if not isinstance(hash_ids, list):
        raise BadLine(f"wrong type: hash_ids is {jtype(hash_ids)}, expected list")
    for k, h in enumerate(hash_ids):
        if not isinstance(h, int) or isinstance(h, bool):
            raise BadLine(f"wrong type: hash_ids not ints (item {k} is {jtype(h)})")
    lengths = {}
    for key in ("input_length", "output_length"):
        value = body.get(key)
        if value is not None and _int(value) is None:
            raise BadLine(f"wrong type: {key} is {jtype(value)}, expected integer")
        lengths[key] = value
    stamp = body.get("timestamp")
    time = None
    if stamp is not None:
        try:
            time = (
                float(stamp) / 1000.0
                if isinstance(stamp, (int, float)) and not isinstance(stamp, bool)
                else timestamp_value(stamp)
            )
        except ValueError as exc:
            raise BadLine(f"bad timestamp: field 'timestamp': {exc}") from None
    return Request(
        source=ctx.source,
        line_no=ctx.line_no,
        id=_request_id(env, ctx),
        format=label,
        time=time,
        model=_model(env),
        tenant=_tenant(env),
        lora=_lora(env),
        cache_salt=_salt(env),
        hash_ids=tuple(hash_ids),
        trace_block_size=ctx.trace_block_size,
        input_length=lengths["input_length"],
        output_length=lengths["output_length"],
    )


__all__ = ["BadLine", "LineContext", "check_message", "parse_object"]
