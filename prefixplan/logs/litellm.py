"""LiteLLM proxy logs (format ``litellm``): StandardLoggingPayload lines and LiteLLM_SpendLogs rows.

Schemas as of litellm 1.110.2 (``litellm/types/utils.py`` ``StandardLoggingPayload``; the
``LiteLLM_SpendLogs`` table of ``litellm/proxy/schema.prisma`` and ``SpendLogsPayload`` of
``litellm/proxy/_types.py``):

- a **StandardLoggingPayload** (what LiteLLM hands every logging callback as
  ``kwargs["standard_logging_object"]``, and what its file/bucket loggers write, one per line)
  carries ``messages``, the request's optional parameters in ``model_parameters`` (``tools``,
  ``tool_choice``, ``max_tokens`` ...), ``model``, ``end_user``, ``startTime`` (epoch seconds),
  ``prompt_tokens``;
- a **spend-log row** (a Postgres export of ``LiteLLM_SpendLogs``, e.g. ``row_to_json``, or a
  ``SpendLogsPayload``) carries ``request_id``, ``startTime`` (ISO time), ``user``/``end_user``,
  ``model``, and the prompt in ``messages`` or ``proxy_server_request`` only when the proxy runs
  with ``general_settings: store_prompts_in_spend_logs: true``.

A field outside these schemas is refused (the line is reported with the field's name) rather
than guessed at: a newer LiteLLM may have moved the prompt.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from prefixplan.core.types import Request
from prefixplan.logs.badline import BadLine, jtype
from prefixplan.logs.envelope import LineContext, int_or_none
from prefixplan.logs.formats import parse_object
from prefixplan.logs.times import timestamp_value

LITELLM_FORMAT = "litellm"
SCHEMA_VERSION = "litellm 1.110.2"
PAYLOAD_FIELDS = frozenset(
    {
        "id", "trace_id", "session_id", "litellm_call_id", "call_type", "stream", "response_cost",
        "cost_breakdown", "cost_finalized", "autorouter_savings", "autorouter_savings_estimate",
        "autorouter_baseline_observation", "response_cost_failure_debug_info", "zero_cost_diagnostic",
        "status", "status_fields", "custom_llm_provider", "total_tokens", "prompt_tokens",
        "completion_tokens", "startTime", "endTime", "completionStartTime", "response_time",
        "model_map_information", "model", "model_id", "model_group", "api_base", "metadata",
        "cache_hit", "cache_key", "saved_cache_cost", "request_tags", "request_model_access_groups",
        "end_user", "requester_ip_address", "user_agent", "messages", "response", "error_str",
        "error_information", "model_parameters", "hidden_params", "guardrail_information",
        "standard_built_in_tools_params", "classifier_input", "originating_request_masked",
    }
)  # fmt: skip
SPEND_FIELDS = frozenset(
    {
        "request_id", "call_type", "api_key", "spend", "total_tokens", "prompt_tokens",
        "completion_tokens", "startTime", "endTime", "request_duration_ms", "completionStartTime",
        "model", "model_id", "model_group", "custom_llm_provider", "api_base", "user", "metadata",
        "cache_hit", "cache_key", "request_tags", "team_id", "organization_id", "end_user",
        "requester_ip_address", "messages", "response", "session_id", "status",
        "mcp_namespaced_tool_name", "billing_agent_id", "agent_id", "proxy_server_request",
        "litellm_call_id", "created_at", "updated_at", "accounting_payload", "accounting_log_disabled",
        "accounting_delivery_id",
    }
)  # fmt: skip
_CHAT_CALLS = frozenset({"completion", "acompletion"})
_TEXT_CALLS = frozenset({"text_completion", "atext_completion"})
_PARAM_KEYS = (
    "tools",
    "functions",
    "tool_choice",
    "parallel_tool_calls",
    "max_tokens",
    "max_completion_tokens",
    "reasoning_effort",
    "response_format",
)
STORE_HINT = "LiteLLM keeps prompts in spend logs only with general_settings: store_prompts_in_spend_logs: true"


def looks_litellm(obj: dict[str, Any]) -> bool:
    """A StandardLoggingPayload (``call_type`` + ``startTime`` + ``trace_id``/``model_parameters``)
    or a spend-log row (``call_type`` + ``request_id`` + ``spend``)."""
    if "call_type" not in obj:
        return False
    payload = "startTime" in obj and ("trace_id" in obj or "model_parameters" in obj or "hidden_params" in obj)
    return payload or ("request_id" in obj and "spend" in obj)


def _json_value(value: Any, what: str) -> Any:
    """A JSON column that an export may give as an object or as a JSON string."""
    if isinstance(value, str) and value[:1] in ("{", "["):
        try:
            return json.loads(value)
        except ValueError:
            raise BadLine(f"bad JSON: {what} is a string that is not JSON") from None
    return value


def _refuse_unknown(obj: dict[str, Any], known: frozenset[str], schema: str) -> None:
    unknown = sorted(k for k in obj if k not in known)
    if unknown:
        names = ", ".join(repr(k) for k in unknown[:5]) + (" ..." if len(unknown) > 5 else "")
        raise BadLine(
            f"unknown field: {names} not in LiteLLM's {schema} ({SCHEMA_VERSION}); not guessing what it holds"
        )


def parse_litellm(obj: dict[str, Any], ctx: LineContext) -> Iterator[Request]:
    """The request of one LiteLLM record (raises :class:`BadLine` when it has none or is not understood)."""
    if "request_id" in obj and "spend" in obj:
        _refuse_unknown(obj, SPEND_FIELDS, "LiteLLM_SpendLogs row")
        yield _spend_row(obj, ctx)
    else:
        _refuse_unknown(obj, PAYLOAD_FIELDS, "StandardLoggingPayload")
        yield _payload(obj, ctx)


def _call_kind(obj: dict[str, Any]) -> str:
    call = obj.get("call_type")
    if not isinstance(call, str):
        raise BadLine(f"wrong type: call_type is {jtype(call)}, expected string")
    if call in _CHAT_CALLS:
        return "chat"
    if call in _TEXT_CALLS:
        return "text"
    raise BadLine(f"unsupported: call_type {call[:40]!r} is not a chat or text completion")


def _request(body: dict[str, Any], obj: dict[str, Any], ctx: LineContext, rid: Any, start: Any) -> Request:
    reqs = parse_object(body, ctx)
    try:
        stamp = timestamp_value(start) if start is not None else None
    except ValueError as exc:
        raise BadLine(f"bad timestamp: startTime: {exc}") from None
    prompt_tokens = int_or_none(obj.get("prompt_tokens"))
    return replace(
        reqs[0],
        id=str(rid) if rid else reqs[0].id,
        format=LITELLM_FORMAT,
        time=stamp,
        logged_prompt_tokens=prompt_tokens or None,
        output_length=int_or_none(obj.get("completion_tokens")) or reqs[0].output_length,
    )


def _payload(obj: dict[str, Any], ctx: LineContext) -> Request:
    kind = _call_kind(obj)
    messages = _json_value(obj.get("messages"), "messages")
    if messages is None or messages == "redacted-by-litellm" or messages == [] or messages == {}:
        raise BadLine("no prompt: messages are empty or redacted (litellm turn_off_message_logging)")
    params = obj.get("model_parameters") or {}
    if not isinstance(params, dict):
        raise BadLine(f"wrong type: model_parameters is {jtype(params)}, expected object")
    body: dict[str, Any] = {k: params[k] for k in _PARAM_KEYS if k in params}
    body["model"] = obj.get("model") or obj.get("model_group")
    if kind == "chat":
        if not isinstance(messages, list):
            raise BadLine(f"wrong type: messages is {jtype(messages)}, expected list")
        body["messages"] = messages
    else:
        body["prompt"] = messages if isinstance(messages, (str, list)) else json.dumps(messages)
    meta_value = obj.get("metadata")
    meta: dict[str, Any] = meta_value if isinstance(meta_value, dict) else {}
    user = (
        obj.get("end_user")
        or params.get("user")
        or meta.get("user_api_key_end_user_id")
        or meta.get("user_api_key_user_id")
    )
    if isinstance(user, str) and user:
        body["user"] = user
    return _request(body, obj, ctx, obj.get("id") or obj.get("litellm_call_id"), obj.get("startTime"))


def _spend_row(obj: dict[str, Any], ctx: LineContext) -> Request:
    kind = _call_kind(obj)
    proxy = _json_value(obj.get("proxy_server_request"), "proxy_server_request")
    messages = _json_value(obj.get("messages"), "messages")
    body: dict[str, Any] = {}
    if isinstance(proxy, dict) and isinstance(proxy.get("body"), dict):
        proxy = proxy["body"]  # {"url", "method", "headers", "body"} in some versions
    if isinstance(proxy, dict) and ("messages" in proxy or "prompt" in proxy):
        body = {
            k: v for k, v in proxy.items() if k in ("model", "messages", "prompt", "user", "cache_salt", *_PARAM_KEYS)
        }
    elif messages not in (None, {}, [], ""):
        body = {"messages" if kind == "chat" else "prompt": messages}
    else:
        raise BadLine(f"no prompt: the spend-log row has no messages or proxy_server_request; {STORE_HINT}")
    body["model"] = body.get("model") or obj.get("model_group") or obj.get("model")
    user = obj.get("end_user") or obj.get("user")
    if isinstance(user, str) and user and "user" not in body:
        body["user"] = user
    return _request(body, obj, ctx, obj.get("request_id"), obj.get("startTime"))
