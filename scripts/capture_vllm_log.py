#!/usr/bin/env python3
"""Capture a real vLLM request log: send a fixed set of chat requests to a running server started
with ``--enable-log-requests`` at DEBUG level, then keep its log's lines for those requests.

    python scripts/capture_vllm_log.py --out tests/data/logs/vllm-0.32-debug.log.gz   # starts its own server
    python scripts/capture_vllm_log.py --url http://127.0.0.1:8011 --log SERVER.LOG --out FILE

The live tests (tests/live/test_logs_live.py) call :func:`send_requests` and :func:`extract`
against the session's server; the committed fixture for the unit tests is this script's output,
so the vLLM log parser is tested against what the engine really writes, not against lines typed
by hand. The requests are generated (no third-party text): two applications with their own
system prompt and tools, multi-turn conversations with tool calls and results, a cache salt, a
completions request with an ``X-Request-Id`` header, and long requests that ``--max-log-len``
(:data:`MAX_LOG_LEN`) cuts.

Stdlib only: importable from the test suite under any interpreter.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
MAX_LOG_LEN = 6000
SERVER_FLAGS = ["--enable-log-requests", "--max-log-len", str(MAX_LOG_LEN)]
SERVER_ENV = {"VLLM_LOGGING_LEVEL": "DEBUG"}
ID_PREFIX = "pplog-"
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
    "schema",
    "field",
    "value",
    "record",
    "query",
    "index",
    "report",
    "dashboard",
    "metric",
    "alert",
    "window",
    "budget",
    "quota",
    "limit",
    "request",
    "response",
    "retry",
    "backoff",
    "timeout",
    "session",
    "user",
    "team",
    "project",
    "branch",
    "commit",
    "review",
    "test",
    "build",
]


def _text(rng: random.Random, words: int) -> str:
    out, line = [], []
    for _ in range(words):
        line.append(rng.choice(_WORDS))
        if len(line) >= 12:
            out.append(" ".join(line).capitalize() + ".")
            line = []
    if line:
        out.append(" ".join(line).capitalize() + ".")
    return "\n".join(out)


def _tool(name: str, desc: str, props: dict[str, str]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": desc,
            "parameters": {
                "type": "object",
                "properties": {k: {"type": "string", "description": v} for k, v in props.items()},
                "required": list(props)[:1],
            },
        },
    }


def requests(model: str) -> list[dict[str, Any]]:
    """The captured request set: ``{"id", "body", "headers", "path", "long"}`` per request, in send order.

    ``long`` requests have more than :data:`MAX_LOG_LEN` prompt tokens, so the log cuts them.
    """
    rng = random.Random(13)
    apps = {
        "support": (
            "You are the support assistant of an online shop.\n" + _text(rng, 220),
            [
                _tool("lookup_order", "Find an order by id.", {"order_id": "The order id"}),
                _tool("refund", "Refund an order.", {"order_id": "The order id", "reason": "Why"}),
                _tool("escalate", "Hand the ticket to a person.", {"ticket": "Ticket id"}),
            ],
        ),
        "coder": (
            "You are a code review assistant for a platform team.\n" + _text(rng, 320),
            [
                _tool("read_file", "Read a file of the repository.", {"path": "File path"}),
                _tool("run_tests", "Run the test suite.", {"target": "Test target"}),
            ],
        ),
    }
    out: list[dict[str, Any]] = []

    def add(app: str, messages: list[dict[str, Any]], *, salt: str | None = None, long: bool = False) -> None:
        system, tools = apps[app]
        body: dict[str, Any] = {
            "model": model,
            "messages": [{"role": "system", "content": system}, *messages],
            "tools": tools,
            "max_tokens": 1,
            "request_id": f"{ID_PREFIX}{len(out):02d}",
        }
        if salt:
            body["cache_salt"] = salt
        out.append(
            {"id": body["request_id"], "body": body, "headers": {}, "path": "/v1/chat/completions", "long": long}
        )

    for k in range(6):
        for app in ("support", "coder"):
            question = {"role": "user", "content": f"Question {k}: " + _text(rng, 20 + 7 * k)}
            add(app, [question])
            if k % 2 == 1:
                call = {
                    "id": f"call_{app}_{k}",
                    "type": "function",
                    "function": {
                        "name": apps[app][1][0]["function"]["name"],
                        "arguments": json.dumps({"order_id" if app == "support" else "path": f"x-{k}"}),
                    },
                }
                add(
                    app,
                    [
                        question,
                        {"role": "assistant", "content": None, "tool_calls": [call]},
                        {"role": "tool", "tool_call_id": call["id"], "content": _text(rng, 30)},
                    ],
                )
    add("support", [{"role": "user", "content": "Salted question: " + _text(rng, 25)}], salt="tenant-b")
    add("support", [{"role": "user", "content": "Salted follow-up: " + _text(rng, 25)}], salt="tenant-b")
    for k in range(2):
        add("coder", [{"role": "user", "content": f"Review this log {k}:\n" + _text(rng, 6400)}], long=True)
    out.append(
        {
            "id": "pplog-header-1",
            "body": {"model": model, "prompt": "Complete (pplog-header-1): " + _text(rng, 40), "max_tokens": 1},
            "headers": {"X-Request-Id": "pplog-header-1"},
            "path": "/v1/completions",
            "long": False,
        }
    )
    return out


def _post(url: str, path: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> dict[str, Any]:
    data = json.dumps(body).encode()
    req = urllib.request.Request(url + path, data=data, headers={"Content-Type": "application/json", **(headers or {})})
    with urllib.request.urlopen(req, timeout=120) as resp:
        return json.loads(resp.read())


def send_requests(url: str, model: str) -> list[dict[str, Any]]:
    """Send :func:`requests` in order (one at a time) and return them."""
    sent = requests(model)
    for item in sent:
        _post(url, item["path"], item["body"], item["headers"])
    time.sleep(0.5)  # the logger flushes per record; leave the server a moment
    return sent


def has_null_content_tool_turn(item: dict[str, Any]) -> bool:
    """An assistant turn with ``tool_calls`` and ``content: null``: a vLLM 0.32 server logging requests
    at DEBUG loses its tool calls in ``/tokenize`` (not in the chat endpoint)."""
    return any(
        m.get("role") == "assistant" and m.get("tool_calls") and m.get("content") is None
        for m in item["body"].get("messages", [])
    )


def tokenize(url: str, model: str, item: dict[str, Any], *, null_content_as_empty: bool = False) -> list[int]:
    """The server's own ``/tokenize`` ids for one sent request (chat or completions); with
    ``null_content_as_empty`` a ``content: null`` is sent as ``""`` (what the chat endpoint renders)."""
    body = item["body"]
    if "messages" in body:
        messages = body["messages"]
        if null_content_as_empty:
            messages = [dict(m, content="") if m.get("content", "") is None else m for m in messages]
        payload = {"model": model, "messages": messages, "tools": body.get("tools"), "add_generation_prompt": True}
    else:
        payload = {"model": model, "prompt": body["prompt"]}
    return list(_post(url, "/tokenize", payload)["tokens"])


def is_request_line(line: str) -> bool:
    return "request_logger.py" in line or "Received request" in line or " JSON body: " in line


def extract(log_text: str, ids: list[str]) -> str:
    """The server log with the request-logger lines of other requests removed.

    Every other server line (start-up, routes, engine messages, ``/tokenize`` calls) is kept as
    the server wrote it, so the result reads like the real log of a server that served exactly
    ``ids``.
    """
    keep = []
    ours = False  # /tokenize lines are kept from our first request on (ours come after it)
    for line in log_text.splitlines():
        if line.startswith("$ "):
            continue  # the command line our launcher writes first
        if is_request_line(line):
            mine = any(i in line for i in ids)
            ours = ours or mine
            if not mine and not (ours and ("tokenize-" in line or "Request N/A " in line)):
                continue
        keep.append(line)
    return "\n".join(keep) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--url", default=None, help="a running server (else one is started)")
    parser.add_argument("--log", type=Path, default=None, help="that server's log file")
    parser.add_argument("--model", default="tiny-qwen3")
    args = parser.parse_args(argv)
    proc = None
    if args.url is None:
        sys.path.insert(0, str(ROOT / "scripts"))
        import vllm_server

        log = ROOT / ".cache" / "capture-vllm.log"
        info, proc = vllm_server.start(log_path=log, extra_args=SERVER_FLAGS, extra_env=SERVER_ENV)
        url, log_path, model = info.url, log, info.served_model_name
    else:
        if args.log is None:
            parser.error("--url needs --log")
        url, log_path, model = args.url, args.log, args.model
    try:
        sent = send_requests(url, model)
        same = sum(1 for item in sent if not item["long"] and tokenize(url, model, item) is not None)
        text = extract(Path(log_path).read_text(encoding="utf-8", errors="replace"), [s["id"] for s in sent])
        args.out.parent.mkdir(parents=True, exist_ok=True)
        if args.out.suffix == ".gz":
            import gzip

            with gzip.GzipFile(args.out, "wb", mtime=0) as fh:
                fh.write(text.encode("utf-8"))
        else:
            args.out.write_text(text, encoding="utf-8")
        print(f"{args.out}: {len(sent)} requests ({same} also sent to /tokenize), {len(text.splitlines())} lines")
    finally:
        if proc is not None:
            vllm_server.stop_process(proc.pid)
    return 0


if __name__ == "__main__":
    sys.exit(main())
