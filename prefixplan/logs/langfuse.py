"""Langfuse observations (format ``langfuse``).

Read: one observation per line, or one page per line as the public API returns them
(``{"data": [observation, ...], "meta": {...}}``) -- ``GET /api/public/v2/observations`` (fields of
``ObservationV2`` in the Langfuse Python SDK 5.0.4) and the older ``GET /api/public/observations``
(``Observation`` / ``ObservationsView``, SDK 2.60). ``GENERATION`` observations are model calls and
become requests; ``SPAN``, ``EVENT`` and the other types are skipped.

A generation's ``input`` is what the integration recorded: the messages list, or (Langfuse's OpenAI
integration, when tools or functions are passed) ``{"messages": [...], "tools": [...]}``; a plain
string is a completion prompt. ``model``, ``userId`` (v2), ``startTime`` and ``usageDetails.input``
are taken along. A field outside both schemas is refused (the line is reported with its name).
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from prefixplan.core.types import Request
from prefixplan.logs.badline import BadLine, jtype
from prefixplan.logs.envelope import LineContext
from prefixplan.logs.formats import parse_object
from prefixplan.logs.limits import clip_repr
from prefixplan.logs.times import timestamp_value

LANGFUSE_FORMAT = "langfuse"
SCHEMA_VERSION = "Langfuse public API v2 observations (SDK 5.0.4) and v1 observations (SDK 2.60)"
V1_FIELDS = frozenset(
    {
        "id", "traceId", "type", "name", "startTime", "endTime", "completionStartTime", "model",
        "modelParameters", "input", "version", "metadata", "output", "usage", "level", "statusMessage",
        "parentObservationId", "promptId", "usageDetails", "costDetails", "environment", "promptName",
        "promptVersion", "modelId", "inputPrice", "outputPrice", "totalPrice", "calculatedInputCost",
        "calculatedOutputCost", "calculatedTotalCost", "latency", "timeToFirstToken",
        "unit", "promptTokens", "completionTokens", "totalTokens", "usagePricingTierId",
    }
)  # fmt: skip
V2_FIELDS = V1_FIELDS | frozenset(
    {
        "projectId", "isRootObservation", "bookmarked", "public", "userId", "sessionId", "createdAt",
        "updatedAt", "internalModelId", "totalCost", "usagePricingTierName", "traceName", "tags", "release",
    }
)  # fmt: skip
_INPUT_KEYS = frozenset({"messages", "tools", "functions", "function_call"})


def looks_langfuse(obj: dict[str, Any]) -> bool:
    """An observation (``traceId`` + ``type`` + ``startTime``) or a page of them (``data`` + ``meta``)."""
    if isinstance(obj.get("data"), list) and isinstance(obj.get("meta"), dict):
        first = obj["data"][0] if obj["data"] else None
        return first is None or (isinstance(first, dict) and "traceId" in first and "type" in first)
    return "traceId" in obj and "type" in obj and "startTime" in obj


def parse_langfuse(obj: dict[str, Any], ctx: LineContext) -> list[Request | BadLine]:
    """One request per GENERATION observation of the line (others skipped)."""
    items = obj["data"] if "data" in obj and "meta" in obj else [obj]
    out: list[Request | BadLine] = []
    for k, item in enumerate(items):
        try:
            req = _observation(item, ctx)
        except BadLine as exc:
            oid = item.get("id") if isinstance(item, dict) else None
            out.append(BadLine(f"{exc.reason} (observation {oid or k})"))
            continue
        if req is not None:
            out.append(req)
    return out


def _json_text(data: Any) -> Any:
    """The v2 endpoint returns ``input`` as a raw string: chat messages (or ``{messages, tools}``)
    arrive as their JSON text. Parsed when it is one of those shapes; other text stays a prompt."""
    if not isinstance(data, str) or data[:1] not in ("[", "{"):
        return data
    try:
        parsed = json.loads(data)
    except (ValueError, RecursionError):
        return data
    if isinstance(parsed, list) and parsed and all(isinstance(m, dict) and "role" in m for m in parsed):
        return parsed
    if isinstance(parsed, dict) and isinstance(parsed.get("messages"), list):
        return parsed
    return data


def _observation(item: Any, ctx: LineContext) -> Request | None:
    if not isinstance(item, dict):
        raise BadLine(f"wrong type: observation is {jtype(item)}, expected object")
    unknown = sorted(k for k in item if k not in V2_FIELDS)
    if unknown:
        names = ", ".join(clip_repr(k, 60) for k in unknown[:5])
        raise BadLine(f"unknown field: {names} not in {SCHEMA_VERSION}; not guessing what it holds")
    if item.get("type") != "GENERATION":
        return None
    data = _json_text(item.get("input"))
    body: dict[str, Any] = {"model": item.get("model")}
    if isinstance(data, list):
        body["messages"] = data
    elif isinstance(data, dict) and "messages" in data:
        extra = sorted(k for k in data if k not in _INPUT_KEYS)
        if extra:
            raise BadLine(f"unknown field: input has {', '.join(map(repr, extra[:5]))} besides messages and tools")
        body.update(data)
    elif isinstance(data, str) and data:
        body["prompt"] = data
    elif data is None:
        raise BadLine("no prompt: the generation has no input (masked, or not captured by the integration)")
    else:
        raise BadLine(f"wrong type: input is {jtype(data)}, expected messages, {{messages, tools}} or text")
    params = item.get("modelParameters")
    if isinstance(params, dict):
        for key in ("max_tokens", "max_completion_tokens", "tool_choice"):
            if key in params:
                body[key] = params[key]
    user = item.get("userId")
    if isinstance(user, str) and user:
        body["user"] = user
    req = parse_object(body, ctx)[0]
    try:
        stamp = timestamp_value(item["startTime"]) if item.get("startTime") is not None else None
    except ValueError as exc:
        raise BadLine(f"bad timestamp: startTime: {exc}") from None
    usage = item.get("usageDetails") if isinstance(item.get("usageDetails"), dict) else item.get("usage")
    prompt_tokens = usage.get("input") if isinstance(usage, dict) else None
    return replace(
        req,
        id=str(item.get("id") or req.id),
        format=LANGFUSE_FORMAT,
        time=stamp,
        logged_prompt_tokens=prompt_tokens if isinstance(prompt_tokens, int) else None,
    )
