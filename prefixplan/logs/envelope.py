"""The envelope of a log line (batch wrappers, request/response wrappers) and the fields every
format shares: request id, tenant, model, LoRA, cache salt, usage, time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from prefixplan.logs.anthropic import looks_anthropic
from prefixplan.logs.badline import BadLine, jtype
from prefixplan.logs.limits import MAX_RECORD_TOKENS
from prefixplan.logs.times import find_time

_ID_KEYS = ("custom_id", "id", "request_id")
_TENANT_KEYS = ("tenant", "tenant_id", "user", "user_id")
UINT32 = 1 << 32
_BODY_KEYS = ("messages", "prompt", "input", "hash_ids")


@dataclass(frozen=True, slots=True)
class LineContext:
    """Where a line came from and the options that shape its records."""

    source: str
    line_no: int
    trace_block_size: int = 512
    max_tokens: int = MAX_RECORD_TOKENS  # token ids one request may give


@dataclass(slots=True)
class Envelope:
    outer: dict[str, Any]
    body: dict[str, Any]
    response: dict[str, Any] | None
    batch: str | None  # "openai" | "anthropic" | None
    url: str | None


def unwrap(obj: dict[str, Any]) -> Envelope:
    response = obj.get("response")
    if isinstance(response, dict) and "usage" not in response and isinstance(response.get("body"), dict):
        response = response["body"]
    if not isinstance(response, dict):
        response = None
    body = obj.get("body")
    if isinstance(body, dict) and ("custom_id" in obj or "url" in obj or "method" in obj):
        url = obj.get("url")
        return Envelope(obj, body, response, "openai", url if isinstance(url, str) else None)
    params = obj.get("params")
    if "custom_id" in obj and isinstance(params, dict):
        return Envelope(obj, params, response, "anthropic", None)
    request = obj.get("request")
    if isinstance(request, dict):
        inner = request.get("body")
        if isinstance(inner, dict) and not any(k in request for k in _BODY_KEYS):
            # an HTTP-style record: {"request": {"method", "url", "headers", "body": {...}}}
            url = request.get("url")
            return Envelope(obj, inner, response, None, url if isinstance(url, str) else None)
        return Envelope(obj, request, response, None, None)
    if isinstance(body, dict) and "messages" not in obj and "prompt" not in obj:
        return Envelope(obj, body, response, None, None)
    return Envelope(obj, obj, response, None, None)


def classify(env: Envelope) -> str:
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


def batch_kind(env: Envelope) -> str:
    """Kind of request from the envelope's endpoint URL (batch lines, HTTP records)."""
    url = env.url
    if url is None:
        return classify(env)
    path = url.split("?", 1)[0].rstrip("/")
    if path.endswith("/chat/completions"):
        return "openai-chat"
    if path.endswith("/completions"):
        return "openai-completion"
    if path.endswith("/messages"):
        return "anthropic"
    what = "batch url" if env.batch else "url"
    raise BadLine(f"unsupported: {what} {url[:80]!r} is not a chat, completion or messages endpoint")


# ---------------------------------------------------------------- shared fields


def scalar_str(value: Any) -> str | None:
    if isinstance(value, str) and value:
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return None


def int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def sources_of(env: Envelope) -> tuple[dict[str, Any], ...]:
    return (env.outer,) if env.outer is env.body else (env.outer, env.body)


def request_id(env: Envelope, ctx: LineContext) -> str:
    for obj in (*sources_of(env), env.response or {}):
        for key in _ID_KEYS:
            value = obj.get(key)
            if value is not None:
                found = scalar_str(value)
                if found is not None:
                    return found
    return f"{ctx.source}:{ctx.line_no}"


def tenant_of(env: Envelope) -> str | None:
    for obj in sources_of(env):
        for key in _TENANT_KEYS:
            value = obj.get(key)
            if value is not None:
                found = scalar_str(value)
                if found is not None:
                    return found
        meta = obj.get("metadata")
        if isinstance(meta, dict):
            found = scalar_str(meta.get("user_id"))
            if found is not None:
                return found
    return None


def model_of(env: Envelope) -> str | None:
    for obj in (env.body, env.outer):
        model = obj.get("model")
        if model is None:
            continue
        if not isinstance(model, str):
            raise BadLine(f"wrong type: model is {jtype(model)}, expected string")
        return model
    return None


def lora_of(env: Envelope) -> str | None:
    for obj in sources_of(env)[::-1]:
        for key in ("lora", "lora_request", "lora_name"):
            value = obj.get(key)
            if value is None:
                continue
            if isinstance(value, dict):
                value = value.get("lora_name", value.get("name"))
            found = scalar_str(value)
            if found is not None:
                return found
    return None


def salt_of(env: Envelope) -> str | None:
    for obj in sources_of(env)[::-1]:
        salt = obj.get("cache_salt")
        if isinstance(salt, str) and salt:
            return salt
    return None


def usage_of(env: Envelope) -> dict[str, Any]:
    for obj in (env.response, env.outer, env.body):
        if isinstance(obj, dict) and isinstance(obj.get("usage"), dict):
            return obj["usage"]
    return {}


def request_time(env: Envelope) -> float | None:
    try:
        return find_time(*sources_of(env), env.response)
    except ValueError as exc:
        raise BadLine(f"bad timestamp: {exc}") from None


def common_fields(env: Envelope, ctx: LineContext, label: str) -> dict[str, Any]:
    usage = usage_of(env)
    prompt_tokens = int_or_none(usage.get("prompt_tokens"))
    cached = None
    details = usage.get("prompt_tokens_details")
    if isinstance(details, dict):
        cached = int_or_none(details.get("cached_tokens"))
    if prompt_tokens is None and int_or_none(usage.get("input_tokens")) is not None:  # Anthropic usage
        read = int_or_none(usage.get("cache_read_input_tokens")) or 0
        created = int_or_none(usage.get("cache_creation_input_tokens")) or 0
        prompt_tokens = usage["input_tokens"] + read + created
        cached = read
    output = int_or_none(usage.get("completion_tokens"))
    if output is None:
        output = int_or_none(usage.get("output_tokens"))
    if output is None:
        output = int_or_none(env.body.get("max_completion_tokens"))
    if output is None:
        output = int_or_none(env.body.get("max_tokens"))
    return {
        "source": ctx.source,
        "line_no": ctx.line_no,
        "id": request_id(env, ctx),
        "format": label,
        "time": request_time(env),
        "model": model_of(env),
        "tenant": tenant_of(env),
        "lora": lora_of(env),
        "cache_salt": salt_of(env),
        "logged_prompt_tokens": prompt_tokens,
        "logged_cached_tokens": cached,
        "output_length": output,
    }
