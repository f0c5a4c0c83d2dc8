#!/usr/bin/env python3
"""Write the gateway / observability log fixtures with each project's own SDK, offline.

    python3 -m venv /tmp/fx && /tmp/fx/bin/pip install -r scripts/gateway-fixtures-requirements.txt
    /tmp/fx/bin/python scripts/make_gateway_fixtures.py --out tests/data/logs

One request set (three model families -- Qwen3 with tools and a tool-call turn, Llama 3, DeepSeek-V3
-- several users, shared system prompts) is sent through:

- **LiteLLM 1.110.2**: ``litellm.completion(..., mock_response=...)`` (no network) with a logging
  callback that keeps ``kwargs["standard_logging_object"]`` (StandardLoggingPayload lines), and the
  proxy's own ``get_logging_payload`` for the LiteLLM_SpendLogs rows it would insert (prompts
  stored: ``store_prompts_in_spend_logs``);
- **OpenTelemetry** (``opentelemetry-instrumentation-openai-v2`` with
  ``OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental`` and content capture on spans) around
  the OpenAI client talking to a local stand-in server; spans encoded by the OTLP exporter's own
  encoder and written as OTLP JSON (trace and span ids in hex, as the OTLP JSON encoding and the
  collector's file exporter write them), one export request per line;
- the **older GenAI form** (semantic conventions 1.26-1.27): the same calls as SDK spans with a
  ``gen_ai.content.prompt`` event whose ``gen_ai.prompt`` attribute holds the messages as JSON;
- **Langfuse** 5.0.4: ``ObservationV2`` objects of the SDK's API client (the shape of
  ``GET /api/public/v2/observations``), with ``input`` made by the SDK's OpenAI integration
  (``langfuse.openai._extract_chat_prompt``), serialised by the SDK, one page per line.

Nothing is downloaded at run time (``LITELLM_LOCAL_MODEL_COST_MAP=True``).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import random
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ["OTEL_SEMCONV_STABILITY_OPT_IN"] = "gen_ai_latest_experimental"
os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "SPAN_ONLY"

MODELS = {
    "qwen": "Qwen/Qwen3-8B",
    "llama": "meta-llama/Meta-Llama-3-8B-Instruct",
    "deepseek": "deepseek-ai/DeepSeek-V3",
}
_WORDS = [
    "account",
    "billing",
    "invoice",
    "refund",
    "order",
    "shipment",
    "tracking",
    "warehouse",
    "policy",
    "customer",
    "agent",
    "escalate",
    "summary",
    "ticket",
    "priority",
    "region",
    "latency",
    "cache",
    "prefix",
    "token",
    "server",
    "replica",
    "deploy",
    "rollback",
    "config",
]


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(words)).capitalize() + "."


def request_set() -> list[dict[str, Any]]:
    """Chat requests (OpenAI shape) with ``model``, ``user`` and, for Qwen3, ``tools``."""
    rng = random.Random(7)
    tools = [
        {
            "type": "function",
            "function": {
                "name": "lookup_order",
                "description": "Find an order by id.",
                "parameters": {
                    "type": "object",
                    "properties": {"order_id": {"type": "string"}},
                    "required": ["order_id"],
                },
            },
        }
    ]
    out: list[dict[str, Any]] = []
    for family, model in MODELS.items():
        system = f"You are the {family} assistant of an online shop. " + _text(rng, 120)
        for k in range(4):
            question = {"role": "user", "content": f"Question {k}: " + _text(rng, 15 + 5 * k)}
            req: dict[str, Any] = {
                "model": model,
                "messages": [{"role": "system", "content": system}, question],
                "user": f"user-{k % 3}",
                "max_tokens": 8,
            }
            if family == "qwen":
                req["tools"] = tools
                if k == 3:
                    call = {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "lookup_order", "arguments": '{"order_id": "A-1"}'},
                    }
                    req["messages"] += [
                        {"role": "assistant", "content": None, "tool_calls": [call]},
                        {"role": "tool", "tool_call_id": "call_1", "content": "Order A-1: shipped."},
                    ]
            out.append(req)
    return out


def litellm_fixtures(requests: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    import litellm
    from litellm.integrations.custom_logger import CustomLogger

    calls: list[tuple[Any, ...]] = []

    class Keep(CustomLogger):
        def log_success_event(self, kwargs: Any, response_obj: Any, start_time: Any, end_time: Any) -> None:
            calls.append((kwargs, response_obj, start_time, end_time))

    litellm.callbacks = [Keep()]
    for req in requests:
        body = dict(req)
        model = body.pop("model")
        # proxy_server_request is what the proxy passes along with each call (the HTTP request it
        # received); its spend logs store that body when store_prompts_in_spend_logs is on
        http = {"url": "http://0.0.0.0:4000/v1/chat/completions", "method": "POST", "headers": {}, "body": dict(req)}
        litellm.completion(
            model=f"hosted_vllm/{model}",
            api_base="http://127.0.0.1:9/v1",
            mock_response="ok",
            proxy_server_request=http,
            **body,
        )
    import time

    time.sleep(1.0)  # success callbacks run on a worker thread
    from litellm.proxy import proxy_server
    from litellm.proxy.spend_tracking.spend_tracking_utils import get_logging_payload

    proxy_server.general_settings["store_prompts_in_spend_logs"] = True  # general_settings of proxy_config.yaml
    payloads = [json.loads(json.dumps(c[0]["standard_logging_object"], default=str)) for c in calls]
    rows = [
        json.loads(
            json.dumps(get_logging_payload(kwargs=c[0], response_obj=c[1], start_time=c[2], end_time=c[3]), default=str)
        )
        for c in calls
    ]
    return payloads, rows


class _FakeOpenAI(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        resp = {
            "id": "chatcmpl-fixture",
            "object": "chat.completion",
            "created": 1,
            "model": body["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 1, "total_tokens": 101},
        }
        data = json.dumps(resp).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


def _hex_ids(node: Any) -> Any:
    """OTLP JSON writes trace/span ids as hex strings (protobuf's JSON mapping would give base64)."""
    if isinstance(node, dict):
        return {
            k: (
                base64.b64decode(v).hex()
                if k in ("traceId", "spanId", "parentSpanId") and isinstance(v, str) and v
                else _hex_ids(v)
            )
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [_hex_ids(v) for v in node]
    return node


def _otlp_lines(spans: list[Any], per_line: int) -> list[dict[str, Any]]:
    from google.protobuf.json_format import MessageToDict
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    return [_hex_ids(MessageToDict(encode_spans(spans[i : i + per_line]))) for i in range(0, len(spans), per_line)]


def otel_fixtures(requests: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    import openai
    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import SpanKind

    server = ThreadingHTTPServer(("127.0.0.1", 0), _FakeOpenAI)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    provider = TracerProvider(resource=Resource.create({"service.name": "shop-assistant"}))
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    OpenAIInstrumentor().instrument(tracer_provider=provider)
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{server.server_port}/v1", api_key="fixture")
    for req in requests:
        client.chat.completions.create(**req)
    OpenAIInstrumentor().uninstrument()
    current = _otlp_lines(list(exporter.get_finished_spans()), 4)

    legacy_provider = TracerProvider(resource=Resource.create({"service.name": "shop-assistant-legacy"}))
    legacy_exporter = InMemorySpanExporter()
    legacy_provider.add_span_processor(SimpleSpanProcessor(legacy_exporter))
    tracer = legacy_provider.get_tracer("shop.genai", "1.0")
    for req in requests:
        attrs = {
            "gen_ai.system": "openai",
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": req["model"],
            "gen_ai.request.max_tokens": req["max_tokens"],
            "gen_ai.usage.input_tokens": 100,
            "gen_ai.usage.output_tokens": 1,
        }
        with tracer.start_as_current_span(f"chat {req['model']}", kind=SpanKind.CLIENT, attributes=attrs) as span:
            span.add_event("gen_ai.content.prompt", {"gen_ai.prompt": json.dumps(req["messages"])})
            span.add_event(
                "gen_ai.content.completion", {"gen_ai.completion": json.dumps([{"role": "assistant", "content": "ok"}])}
            )
    legacy = _otlp_lines(list(legacy_exporter.get_finished_spans()), 6)
    server.shutdown()
    return current, legacy


def langfuse_fixture(requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    import datetime as dt

    from langfuse.api.commons.types.observation_v2 import ObservationV2
    from langfuse.openai import _extract_chat_prompt  # the SDK's own OpenAI-integration input

    start = dt.datetime(2025, 11, 3, 9, 0, 0, tzinfo=dt.timezone.utc)
    observations = []
    for i, req in enumerate(requests):
        trace = f"trace-{i // 2:03d}"
        t0 = start + dt.timedelta(seconds=7 * i)
        if i % 4 == 0:  # a span around the generation, as agents write them
            observations.append(
                ObservationV2(
                    id=f"span-{i:03d}",
                    trace_id=trace,
                    type="SPAN",
                    name="handle-request",
                    start_time=t0,
                    project_id="proj-shop",
                )
            )
        params = {k: v for k, v in req.items() if k in ("max_tokens",)}
        observations.append(
            ObservationV2(
                id=f"gen-{i:03d}",
                trace_id=trace,
                type="GENERATION",
                name="OpenAI-generation",
                start_time=t0,
                end_time=t0 + dt.timedelta(seconds=1),
                project_id="proj-shop",
                user_id=req["user"],
                model=req["model"],
                model_parameters=params,
                input=_extract_chat_prompt(req),
                output={"role": "assistant", "content": "ok"},
                usage_details={"input": 100, "output": 1, "total": 101},
                environment="production",
            )
        )
    rows = [o.model_dump(by_alias=True, mode="json", exclude_none=True) for o in observations]
    pages = []
    for i in range(0, len(rows), 5):
        pages.append({"data": rows[i : i + 5], "meta": {"cursor": f"page-{i // 5 + 1}" if i + 5 < len(rows) else None}})
    return pages


def _write(path: Path, items: list[dict[str, Any]]) -> None:
    path.write_text(
        "".join(json.dumps(item, ensure_ascii=False, sort_keys=False) + "\n" for item in items), encoding="utf-8"
    )
    print(f"{path}: {len(items)} lines")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    requests = request_set()
    payloads, rows = litellm_fixtures(requests)
    _write(args.out / "litellm-1.110.2-payloads.jsonl", payloads)
    _write(args.out / "litellm-1.110.2-spendlogs.jsonl", rows)
    current, legacy = otel_fixtures(requests)
    _write(args.out / "otel-genai-current.jsonl", current)
    _write(args.out / "otel-genai-legacy.jsonl", legacy)
    _write(args.out / "langfuse-observations.jsonl", langfuse_fixture(requests))
    return 0


if __name__ == "__main__":
    sys.exit(main())
