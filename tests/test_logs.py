"""Log readers: every format, wrappers, files/compression/stdin/globs, filters."""

from __future__ import annotations

import gzip
import io
import json
import sys
from pathlib import Path
from typing import Any

import pytest
import zstandard

from prefixplan.core.types import Breakpoint, Request
from prefixplan.errors import InputError, UsageError
from prefixplan.logs import LineErrors, ReadOptions, expand_paths, iter_requests, parse_time

CHAT = {
    "model": "qwen3",
    "messages": [
        {"role": "system", "content": "You are helpful."},
        {"role": "user", "content": "Hi"},
    ],
}


def write_jsonl(path: Path, rows: list[Any]) -> Path:
    lines = [r if isinstance(r, str) else json.dumps(r) for r in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def read(paths: list[str] | Path, **opts: Any) -> tuple[list[Request], LineErrors]:
    errors = LineErrors()
    if isinstance(paths, Path):
        paths = [str(paths)]
    return list(iter_requests(paths, ReadOptions(**opts), errors)), errors


def read_rows(tmp_path: Path, rows: list[Any], **opts: Any) -> tuple[list[Request], LineErrors]:
    return read(write_jsonl(tmp_path / "log.jsonl", rows), **opts)


# ---------------------------------------------------------------- OpenAI chat


def test_chat_body_fields(tmp_path: Path) -> None:
    body = {
        **CHAT,
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
        "tool_choice": "auto",
        "user": "alice",
        "max_completion_tokens": 77,
        "cache_salt": "s3cret",
        "lora_request": {"lora_name": "sql-adapter", "lora_int_id": 1},
        "chat_template_kwargs": {"enable_thinking": False},
        "timestamp": 1_700_000_000_123,  # milliseconds
    }
    (req,), errors = read_rows(tmp_path, [body])
    assert errors.count == 0
    assert req.format == "openai-chat"
    assert req.model == "qwen3"
    assert req.messages == tuple(CHAT["messages"])
    assert isinstance(req.messages, tuple) and isinstance(req.tools, tuple)
    assert req.tools[0]["function"]["name"] == "f"
    assert req.tenant == "alice"
    assert req.output_length == 77
    assert req.cache_salt == "s3cret"
    assert req.lora == "sql-adapter"
    assert req.time == pytest.approx(1_700_000_000.123)
    assert req.extra == {"tool_choice": "auto", "chat_template_kwargs": {"enable_thinking": False}}
    assert req.id == f"{tmp_path / 'log.jsonl'}:1"
    assert req.line_no == 1 and req.source == str(tmp_path / "log.jsonl")


def test_chat_assistant_tool_calls_and_none_content(tmp_path: Path) -> None:
    msgs = [
        {"role": "user", "content": "weather?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "w", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
        {"role": "developer", "content": [{"type": "text", "text": "be brief"}]},
    ]
    (req,), errors = read_rows(tmp_path, [{"model": "m", "messages": msgs}])
    assert errors.count == 0
    assert req.messages[1] is not None and req.messages[1]["content"] is None
    assert len(req.messages) == 4


def test_legacy_functions_become_tools(tmp_path: Path) -> None:
    fn = {"name": "lookup", "description": "d", "parameters": {"type": "object", "properties": {}}}
    (req,), _ = read_rows(tmp_path, [{**CHAT, "functions": [fn], "function_call": "auto"}])
    assert req.tools == ({"type": "function", "function": fn},)
    assert req.extra == {"function_call": "auto"}


def test_wrapped_request_response_usage_and_metadata(tmp_path: Path) -> None:
    row = {
        "id": "req-42",
        "created_at": "2024-05-01T12:00:00Z",
        "metadata": {"user_id": "tenant-7"},
        "request": CHAT,
        "response": {
            "id": "chatcmpl-x",
            "usage": {"prompt_tokens": 1200, "completion_tokens": 30, "prompt_tokens_details": {"cached_tokens": 1024}},
        },
    }
    (req,), errors = read_rows(tmp_path, [row])
    assert errors.count == 0
    assert req.id == "req-42"
    assert req.format == "openai-chat"
    assert req.time == parse_time("2024-05-01T12:00:00+00:00") == 1714564800.0
    assert req.tenant == "tenant-7"
    assert req.logged_prompt_tokens == 1200
    assert req.logged_cached_tokens == 1024
    assert req.output_length == 30


def test_mixed_wrapped_and_unwrapped_lines_in_one_file(tmp_path: Path) -> None:
    rows = [CHAT, {"request": CHAT, "tenant": "t"}, {**CHAT, "time": 5.5}]
    reqs, errors = read_rows(tmp_path, rows)
    assert errors.count == 0
    assert [r.line_no for r in reqs] == [1, 2, 3]
    assert [r.tenant for r in reqs] == [None, "t", None]
    assert [r.time for r in reqs] == [None, None, 5.5]


# ---------------------------------------------------------------- completions / raw / batch


def test_completion_prompts(tmp_path: Path) -> None:
    rows = [
        {"model": "m", "prompt": "Once upon", "max_tokens": 16},
        {"model": "m", "prompt": [1, 2, 3]},
        {"model": "m", "prompt": ["a", "b", "c"], "id": "multi"},
        {"model": "m", "prompt": [[5, 6], [7]]},
    ]
    reqs, errors = read_rows(tmp_path, rows)
    assert errors.count == 0
    assert [r.format for r in reqs] == ["openai-completion"] * 7
    assert reqs[0].prompt == "Once upon" and reqs[0].output_length == 16
    assert reqs[1].prompt_ids == (1, 2, 3) and reqs[1].input_length == 3 and reqs[1].prompt is None
    assert [r.prompt for r in reqs[2:5]] == ["a", "b", "c"]
    assert [r.id for r in reqs[2:5]] == ["multi#0", "multi#1", "multi#2"]
    assert [r.line_no for r in reqs[2:5]] == [3, 3, 3]
    assert [r.prompt_ids for r in reqs[5:]] == [(5, 6), (7,)]


def test_raw_prompt_and_input(tmp_path: Path) -> None:
    reqs, errors = read_rows(tmp_path, [{"prompt": "plain"}, {"input": "text here"}])
    assert errors.count == 0
    assert [(r.format, r.prompt) for r in reqs] == [("raw", "plain"), ("raw", "text here")]


def test_openai_batch_lines(tmp_path: Path) -> None:
    rows = [
        {"custom_id": "a-1", "method": "POST", "url": "/v1/chat/completions", "body": CHAT},
        {"custom_id": "a-2", "method": "POST", "url": "/v1/completions", "body": {"model": "m", "prompt": "p"}},
        {"custom_id": "a-3", "method": "POST", "url": "/v1/embeddings", "body": {"model": "m", "input": "x"}},
    ]
    reqs, errors = read_rows(tmp_path, rows)
    assert [r.id for r in reqs] == ["a-1", "a-2"]
    assert all(r.format == "openai-batch" for r in reqs)
    assert reqs[0].messages == tuple(CHAT["messages"]) and reqs[0].model == "qwen3"
    assert reqs[1].prompt == "p" and reqs[1].messages is None
    assert errors.count == 1 and errors.samples[0].line_no == 3
    assert errors.samples[0].reason.startswith("unsupported: batch url '/v1/embeddings'")


# ---------------------------------------------------------------- Anthropic


ANTHROPIC = {
    "model": "claude-sonnet-4",
    "max_tokens": 1024,
    "metadata": {"user_id": "u-9"},
    "system": [
        {"type": "text", "text": "You are a coding agent."},
        {"type": "text", "text": "Repo rules...", "cache_control": {"type": "ephemeral", "ttl": "1h"}},
    ],
    "tools": [
        {"name": "read_file", "description": "Read a file", "input_schema": {"type": "object"}},
        {"name": "grep", "input_schema": {"type": "object"}, "cache_control": {"type": "ephemeral"}},
    ],
    "tool_choice": {"type": "any"},
    "messages": [
        {"role": "user", "content": "Fix the bug"},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "look at main.py", "signature": "x"},
                {"type": "text", "text": "Reading."},
                {"type": "tool_use", "id": "tu_1", "name": "read_file", "input": {"path": "main.py"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "tu_1", "content": [{"type": "text", "text": "print(1)"}]},
                {"type": "text", "text": "Now fix it", "cache_control": {"type": "ephemeral"}},
            ],
        },
    ],
}


def test_anthropic_conversion(tmp_path: Path) -> None:
    (req,), errors = read_rows(tmp_path, [ANTHROPIC])
    assert errors.count == 0
    assert req.format == "anthropic"
    assert req.tenant == "u-9" and req.output_length == 1024
    assert req.messages == (
        {
            "role": "system",
            "content": [
                {"type": "text", "text": "You are a coding agent."},
                {"type": "text", "text": "Repo rules..."},
            ],
        },
        {"role": "user", "content": "Fix the bug"},
        {
            "role": "assistant",
            "content": "Reading.",
            "tool_calls": [
                {
                    "id": "tu_1",
                    "type": "function",
                    "function": {"name": "read_file", "arguments": '{"path": "main.py"}'},
                }
            ],
            "reasoning_content": "look at main.py",
        },
        {"role": "tool", "tool_call_id": "tu_1", "content": "print(1)"},
        {"role": "user", "content": "Now fix it"},
    )
    assert req.tools == (
        {
            "type": "function",
            "function": {"name": "read_file", "description": "Read a file", "parameters": {"type": "object"}},
        },
        {"type": "function", "function": {"name": "grep", "parameters": {"type": "object"}}},
    )
    assert req.breakpoints == (
        Breakpoint("tools", 1, "5m"),
        Breakpoint("system", 1, "1h"),
        Breakpoint("message", 4, "5m"),
    )
    assert req.extra == {"tool_choice": "required"}


@pytest.mark.parametrize(
    "body",
    [
        {"model": "c", "system": "sys", "messages": [{"role": "user", "content": "q"}]},
        {"anthropic_version": "2023-06-01", "messages": [{"role": "user", "content": "q"}]},
        {"tools": [{"name": "t", "input_schema": {}}], "messages": [{"role": "user", "content": "q"}]},
        {"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "x", "content": "r"}]}]},
        {"messages": [{"role": "assistant", "content": [{"type": "tool_use", "id": "x", "name": "n", "input": {}}]}]},
    ],
)
def test_anthropic_detection(tmp_path: Path, body: dict[str, Any]) -> None:
    (req,), errors = read_rows(tmp_path, [body])
    assert errors.count == 0 and req.format == "anthropic"


def test_anthropic_usage_and_message_batch(tmp_path: Path) -> None:
    row = {
        "custom_id": "mb-1",
        "params": {"model": "claude", "max_tokens": 10, "messages": [{"role": "user", "content": "q"}]},
    }
    wrapped = {
        "request": {"model": "claude", "system": "S", "messages": [{"role": "user", "content": "q"}]},
        "response": {
            "usage": {
                "input_tokens": 5,
                "cache_read_input_tokens": 100,
                "cache_creation_input_tokens": 20,
                "output_tokens": 7,
            }
        },
    }
    (batch, logged), errors = read_rows(tmp_path, [row, wrapped])
    assert errors.count == 0
    assert (batch.id, batch.format, batch.model) == ("mb-1", "anthropic", "claude")
    assert logged.logged_prompt_tokens == 125 and logged.logged_cached_tokens == 100
    assert logged.output_length == 7


def test_forced_format(tmp_path: Path) -> None:
    # no Anthropic marker, but forced: parsed as Anthropic
    rows = [{"messages": [{"role": "user", "content": "q"}]}]
    (req,), _ = read_rows(tmp_path, rows, format="anthropic")
    assert req.format == "anthropic"
    # forcing mooncake on a chat line is an error for that line, not a crash
    reqs, errors = read_rows(tmp_path, [CHAT], format="mooncake")
    assert reqs == [] and errors.samples[0].reason == "missing field: hash_ids"
    with pytest.raises(UsageError):
        ReadOptions(format="xml")  # csv and parquet are table formats now


# ---------------------------------------------------------------- Mooncake


def test_mooncake_trace(tmp_path: Path) -> None:
    rows = [
        {"timestamp": 0, "input_length": 1024, "output_length": 12, "hash_ids": [0, 1]},
        {"timestamp": 27482, "input_length": 600, "output_length": 52, "hash_ids": [0, 2]},
    ]
    reqs, errors = read_rows(tmp_path, rows, trace_block_size=16)
    assert errors.count == 0
    assert [r.format for r in reqs] == ["mooncake", "mooncake"]
    assert [r.time for r in reqs] == [0.0, 27.482]
    assert reqs[1].hash_ids == (0, 2) and reqs[1].input_length == 600 and reqs[1].output_length == 52
    assert all(r.trace_block_size == 16 for r in reqs)


# ---------------------------------------------------------------- files


def test_gzip_zstd_by_magic_bytes_multiple_files_and_glob(tmp_path: Path) -> None:
    payload = ("\n".join(json.dumps({**CHAT, "id": f"r{i}"}) for i in range(3)) + "\n").encode()
    (tmp_path / "a.jsonl.gz").write_bytes(gzip.compress(payload))
    (tmp_path / "b.log").write_bytes(zstandard.ZstdCompressor().compress(payload))  # no .zst suffix
    (tmp_path / "c.jsonl").write_bytes(payload)
    multi_frame = zstandard.ZstdCompressor().compress(payload) + zstandard.ZstdCompressor().compress(payload)
    (tmp_path / "d.zst").write_bytes(multi_frame)
    reqs, errors = read([str(tmp_path / "*")])
    assert errors.count == 0
    sources = [Path(r.source).name for r in reqs]
    assert sources == ["a.jsonl.gz"] * 3 + ["b.log"] * 3 + ["c.jsonl"] * 3 + ["d.zst"] * 6
    assert [r.line_no for r in reqs if r.source.endswith("d.zst")] == [1, 2, 3, 4, 5, 6]
    # explicit list keeps the given order
    reqs, _ = read([str(tmp_path / "c.jsonl"), str(tmp_path / "a.jsonl.gz")])
    assert [Path(r.source).name for r in reqs] == ["c.jsonl"] * 3 + ["a.jsonl.gz"] * 3


def test_stdin_plain_and_gzip(monkeypatch: pytest.MonkeyPatch) -> None:
    for data in (b'{"prompt": "x"}\n{"prompt": "y"}', gzip.compress(b'{"prompt": "x"}\n{"prompt": "y"}\n')):
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
        reqs, errors = read(["-"])
        assert [(r.source, r.line_no, r.prompt) for r in reqs] == [("-", 1, "x"), ("-", 2, "y")]
        assert errors.count == 0


def test_expand_paths_errors_and_literal_names(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="missing.jsonl"):
        expand_paths([str(tmp_path / "missing.jsonl")])
    with pytest.raises(InputError, match=r"\*.gz"):
        expand_paths([str(tmp_path / "*.gz")])
    odd = write_jsonl(tmp_path / "log[1].jsonl", [CHAT])
    assert expand_paths([str(odd), str(odd), "-"]) == [str(odd), "-"]
    assert expand_paths([str(tmp_path)]) == [str(odd)]


def test_crlf_bom_and_no_trailing_newline(tmp_path: Path) -> None:
    path = tmp_path / "w.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(CHAT).encode() + b"\r\n\r\n" + json.dumps(CHAT).encode())
    reqs, errors = read(path)
    assert errors.count == 0 and [r.line_no for r in reqs] == [1, 3]


def test_truncated_gzip_keeps_read_lines(tmp_path: Path) -> None:
    payload = "".join(json.dumps({"prompt": "p" * 50, "id": i}) + "\n" for i in range(2000)).encode()
    (tmp_path / "t.gz").write_bytes(gzip.compress(payload)[:-40])
    reqs, errors = read(tmp_path / "t.gz")
    assert errors.count >= 1
    assert any(s.reason.startswith("corrupt input") for s in errors.samples)
    assert 1500 < len(reqs) < 2000
    assert [r.id for r in reqs] == [str(i) for i in range(len(reqs))]


# ---------------------------------------------------------------- filters


def test_since_until_keep_untimed(tmp_path: Path) -> None:
    rows = [{**CHAT, "time": t} for t in (100, 200, 300)] + [CHAT]
    reqs, _ = read_rows(tmp_path, rows, since=150, until=300)
    assert [r.line_no for r in reqs] == [2, 4]


def test_sample_is_deterministic_fraction(tmp_path: Path) -> None:
    rows = [{"prompt": str(i)} for i in range(4000)]
    a, _ = read_rows(tmp_path, rows, sample=0.25)
    b, _ = read_rows(tmp_path, rows, sample=0.25)
    assert [r.line_no for r in a] == [r.line_no for r in b]
    assert 800 < len(a) < 1200
    full, _ = read_rows(tmp_path, rows, sample=1.0)
    assert len(full) == 4000
    with pytest.raises(UsageError):
        ReadOptions(sample=0)


def test_parse_time() -> None:
    assert parse_time("1714564800") == 1714564800.0
    assert parse_time("1714564800000") == 1714564800.0
    assert parse_time("2024-05-01T12:00:00Z") == 1714564800.0
    assert parse_time("2024-05-01T14:00:00+02:00") == 1714564800.0
    assert parse_time("2024-05-01") == 1714521600.0
    with pytest.raises(UsageError):
        parse_time("yesterday")


def test_http_style_record_with_nested_body(tmp_path: Path) -> None:
    rows = [
        {
            "ts": 1,
            "start_time": 1714564800,
            "user": "bob",
            "request": {"method": "POST", "url": "https://api.example.com/v1/chat/completions", "body": CHAT},
            "response": {
                "status_code": 200,
                "body": {"id": "cmpl-9", "usage": {"prompt_tokens": 40, "completion_tokens": 2}},
            },
        },
        {"request": {"url": "/v1/embeddings", "body": {"input": "x"}}},
    ]
    (req,), errors = read_rows(tmp_path, rows)
    assert (req.format, req.tenant, req.time, req.id) == ("openai-chat", "bob", 1714564800.0, "cmpl-9")
    assert req.logged_prompt_tokens == 40 and req.output_length == 2
    assert (
        errors.samples[0].reason == "unsupported: url '/v1/embeddings' is not a chat, completion or messages endpoint"
    )


def test_forced_batch_rejects_plain_lines(tmp_path: Path) -> None:
    rows = [CHAT, {"custom_id": "x", "url": "/v1/chat/completions", "body": CHAT}]
    reqs, errors = read_rows(tmp_path, rows, format="openai-batch")
    assert [r.id for r in reqs] == ["x"]
    assert errors.samples[0].line_no == 1 and errors.samples[0].reason.startswith("missing field: not an OpenAI Batch")
