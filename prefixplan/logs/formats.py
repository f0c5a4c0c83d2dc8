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

import math
from typing import Any

from prefixplan.core.types import Request
from prefixplan.logs.anthropic import anthropic_tool, convert
from prefixplan.logs.badline import BadLine, jtype
from prefixplan.logs.envelope import (
    UINT32,
    Envelope,
    LineContext,
    batch_kind,
    classify,
    common_fields,
    int_or_none,
    lora_of,
    model_of,
    request_id,
    salt_of,
    tenant_of,
    unwrap,
)
from prefixplan.logs.times import timestamp_value

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
    env = unwrap(obj)
    if fmt == "auto":
        if env.batch == "openai":
            kind, label = batch_kind(env), "openai-batch"
        elif env.batch == "anthropic":
            kind = label = "anthropic"
        elif env.url is not None:
            kind = label = batch_kind(env)
        else:
            kind = label = classify(env)
    elif fmt == "openai-batch":
        if env.batch != "openai":
            raise BadLine("missing field: not an OpenAI Batch line (needs custom_id and body)")
        kind, label = batch_kind(env), "openai-batch"
    else:
        kind = label = fmt
    if kind == "mooncake":
        return [_mooncake(env, ctx, label)]
    if kind == "anthropic":
        return [_anthropic(env, ctx, label)]
    if kind == "openai-chat":
        return [_chat(env, ctx, label)]
    return _completion(env, ctx, label, kind)


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
            if part.get("type", "text") == "text" and "text" in part and not isinstance(part["text"], str):
                raise BadLine(
                    f"wrong type: message {i} content part {j} text is {jtype(part['text'])}, expected string"
                )
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


def _chat(env: Envelope, ctx: LineContext, label: str) -> Request:
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
        **common_fields(env, ctx, label),
        messages=tuple(messages),
        tools=_chat_tools(body),
        extra=extra or None,
    )


def _anthropic(env: Envelope, ctx: LineContext, label: str) -> Request:
    messages, tools, bps, extra = convert(env.body)
    return Request(
        **common_fields(env, ctx, label),
        messages=tuple(messages),
        tools=tuple(tools) if tools is not None else None,
        breakpoints=tuple(bps),
        extra=extra or None,
    )


# ---------------------------------------------------------------- completions / raw


def _ids(value: list[Any], what: str, limit: int) -> tuple[int, ...]:
    if len(value) > limit:
        raise BadLine(f"too many tokens: {what}: {len(value):,} > max_record_tokens {limit:,} (skipped)")
    for k, tok in enumerate(value):
        if not isinstance(tok, int) or isinstance(tok, bool) or not 0 <= tok < UINT32:
            raise BadLine(f"wrong type: {what} not ints in [0, 2^32) (item {k} is {jtype(tok)} {str(tok)[:20]})")
    return tuple(value)


def _prompts(prompt: Any, key: str, limit: int) -> list[tuple[str | None, tuple[int, ...] | None]]:
    if isinstance(prompt, str):
        return [(prompt, None)]
    if not isinstance(prompt, list):
        raise BadLine(f"wrong type: {key} is {jtype(prompt)}, expected string or list")
    if not prompt:
        raise BadLine(f"missing field: {key} is empty")
    first = prompt[0]
    if isinstance(first, int) and not isinstance(first, bool):
        return [(None, _ids(prompt, f"{key} ids", limit))]
    out: list[tuple[str | None, tuple[int, ...] | None]] = []
    for k, item in enumerate(prompt):
        if isinstance(item, str):
            out.append((item, None))
        elif isinstance(item, list):
            if not item:
                raise BadLine(f"missing field: {key} {k} is empty")
            out.append((None, _ids(item, f"{key} {k} ids", limit)))
        else:
            raise BadLine(f"wrong type: {key} {k} is {jtype(item)}, expected string or token ids")
    return out


def _completion(env: Envelope, ctx: LineContext, label: str, kind: str) -> list[Request]:
    body = env.body
    key = "prompt" if "prompt" in body or kind == "openai-completion" else "input"
    if body.get(key) is None:
        raise BadLine("missing field: prompt" if kind == "openai-completion" else "missing field: prompt or input")
    prompts = _prompts(body[key], key, ctx.max_tokens)
    common = common_fields(env, ctx, label)
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


def _clip(n: int) -> str:
    """An integer as a message shows it (a 400-digit number would fill the terminal)."""
    text = str(n)
    return text if len(text) <= 24 else f"{text[:12]}…({len(text)} digits)"


def _mooncake(env: Envelope, ctx: LineContext, label: str) -> Request:
    body = env.body
    hash_ids = body.get("hash_ids")
    if hash_ids is None:
        raise BadLine("missing field: hash_ids")
    if not isinstance(hash_ids, list):
        raise BadLine(f"wrong type: hash_ids is {jtype(hash_ids)}, expected list")
    if len(hash_ids) > ctx.max_tokens:
        raise BadLine(f"too many tokens: hash_ids: {len(hash_ids):,} > max_record_tokens {ctx.max_tokens:,} (skipped)")
    for k, h in enumerate(hash_ids):
        if not isinstance(h, int) or isinstance(h, bool):
            raise BadLine(f"wrong type: hash_ids not ints (item {k} is {jtype(h)})")
        if not 0 <= h < UINT32:  # block ids are uint32 in the trace (and in the radix tree)
            raise BadLine(f"bad value: hash_ids[{k}] = {_clip(h)} is outside 0..4294967295")
    lengths = {}
    for key in ("input_length", "output_length"):
        value = body.get(key)
        n = int_or_none(value) if value is not None else None
        if value is not None and n is None:
            raise BadLine(f"wrong type: {key} is {jtype(value)}, expected integer")
        if n is not None and not 0 <= n < 2**40:
            raise BadLine(f"bad value: {key} = {_clip(n)} is outside 0..2^40")
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
        except (ValueError, OverflowError) as exc:
            raise BadLine(f"bad timestamp: field 'timestamp': {exc}") from None
        if time is not None and not math.isfinite(time):
            raise BadLine(f"bad timestamp: field 'timestamp' is {time}")
    return Request(
        source=ctx.source,
        line_no=ctx.line_no,
        id=request_id(env, ctx),
        format=label,
        time=time,
        model=model_of(env),
        tenant=tenant_of(env),
        lora=lora_of(env),
        cache_salt=salt_of(env),
        hash_ids=tuple(hash_ids),
        trace_block_size=ctx.trace_block_size,
        input_length=lengths["input_length"],
        output_length=lengths["output_length"],
    )


__all__ = ["check_message", "parse_object"]
