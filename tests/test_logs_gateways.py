"""Gateway and observability logs: LiteLLM, OpenTelemetry GenAI spans (current and older form),
Langfuse observations.

The fixtures in tests/data/logs were written by each project's own SDK (scripts/make_gateway_fixtures.py:
LiteLLM 1.110.2's logging payload and spend-log builder, the OpenTelemetry OpenAI instrumentation
and OTLP encoder, Langfuse 5.0.4's API models) for one request set: Qwen3 with tools and a tool-call
turn, Llama 3, DeepSeek-V3, three users. Malformed and unknown variants are made here from those
real lines.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from prefixplan.logs import LineErrors, ReadOptions, iter_requests

DATA = Path(__file__).resolve().parent / "data" / "logs"
MODELS = {"Qwen/Qwen3-8B", "meta-llama/Meta-Llama-3-8B-Instruct", "deepseek-ai/DeepSeek-V3"}
FIXTURES = {
    "litellm": "litellm-1.110.2-payloads.jsonl",
    "litellm-spend": "litellm-1.110.2-spendlogs.jsonl",
    "otel-current": "otel-genai-current.jsonl",
    "otel-legacy": "otel-genai-legacy.jsonl",
    "langfuse": "langfuse-observations.jsonl",
}
FORMAT = {
    "litellm": "litellm",
    "litellm-spend": "litellm",
    "otel-current": "otel-genai",
    "otel-legacy": "otel-genai",
    "langfuse": "langfuse",
}


def _read(path: Path, **kw) -> tuple[list, LineErrors]:
    errors = LineErrors()
    return list(iter_requests([str(path)], ReadOptions(**kw), errors)), errors


def _lines(name: str) -> list[dict]:
    return [json.loads(line) for line in (DATA / FIXTURES[name]).read_text(encoding="utf-8").splitlines()]


def _write(tmp_path: Path, objs: list, name: str = "log.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join((o if isinstance(o, str) else json.dumps(o)) + "\n" for o in objs), encoding="utf-8")
    return path


@pytest.mark.parametrize("name", list(FIXTURES))
def test_each_fixture_reads_every_request(name: str) -> None:
    requests, errors = _read(DATA / FIXTURES[name])
    assert errors.count == 0, errors.summary()
    assert len(requests) == 12 and {r.format for r in requests} == {FORMAT[name]}
    assert {r.model for r in requests} == MODELS
    qwen = [r for r in requests if r.model == "Qwen/Qwen3-8B"]
    assert all(r.messages[0]["role"] == "system" for r in requests)
    assert qwen[-1].messages[2]["tool_calls"][0]["function"] == {
        "name": "lookup_order",
        "arguments": '{"order_id": "A-1"}',
    }
    assert qwen[-1].messages[3] == {"role": "tool", "tool_call_id": "call_1", "content": "Order A-1: shipped."}
    assert all(r.time is not None for r in requests)
    if name in ("litellm", "litellm-spend", "langfuse"):  # these keep the tools and the user
        assert all(r.tools and r.tools[0]["function"]["name"] == "lookup_order" for r in qwen)
        assert {r.tenant for r in requests} == {"user-0", "user-1", "user-2"}


def test_current_and_older_otel_forms_give_the_same_messages() -> None:
    current, _ = _read(DATA / FIXTURES["otel-current"])
    legacy, _ = _read(DATA / FIXTURES["otel-legacy"])
    litellm, _ = _read(DATA / FIXTURES["litellm"])
    assert [r.messages for r in current] == [r.messages for r in legacy] == [r.messages for r in litellm]


def test_malformed_lines_are_reported_by_line_and_the_rest_is_read(tmp_path: Path) -> None:
    for name in FIXTURES:
        raw = (DATA / FIXTURES[name]).read_text(encoding="utf-8").splitlines()
        raw[1] = raw[1][: len(raw[1]) // 2]  # a line cut in the middle
        requests, errors = _read(_write(tmp_path, raw, f"{name}.jsonl"))
        assert errors.by_reason == {"bad JSON": 1} and errors.samples[0].line_no == 2, name
        assert requests and len(requests) < 12


def test_litellm_unknown_field_and_missing_prompt(tmp_path: Path) -> None:
    payloads = _lines("litellm")
    payloads[0]["prompt_cache_key"] = "k"  # not a StandardLoggingPayload field
    payloads[1]["messages"] = "redacted-by-litellm"
    payloads[2]["call_type"] = "embedding"
    requests, errors = _read(_write(tmp_path, payloads))
    reasons = {s.line_no: s.reason for s in errors.samples}
    assert reasons[1].startswith("unknown field: 'prompt_cache_key' not in LiteLLM's StandardLoggingPayload")
    assert reasons[2].startswith("no prompt: messages are empty or redacted")
    assert reasons[3].startswith("unsupported: call_type 'embedding'")
    assert len(requests) == 9
    rows = _lines("litellm-spend")
    rows[0]["proxy_server_request"] = "{}"
    rows[1]["new_column"] = 1
    requests, errors = _read(_write(tmp_path, rows, "spend.jsonl"))
    reasons = {s.line_no: s.reason for s in errors.samples}
    assert "store_prompts_in_spend_logs: true" in reasons[1] and reasons[1].startswith("no prompt")
    assert reasons[2].startswith("unknown field: 'new_column' not in LiteLLM's LiteLLM_SpendLogs row")
    assert len(requests) == 10


def test_otel_unknown_attribute_part_and_missing_content_are_reported_per_span(tmp_path: Path) -> None:
    lines = _lines("otel-current")
    spans = lines[0]["resourceSpans"][0]["scopeSpans"][0]["spans"]
    spans[0]["attributes"].append({"key": "gen_ai.prompt_cache.key", "value": {"stringValue": "x"}})
    for attr in spans[1]["attributes"]:
        if attr["key"] == "gen_ai.input.messages":
            msgs = json.loads(attr["value"]["stringValue"])
            msgs[1]["parts"].append({"type": "audio_transcript", "content": "?"})
            attr["value"]["stringValue"] = json.dumps(msgs)
    spans[2]["attributes"] = [a for a in spans[2]["attributes"] if a["key"] != "gen_ai.input.messages"]
    requests, errors = _read(_write(tmp_path, lines))
    reasons = [s.reason for s in errors.samples]
    assert all(s.line_no == 1 for s in errors.samples) and len(reasons) == 3
    assert reasons[0].startswith("unknown field: span attribute 'gen_ai.prompt_cache.key'")
    assert reasons[1].startswith("unknown field: input message 1 part 1 type 'audio_transcript'")
    assert reasons[2].startswith("no prompt: the span has no prompt: turn on content capture")
    assert all(f"(span {spans[i]['spanId']})" in reasons[i] for i in range(3))
    assert len(requests) == 9  # the fourth span of the line and the other lines are kept


def test_otel_counts_are_labelled_approximate(tmp_path: Path) -> None:
    import prefixplan

    analysis = prefixplan.analyze(str(DATA / FIXTURES["otel-legacy"]), simulate=False, rag_whatif=False)
    assert analysis.record.summary.exact is False
    assert "OpenTelemetry GenAI spans are reconstructions" in (analysis.record.summary.approximate_reason or "")


def test_langfuse_unknown_field_skips_only_that_observation(tmp_path: Path) -> None:
    pages = _lines("langfuse")
    pages[0]["data"][1]["promptTokensEstimate"] = 3  # a generation with a field of neither schema
    next(o for o in pages[1]["data"] if o["type"] == "GENERATION")["input"] = None
    requests, errors = _read(_write(tmp_path, pages))
    reasons = {s.line_no: s.reason for s in errors.samples}
    assert reasons[1].startswith("unknown field: 'promptTokensEstimate' not in Langfuse public API")
    assert "(observation gen-000)" in reasons[1]
    assert reasons[2].startswith("no prompt: the generation has no input")
    assert len(requests) == 10
    spans = sum(1 for p in _lines("langfuse") for o in p["data"] if o["type"] != "GENERATION")
    assert spans == 3  # SPAN observations are skipped, not counted as errors


def test_forced_formats_and_a_folder_read_file_by_file(tmp_path: Path) -> None:
    requests, errors = _read(DATA / FIXTURES["langfuse"], format="langfuse")
    assert len(requests) == 12
    requests, errors = _read(DATA / FIXTURES["langfuse"], format="litellm")
    assert requests == [] and errors.count == 3
    folder = tmp_path / "logs"
    folder.mkdir()
    for name in ("litellm", "otel-legacy", "langfuse"):
        (folder / FIXTURES[name]).write_bytes((DATA / FIXTURES[name]).read_bytes())
    (folder / "vllm.log.gz").write_bytes((DATA / "vllm-0.32-debug.log.gz").read_bytes())
    errors = LineErrors()
    requests = list(iter_requests([str(folder)], ReadOptions(), errors))
    by_file: dict[str, set[str]] = {}
    for r in requests:
        by_file.setdefault(Path(r.source).name, set()).add(r.format)
    assert by_file == {
        FIXTURES["langfuse"]: {"langfuse"},
        FIXTURES["litellm"]: {"litellm"},
        FIXTURES["otel-legacy"]: {"otel-genai"},
        "vllm.log.gz": {"vllm-log"},
    }
    assert {Path(p).name: i.reader for p, i in errors.sources.items()}["vllm.log.gz"] == "vllm-log"


def test_the_header_names_each_files_format(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from prefixplan.cli.app import main

    folder = tmp_path / "logs"
    folder.mkdir()
    (folder / "a-proxy.jsonl").write_bytes((DATA / FIXTURES["litellm"]).read_bytes())
    (folder / "b-server.log.gz").write_bytes((DATA / "vllm-0.32-debug.log.gz").read_bytes())
    out = tmp_path / "rec.json"
    code = main(["analyze", str(folder), "--no-store", "--no-simulate", "--no-rag-whatif", "--json", str(out)])
    stdout = capsys.readouterr().out
    assert code == 0
    lines = stdout.splitlines()
    assert lines[0].startswith("warning: tokenizer mistral:nemo")  # the default is not these models' tokenizer
    start = next(i for i, line in enumerate(lines) if line.startswith("prefixplan analyze — "))
    flat = "".join(lines[start : start + 3])  # the console wraps long paths
    assert f"{folder / 'a-proxy.jsonl'} (litellm); {folder / 'b-server.log.gz'} (vllm-log)" in flat
    files = json.loads(out.read_text())["inputs"]["files"]
    assert [(Path(f["path"]).name, f["reader"], set(f["formats"])) for f in files] == [
        ("a-proxy.jsonl", "jsonl", {"litellm"}),
        ("b-server.log.gz", "vllm-log", {"vllm-log"}),
    ]
    assert files[1]["formats"] == {"vllm-log": 21} and files[1]["counts"]["truncated"] == 2


def test_older_otel_form_unknown_and_malformed_prompt_are_reported(tmp_path: Path) -> None:
    lines = _lines("otel-legacy")
    spans = lines[0]["resourceSpans"][0]["scopeSpans"][0]["spans"]
    spans[0]["attributes"].append({"key": "gen_ai.prompt.0.citations", "value": {"stringValue": "[]"}})
    event = next(e for e in spans[1]["events"] if e["name"] == "gen_ai.content.prompt")
    event["attributes"][0]["value"]["stringValue"] = '[{"role": "user", "content": "cut'
    requests, errors = _read(_write(tmp_path, lines))
    reasons = [s.reason for s in errors.samples]
    assert reasons[0].startswith("unknown field: span attribute 'gen_ai.prompt.0.citations'")
    assert reasons[1].startswith("bad JSON: gen_ai.prompt is not JSON")
    assert all(s.line_no == 1 for s in errors.samples) and len(requests) == 10
