"""vLLM server logs (format ``vllm-log``) against a log the real vLLM 0.32 server wrote.

``tests/data/logs/vllm-0.32-debug.log.gz`` is the output of ``scripts/capture_vllm_log.py``: a real
vLLM 0.32 CPU server (``--enable-log-requests --max-log-len 6000``, DEBUG logging) served 23 chat
and completions requests; the file is its log with other tests' request lines removed. Variants
(a malformed line, an unknown field, INFO only, colours, the old one-line layout, a LoRA) are made
here from those real lines, never typed from scratch.
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

from prefixplan.cli.app import main
from prefixplan.logs import LineErrors, ReadOptions, iter_requests

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "data" / "logs" / "vllm-0.32-debug.log.gz"


def _lines() -> list[str]:
    return gzip.decompress(FIXTURE.read_bytes()).decode("utf-8").splitlines()


def _read(path: Path | str, **kw) -> tuple[list, LineErrors]:
    errors = LineErrors()
    return list(iter_requests([str(path)], ReadOptions(**kw), errors)), errors


def _write(tmp_path: Path, lines: list[str], name: str = "server.log") -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _line_no(lines: list[str], needle: str) -> int:
    return next(i for i, line in enumerate(lines, start=1) if needle in line)


def test_captured_log_reads_every_request_with_the_engine_ids() -> None:
    requests, errors = _read(FIXTURE)
    info = errors.sources[str(FIXTURE)]
    assert info.reader == "vllm-log" and info.detected.startswith("auto-detected")
    assert [r.format for r in requests] == ["vllm-log"] * 21
    chat = [r for r in requests if r.id.startswith("chatcmpl-pplog-")]
    assert len(chat) == 20 and all(r.model == "tiny-qwen3" and r.messages and r.tools for r in chat)
    assert all(r.prompt_ids is not None and r.input_length == len(r.prompt_ids) for r in requests)
    salted = [r for r in chat if r.cache_salt]
    assert len(salted) == 2 and {r.namespace for r in salted} != {chat[0].namespace}
    # the completions request came with an X-Request-Id header: its body has another id and is
    # paired by content; its ids are the engine's for that prompt
    header = next(r for r in requests if r.id == "cmpl-pplog-header-1-0")
    assert header.model == "tiny-qwen3" and header.prompt is None and len(header.prompt_ids) > 10
    assert all(r.output_length == 1 for r in requests)
    assert info.counts["/tokenize calls skipped"] >= 1


def test_prompts_cut_by_max_log_len_are_reported_with_their_count_and_lines() -> None:
    lines = _lines()
    requests, errors = _read(FIXTURE)
    assert errors.by_reason == {"truncated": 2}
    cut = [s for s in errors.samples if s.reason.startswith("truncated")]
    assert [s.line_no for s in cut] == [
        _line_no(lines, "Request chatcmpl-pplog-20 details"),
        _line_no(lines, "Request chatcmpl-pplog-21 details"),
    ]
    assert all("cut at 6000 tokens by --max-log-len" in s.reason for s in cut)
    assert not any(r.id.endswith(("pplog-20", "pplog-21")) for r in requests)  # never counted as short
    notes = " ".join(errors.sources[str(FIXTURE)].notes)
    assert "--max-log-len 6000" in notes and "2 request(s) had their prompt cut" in notes


def test_cut_is_inferred_from_a_cut_json_body_when_the_startup_line_is_gone(tmp_path: Path) -> None:
    lines = [line for line in _lines() if "non-default args" not in line]
    requests, errors = _read(_write(tmp_path, lines))
    assert errors.by_reason == {"truncated": 2} and len(requests) == 21
    assert all(r.model == "tiny-qwen3" for r in requests)  # from the JSON bodies


def test_the_engine_ids_equal_the_hf_rendering_of_the_logged_bodies(qwen3_path: Path) -> None:
    from oracles.prompts import iter_prompts

    from prefixplan.render.stream import SourceOptions

    source = SourceOptions(paths=(str(FIXTURE),), tokenizer=f"hf:{qwen3_path}")
    renderers = source.renderers()
    prompts = list(iter_prompts(source, LineErrors(), renderers))
    assert len(prompts) == 21
    assert renderers.engine_ids == {"used": 21, f"same ids as hf:{qwen3_path}": 20}
    labelled = [p for p in prompts if p.request.messages]
    assert all({s.kind for s in p.segments} >= {"system", "tool", "user"} for p in labelled)


def test_a_malformed_and_an_unknown_request_line_are_reported_by_line(tmp_path: Path) -> None:
    lines = _lines()
    bad = _line_no(lines, "Request chatcmpl-pplog-04 details")
    lines[bad - 1] = lines[bad - 1].split(", prompt_token_ids: [")[0] + ", prompt_token_ids: [151644, 8948"
    unknown = _line_no(lines, "Request chatcmpl-pplog-05 details")
    lines[unknown - 1] = lines[unknown - 1].rstrip(".") + ", prompt_cache_hint: 7."
    requests, errors = _read(_write(tmp_path, lines))
    reasons = {s.line_no: s.reason for s in errors.samples}
    assert reasons[bad].startswith("bad request line: request chatcmpl-pplog-04 details")
    assert reasons[unknown].startswith("bad request line: request chatcmpl-pplog-05 details: unknown field")
    assert "prompt_cache_hint" in reasons[unknown]
    assert len(requests) == 19 and errors.count == 4  # the two cut requests are still reported


def test_info_only_log_says_prompts_are_missing_and_how_to_log_them(tmp_path: Path, capsys) -> None:
    lines = [line for line in _lines() if " DEBUG " not in line]
    requests, errors = _read(_write(tmp_path, lines))
    assert requests == [] and errors.by_reason == {"no prompt": 23}
    assert "--log-level debug" in errors.samples[0].reason
    code = main(["analyze", str(tmp_path / "server.log"), "--no-store", "-q"])
    err = capsys.readouterr().err
    assert code == 2 and "only INFO 'Received request' lines" in err and "--enable-log-requests" in err


def test_server_log_without_request_lines_is_an_error_naming_the_flags(tmp_path: Path, capsys) -> None:
    lines = [line for line in _lines() if not re.search(r"request_logger|Received request", line)]
    code = main(["analyze", str(_write(tmp_path, lines)), "--no-store", "-q"])
    err = capsys.readouterr().err
    assert code == 2 and "no requests read" in err and "no request-logger lines" in err and "vllm-log" in err


def test_colour_codes_and_a_lora_request(tmp_path: Path) -> None:
    lines = _lines()
    i = _line_no(lines, "Received request chatcmpl-pplog-00:") - 1
    lines[i] = lines[i].replace(
        "lora_request: None.", "lora_request: LoRARequest(lora_name='sql-adapter', lora_int_id=1, lora_path='/a')."
    )
    coloured = [re.sub(r" (DEBUG|INFO) ", lambda m: f" \x1b[32m{m.group(1)}\x1b[0m ", line) for line in lines]
    requests, errors = _read(_write(tmp_path, coloured))
    assert len(requests) == 21 and errors.by_reason == {"truncated": 2}
    first = requests[0]
    assert first.lora == "sql-adapter" and first.namespace == "tiny-qwen3|lora=sql-adapter"


def test_the_older_one_line_info_layout(tmp_path: Path) -> None:
    """vLLM before the DEBUG split logged prompt, params and ids in one INFO line:
    ``Received request {id}: prompt: %r, params: %s, prompt_token_ids: %s, lora_request: %s,
    prompt_adapter_request: %s.`` -- built here from the captured values of each request."""
    lines, out = _lines(), []
    details: dict[str, str] = {}
    for line in lines:
        m = re.search(
            r"Request (\S+) details: prompt: (.*), prompt_token_ids: (\[.*\]), prompt_embeds shape: None\.$", line
        )
        if m:
            details[m.group(1)] = (m.group(2), m.group(3))
            continue
        m = re.search(r"^(.*)Received request (\S+): params: (.*), lora_request: None\.$", line)
        if m and m.group(2) in details:
            prompt, ids = details[m.group(2)]
            out.append(
                f"{m.group(1)}Received request {m.group(2)}: prompt: {prompt}, params: {m.group(3)}, "
                f"prompt_token_ids: {ids}, lora_request: None, prompt_adapter_request: None."
            )
        elif "JSON body" not in line:
            out.append(line)
    requests, errors = _read(_write(tmp_path, out))
    new, _ = _read(FIXTURE)
    assert [r.prompt_ids for r in requests] == [r.prompt_ids for r in new]
    assert errors.by_reason == {"truncated": 2}


def test_forced_format_and_the_formats_command(tmp_path: Path, capsys) -> None:
    requests, errors = _read(FIXTURE, format="vllm-log")
    assert len(requests) == 21 and errors.sources[str(FIXTURE)].detected == "forced by --log-format"
    code = main(["formats"])
    out = capsys.readouterr().out
    assert code == 0
    for name in ("vllm-log", "sglang-log", "litellm", "otel-genai", "langfuse", "openai-chat", "mooncake"):
        assert name in out
    code = main(["formats", "--json", "-"])
    table = json.loads(capsys.readouterr().out)
    assert {f["name"] for f in table["formats"]} >= {"vllm-log", "langfuse"}


@pytest.mark.parametrize("strict", [False, True])
def test_analyze_the_captured_log_without_a_tokenizer(tmp_path: Path, capsys, strict: bool) -> None:
    out = tmp_path / "rec.json"
    args = ["analyze", str(FIXTURE), "--no-store", "-q", "--json", str(out)] + (["--strict"] if strict else [])
    code = main(args)
    if strict:
        assert code == 2 and "truncated" in capsys.readouterr().err
        return
    assert code == 0
    record = json.loads(out.read_text())
    assert record["tokenizer"]["spec"] == "engine" and record["summary"]["exact"] is True
    files = record["inputs"]["files"]
    assert files[0]["reader"] == "vllm-log" and files[0]["formats"] == {"vllm-log": 21}
    assert record["errors"]["by_reason"] == {"truncated": 2}
    assert record["inputs"]["per_model"]["tiny-qwen3"]["requests"] == 21


def test_auto_with_a_model_outside_the_family_table_still_uses_the_engine_ids(tmp_path: Path) -> None:
    import prefixplan

    lines = [
        line.replace('"model":"tiny-qwen3"', '"model":"acme-finetune"').replace("['tiny-qwen3']", "['acme-finetune']")
        for line in _lines()
    ]
    analysis = prefixplan.analyze(str(_write(tmp_path, lines)), tokenizer="auto", simulate=False, rag_whatif=False)
    record = analysis.record
    assert record.summary.requests == 21 and record.tokenizer.spec == "engine" and record.summary.exact
    assert record.inputs["engine_ids"] == {"used": 21} and set(record.inputs["models"]) == {"acme-finetune"}


def test_paired_bodies_are_not_kept_for_the_whole_log() -> None:
    from prefixplan.logs.vllm_log import _MAX_UNPAIRED, VLLMLogReader

    real = [line for line in _lines() if "pplog-00 " in line or "pplog-00:" in line]
    assert len(real) == 3  # the captured JSON body, details and received lines of one request
    reader = VLLMLogReader("server.log", "forced")
    emitted = kept = 0
    for i in range(_MAX_UNPAIRED + 2000):
        for j, line in enumerate(real):
            for item in reader.feed(3 * i + j + 1, line.replace("pplog-00", f"pplog-{i:05d}")):
                emitted += not hasattr(item, "reason")
        kept = max(kept, len(reader._bodies))
    emitted += sum(not hasattr(item, "reason") for item in reader.finish())
    assert emitted == _MAX_UNPAIRED + 2000 and kept <= _MAX_UNPAIRED


def test_an_integer_past_the_digit_limit_is_a_bad_line_not_a_crash(tmp_path: Path) -> None:
    huge = "9" * 5000
    path = tmp_path / "log.jsonl"
    good = json.dumps({"messages": [{"role": "user", "content": "hi"}]})
    path.write_text(good + "\n" + '{"messages": [{"role": "user", "content": "hi"}], "timestamp": ' + huge + "}\n")
    requests, errors = _read(path)
    assert len(requests) == 1 and [(e.line_no, e.reason[:9]) for e in errors.samples] == [(2, "bad JSON:")]
    csv = tmp_path / "log.csv"
    csv.write_text('messages\n"[{""role"": ""user"", ""content"": ""hi""}]"\n"[' + huge + ']"\n')
    requests, errors = _read(csv)
    assert len(requests) == 1 and [(e.line_no, e.reason[:9]) for e in errors.samples] == [(3, "bad JSON:")]
