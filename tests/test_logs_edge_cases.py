"""Log readers on inputs their first fixtures did not have: an endpoint's real field set, a raw
JSON string where objects were expected, values past Python's limits, text that must not reach
an error message. Each case is a line or a file written here from the formats' public shapes."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from prefixplan.logs import LineErrors, ReadOptions, iter_objects, iter_requests

MESSAGES = [{"role": "system", "content": "You are a bot."}, {"role": "user", "content": "hi"}]


def _read(path: Path, **kw) -> tuple[list, LineErrors]:
    errors = LineErrors()
    return list(iter_requests([str(path)], ReadOptions(**kw), errors)), errors


def _received(rid: str, text: str, stamp: str) -> str:
    """An SGLang JSON-event log line receiving one text request."""
    obj = {"rid": rid, "text": text, "sampling_params": {"max_new_tokens": 1}}
    event = {"timestamp": stamp, "event": "request.received", "rid": rid, "obj": obj}
    return "[2025-12-01 08:00:00] " + json.dumps(event)


def _langfuse(**fields) -> dict:
    base = {"id": "o1", "traceId": "t1", "type": "GENERATION", "startTime": "2025-12-01T08:00:00Z", "model": "m"}
    return {**base, **fields}


def test_langfuse_v1_fields_and_v2_json_text_input(tmp_path: Path) -> None:
    v1 = _langfuse(input=MESSAGES, unit="TOKENS", promptTokens=9, completionTokens=1, totalTokens=10,
                   usagePricingTierId=None)  # fmt: skip
    v2 = _langfuse(id="o2", input=json.dumps(MESSAGES))  # the v2 endpoint returns input as raw text
    text = _langfuse(id="o3", input="[not json, a completion prompt")
    path = tmp_path / "lf.jsonl"
    path.write_text("".join(json.dumps(o) + "\n" for o in (v1, v2, text)))
    requests, errors = _read(path)
    assert errors.count == 0 and [r.format for r in requests] == ["langfuse"] * 3
    assert [list(r.messages or []) for r in requests[:2]] == [MESSAGES, MESSAGES]
    assert requests[2].messages is None and requests[2].prompt == "[not json, a completion prompt"


def test_openai_chat_with_cache_control_is_not_read_as_anthropic() -> None:
    system = {
        "role": "system",
        "content": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
    }
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    body = {
        "model": "claude-sonnet-4-5",
        "messages": [system, {"role": "user", "content": "hi"}, {"role": "assistant", "content": None, "tool_calls": [call]},
                     {"role": "tool", "tool_call_id": "c1", "content": "ok"}],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
    }  # fmt: skip
    errors = LineErrors()
    (req,) = iter_objects([body], ReadOptions(), errors)
    assert errors.count == 0 and req.format == "openai-chat" and len(req.messages) == 4 and req.tools
    anthropic = {"model": "claude", "messages": [{"role": "user", "content": [system["content"][0]]}]}
    (req,) = iter_objects([anthropic], ReadOptions(), errors)
    assert req.format == "anthropic"


def test_otel_errors_name_a_part_not_its_text_and_a_bad_literal_is_one_bad_span(tmp_path: Path) -> None:
    def span(sid: str, **attrs) -> dict:
        return {
            "traceId": "t",
            "spanId": sid,
            "name": "chat m",
            "startTimeUnixNano": "1764576000000000000",
            "attributes": [{"key": k, "value": {"stringValue": v}} for k, v in
                           {"gen_ai.operation.name": "chat", "gen_ai.request.model": "m", **attrs}.items()],
        }  # fmt: skip

    secret = "Patient John Doe, SSN 123-45-6789"
    msgs = json.dumps([{"role": "user", "parts": [{"type": "text", "content": "hi"}]}])
    spans = [
        span("01", **{"gen_ai.system_instructions": json.dumps([secret]), "gen_ai.input.messages": msgs}),
        span("02", **{"gen_ai.input.messages": "[{'role': 'user'}, {[1]: 2}]"}),
        span("03", **{"gen_ai.input.messages": msgs}),
    ]
    line = {"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}
    path = tmp_path / "otel.jsonl"
    path.write_text(json.dumps(line) + "\n")
    requests, errors = _read(path)
    reasons = [s.reason for s in errors.samples]
    assert len(requests) == 1 and errors.count == 2, (reasons, requests)
    assert not any("John Doe" in r for r in reasons) and any("part 0 (string) is not text" in r for r in reasons)


def test_parquet_nanosecond_timestamps_without_pandas(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    ns = 1764576056123456789
    table = pa.table(
        {"messages": [json.dumps(MESSAGES)], "timestamp": pa.array([ns], type=pa.timestamp("ns", tz="UTC"))}
    )
    path = tmp_path / "log.parquet"
    pq.write_table(table, path)
    monkeypatch.setitem(sys.modules, "pandas", None)  # pandas is an optional extra
    requests, errors = _read(path)
    assert errors.count == 0 and len(requests) == 1
    assert requests[0].time == pytest.approx(ns / 1e9)


def test_a_timestamp_past_float_range_is_a_bad_line(tmp_path: Path) -> None:
    line = {
        "timestamp": int("1" + "0" * 400),
        "event": "request.received",
        "rid": "a",
        "obj": {"rid": "a", "text": "hi"},
    }
    path = tmp_path / "sglang.log"
    path.write_text(
        "[2025-12-01 08:00:00] server_args={'model_path': '/m', 'tp_size': 1}\n[2025-12-01 08:00:00] "
        + json.dumps(line)
        + "\n"
    )
    requests, errors = _read(path, format="sglang-log")
    assert requests == [] and [(s.line_no, s.reason[:14]) for s in errors.samples] == [(2, "bad timestamp:")]


def test_sglang_requests_take_the_served_model_not_a_previous_openai_body(tmp_path: Path) -> None:
    openai = "[2025-12-01 08:00:01] " + json.dumps({"timestamp": "2025-12-01T08:00:01", "event": "request.received.openai",
                         "obj": {"model": "default", "messages": MESSAGES}})  # fmt: skip
    lines = [
        "[2025-12-01 08:00:00] server_args={'model_path': '/m', 'served_model_name': 'Qwen/Qwen3-8B'}",
        _received("a1", "hello there", "2025-12-01T08:00:00"),
        openai,
        _received("b2", "hello there", "2025-12-01T08:00:01"),
        _received("c3", "hello there", "2025-12-01T08:00:02"),
    ]
    path = tmp_path / "sglang.log"
    path.write_text("\n".join(lines) + "\n")
    requests, _ = _read(path, format="sglang-log")
    assert [(r.id, r.model) for r in requests] == [(k, "Qwen/Qwen3-8B") for k in ("a1", "b2", "c3")]


def test_a_signed_url_re_encoded_by_the_http_library_is_still_hidden() -> None:
    from prefixplan.logs.remote import _clean

    url = "https://logs.example/a.jsonl?X-Amz-Credential=AKIA%2F2025&X-Amz-Signature=deadbeefcafe"
    message = "ClientResponseError: 500, url='https://logs.example/a.jsonl?X-Amz-Credential=AKIA/2025&X-Amz-Signature=deadbeefcafe'"
    cleaned = _clean(message, url)
    assert "deadbeefcafe" not in cleaned and "AKIA" not in cleaned and "https://logs.example/a.jsonl?..." in cleaned


def test_an_sglang_rid_received_twice_keeps_both_requests(tmp_path: Path) -> None:
    lines = [
        "[2025-12-01 08:00:00] server_args={'model_path': '/m', 'served_model_name': 'm'}",
        _received("same", "first question", "2025-12-01T08:00:00"),
        _received("same", "second question", "2025-12-01T08:00:01"),
    ]
    path = tmp_path / "sglang.log"
    path.write_text("\n".join(lines) + "\n")
    requests, errors = _read(path, format="sglang-log")
    assert [r.prompt for r in requests] == ["first question", "second question"] and errors.count == 0
    assert errors.sources[str(path)].counts["rid received again"] == 1
