"""One decoded JSON log line -> requests, whichever JSON format it is in.

Gateway and observability records (LiteLLM, OpenTelemetry GenAI spans, Langfuse observations)
are recognised by their own top-level fields before the request-body formats of
:mod:`prefixplan.logs.formats` are tried. A line may hold several requests (an OTLP export
request with many spans, a Langfuse page); a part that cannot be read is returned as a
:class:`~prefixplan.logs.badline.BadLine` value next to the requests that could, so one bad span
does not drop its neighbours.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from prefixplan.core.types import Request
from prefixplan.logs.badline import BadLine, jtype
from prefixplan.logs.envelope import LineContext
from prefixplan.logs.formats import parse_object

Parsed = list[Request | BadLine]
GATEWAY_FORMATS = ("litellm", "otel-genai", "langfuse")
RECONSTRUCTED_FORMATS = {
    "otel-genai": "OpenTelemetry GenAI spans are reconstructions of the request (tool-call arguments "
    "re-serialised; tools only when gen_ai.tool.definitions is recorded)",
}
"""Formats whose requests are rebuilt from a record of them, so their token counts are approximate."""


def detect_record(obj: dict[str, Any]) -> str | None:
    """The gateway/observability format of a JSON object, or None for request-body formats."""
    from prefixplan.logs import langfuse, litellm, otel

    if otel.looks_otel(obj):
        return "otel-genai"
    if litellm.looks_litellm(obj):
        return "litellm"
    if langfuse.looks_langfuse(obj):
        return "langfuse"
    return None


def parse_line(obj: Any, ctx: LineContext, fmt: str = "auto", tenant_field: str | None = None) -> Parsed:
    """Requests (and unreadable parts) of one decoded line; ``fmt`` forces a format.
    ``tenant_field`` (a dotted path, :func:`field_value`) gives every request of the line its
    tenant id instead of the usual keys (``--isolate-by FIELD``).

    Raises:
        BadLine: the whole line is unreadable.
    """
    if not isinstance(obj, dict):
        raise BadLine(f"not an object: line is a JSON {jtype(obj)}")
    parsed = _parse(obj, ctx, fmt)
    if tenant_field is None:
        return parsed
    tenant = field_value(obj, tenant_field)
    return [item if isinstance(item, BadLine) else replace(item, tenant=tenant) for item in parsed]


def field_value(obj: dict[str, Any], path: str) -> str | None:
    """The value at ``path`` (keys joined by dots, a list index as digits: ``metadata.org_id``,
    ``request.headers.x-org-id``) of a record as a tenant id: a non-empty string, or an integer
    as text; None when the path is missing or leads to anything else (an object, a list, a
    boolean, a fraction, null, an empty string)."""
    value: Any = obj
    for key in path.split("."):
        if isinstance(value, dict):
            value = value.get(key)
        elif isinstance(value, list) and key.isdigit() and int(key) < len(value):
            value = value[int(key)]
        else:
            return None
    if isinstance(value, str):
        return value or None
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return None


def _parse(obj: dict[str, Any], ctx: LineContext, fmt: str) -> Parsed:
    kind = detect_record(obj) if fmt == "auto" else (fmt if fmt in GATEWAY_FORMATS else None)
    if kind == "litellm":
        from prefixplan.logs.litellm import parse_litellm

        return list(parse_litellm(obj, ctx))
    if kind == "otel-genai":
        from prefixplan.logs.otel import parse_otlp

        return parse_otlp(obj, ctx)
    if kind == "langfuse":
        from prefixplan.logs.langfuse import parse_langfuse

        return parse_langfuse(obj, ctx)
    return list(parse_object(obj, ctx, fmt))
