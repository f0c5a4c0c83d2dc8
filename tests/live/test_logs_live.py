"""Live: a real vLLM server that logs its requests (``--enable-log-requests``, DEBUG,
``--max-log-len`` :data:`capture.MAX_LOG_LEN`; the ``vllm_logging_server`` fixture); this test sends the request set of
scripts/capture_vllm_log.py, captures the server's log and checks, must-show of issue 13:

- the token ids in the log equal the server's ``/tokenize`` for the same requests;
- analysing the log with no tokenizer gives the same analysis (prompt tokens, reusable tokens, hit
  rates, every ranked candidate's namespace, length, hits, reusable and marginal tokens) as
  analysing the same requests as JSON lines rendered with ``hf:`` and the server's tokenizer --
  both totals are printed and written to test-artifacts/live-summary.json;
- the requests longer than ``--max-log-len`` are reported as truncated, with their count;
- the committed fixture (tests/data/logs/vllm-0.32-debug.log.gz) holds the same token ids the
  server logs today.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest

import prefixplan
from prefixplan.logs import LineErrors, ReadOptions, iter_requests

pytestmark = pytest.mark.live

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
FIXTURE = ROOT / "tests" / "data" / "logs" / "vllm-0.32-debug.log.gz"


def capture_module() -> Any:
    """scripts/capture_vllm_log.py (the request set and the log extraction)."""
    spec = importlib.util.spec_from_file_location("capture_vllm_log_live", ROOT / "scripts" / "capture_vllm_log.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _sent_id(request_id: str) -> str:
    base = request_id.removeprefix("chatcmpl-").removeprefix("cmpl-")
    return base[: -len("-0")] if request_id.startswith("cmpl-") and base.endswith("-0") else base


def _summary(key: str, value: object) -> None:
    path = ARTIFACTS / "live-summary.json"
    path.parent.mkdir(exist_ok=True)
    data = json.loads(path.read_text()) if path.is_file() else {}
    data[key] = value
    path.write_text(json.dumps(data, indent=2) + "\n")
    print(f"{key}: {json.dumps(value)}")


def _candidates(analysis: prefixplan.Analysis) -> list[tuple[object, ...]]:
    return [
        (c.namespace, c.length, c.hits, c.reusable_tokens, c.marginal_tokens, c.parent) for c in analysis.candidates
    ]


def test_vllm_request_log_equals_tokenize_and_the_hf_analysis(vllm_logging_server, tmp_path: Path) -> None:
    capture = capture_module()
    model = vllm_logging_server.served_model_name
    sent = capture.send_requests(vllm_logging_server.url, model)
    tokenized = {item["id"]: capture.tokenize(vllm_logging_server.url, model, item) for item in sent}
    tokenized_as_chat = {
        item["id"]: capture.tokenize(vllm_logging_server.url, model, item, null_content_as_empty=True) for item in sent
    }
    null_turns = {s["id"] for s in sent if capture.has_null_content_tool_turn(s)}
    log = ARTIFACTS / "vllm-request-log.txt"
    log.write_text(
        capture.extract(
            vllm_logging_server.log_path.read_text(encoding="utf-8", errors="replace"), [s["id"] for s in sent]
        )
    )

    # 1. the ids the engine logged are its /tokenize ids, request by request
    errors = LineErrors()
    logged = list(iter_requests([str(log)], ReadOptions(), errors))
    long = {s["id"] for s in sent if s["long"]}
    assert {_sent_id(r.id) for r in logged} == {s["id"] for s in sent} - long
    # At DEBUG, vLLM 0.32's /tokenize loses the tool calls of an assistant turn whose content is null
    # (its chat endpoint, which wrote the log, keeps them and renders null as ""): those requests are
    # compared with /tokenize of content "".
    plain = [r for r in logged if _sent_id(r.id) not in null_turns]
    equal = sum(list(r.prompt_ids) == tokenized[_sent_id(r.id)] for r in plain)
    assert equal == len(plain) >= 12
    with_tools = [r for r in logged if _sent_id(r.id) in null_turns]
    equal_as_chat = sum(list(r.prompt_ids) == tokenized_as_chat[_sent_id(r.id)] for r in with_tools)
    assert equal_as_chat == len(with_tools) == 6
    assert len(logged) == len(sent) - len(long)

    # 2. cut by --max-log-len: reported, with the count, never analysed as short
    assert errors.by_reason.get("truncated") == len(long) == 2
    assert all(f"cut at {capture.MAX_LOG_LEN} tokens" in s.reason for s in errors.samples if "truncated" in s.reason)
    assert all(len(tokenized[i]) > capture.MAX_LOG_LEN for i in long)

    # 3. the analysis from the log (no tokenizer) equals the one from the requests rendered with hf:
    bodies = tmp_path / "requests.jsonl"
    bodies.write_text("".join(json.dumps(s["body"]) + "\n" for s in sent if not s["long"]))
    from_log = prefixplan.analyze(str(log), simulate=False, rag_whatif=False, top=0)
    from_hf = prefixplan.analyze(
        str(bodies), tokenizer=f"hf:{vllm_logging_server.model_dir}", simulate=False, rag_whatif=False, top=0
    )
    a, b = from_log.record.summary, from_hf.record.summary
    assert from_log.record.tokenizer.spec == "engine" and a.exact and b.exact
    assert (a.requests, a.prompt_tokens, a.reusable_tokens, a.hit_rate_tokens, a.hit_rate_requests) == (
        b.requests,
        b.prompt_tokens,
        b.reusable_tokens,
        b.hit_rate_tokens,
        b.hit_rate_requests,
    )
    assert _candidates(from_log) == _candidates(from_hf) and len(from_log.candidates) >= 3
    _summary(
        "vllm_request_log",
        {
            "requests_sent": len(sent),
            "requests_read_from_log": len(logged),
            "ids_equal_to_tokenize": equal,
            "ids_equal_to_tokenize_with_null_content_as_empty": equal_as_chat,
            "tokenize_drops_tool_calls_of_null_content_turns": sum(
                list(r.prompt_ids) != tokenized[_sent_id(r.id)] for r in with_tools
            ),
            "truncated_reported": errors.by_reason.get("truncated"),
            "from_log": {
                "prompt_tokens": a.prompt_tokens,
                "reusable_tokens": a.reusable_tokens,
                "candidates": a.candidates,
            },
            "from_hf": {
                "prompt_tokens": b.prompt_tokens,
                "reusable_tokens": b.reusable_tokens,
                "candidates": b.candidates,
            },
        },
    )

    # 4. the committed fixture carries the ids this server logs today
    fixture = tmp_path / "fixture.log"
    fixture.write_bytes(gzip.decompress(FIXTURE.read_bytes()))
    committed = {r.id: r.prompt_ids for r in iter_requests([str(fixture)], ReadOptions(), LineErrors())}
    assert committed == {r.id: r.prompt_ids for r in logged}
