"""SGLang server logs (format ``sglang-log``).

SGLang does not run on the CPU machines this project is tested on, so these logs are written here
in the shapes SGLang 0.5 documents and writes (``sglang/srt/utils/request_logger.py``, sglang
0.5.23): ``[time] Receive: obj=GenerateReqInput(...)``, ``Receive OpenAI: obj={...}``,
``Finish: obj=..., out={...}``, the JSON events of ``--log-requests-format json``, and the cut form
of ``--log-requests-level 2``. The token ids in them are real engine ids: those of the requests in
the captured vLLM log (the same Qwen3 tokenizer and chat template).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from prefixplan.cli.app import main
from prefixplan.logs import LineErrors, ReadOptions, iter_requests

DATA = Path(__file__).resolve().parent / "data" / "logs"


@dataclasses.dataclass
class GenerateReqInput:  # the fields SGLang's request logger prints, in its order (a subset)
    rid: Any = None
    text: Any = None
    input_ids: Any = None
    sampling_params: Any = None
    stream: bool = False
    lora_path: Any = None
    extra_key: Any = None
    cache_salt: Any = None


def sglang_text(value: Any, max_length: int) -> str:
    """SGLang's text form of a logged object: long strings and lists cut to head ... tail."""
    if isinstance(value, str):
        if len(value) > max_length:
            half = max_length // 2
            return f"{value[:half]!r} ... {value[-half:]!r}"
        return repr(value)
    if isinstance(value, (list, tuple)):
        if len(value) > max_length:
            half = max_length // 2
            return f"{list(value[:half])} ... {list(value[-half:])}"
        return str(list(value))
    if isinstance(value, dict):
        return "{" + ", ".join(f"'{k}': {sglang_text(v, max_length)}" for k, v in value.items()) + "}"
    if dataclasses.is_dataclass(value):
        fields = ", ".join(
            f"{f.name}={sglang_text(getattr(value, f.name), max_length)}" for f in dataclasses.fields(value)
        )
        return f"{type(value).__name__}({fields})"
    return str(value)


def sglang_json(value: Any, max_length: int) -> Any:
    """The JSON form (``--log-requests-format json``): cut strings and lists keep a ``...`` marker."""
    if isinstance(value, str) and len(value) > max_length:
        half = max_length // 2
        return value[:half] + "..." + value[-half:]
    if isinstance(value, (list, tuple)):
        if len(value) > max_length:
            half = max_length // 2
            return [*value[:half], "...", *value[-half:]]
        return list(value)
    if isinstance(value, dict):
        return {k: sglang_json(v, max_length) for k, v in value.items()}
    if dataclasses.is_dataclass(value):
        return {f.name: sglang_json(getattr(value, f.name), max_length) for f in dataclasses.fields(value)}
    return value


def _engine_requests() -> list:
    """The captured vLLM requests, plus one longer than 2048 tokens (four of their prompts joined)."""
    import dataclasses as dc

    found = list(iter_requests([str(DATA / "vllm-0.32-debug.log.gz")], ReadOptions(), LineErrors()))
    joined = tuple(t for r in found[:4] for t in r.prompt_ids)
    assert len(joined) > 2048
    return [*found, dc.replace(found[0], id="long", prompt_ids=joined)]


def _log(tmp_path: Path, *, level: int = 3, fmt: str = "text", extra: list[str] | None = None) -> tuple[Path, list]:
    """An SGLang log of the captured requests at ``--log-requests-level level``."""
    requests = _engine_requests()
    max_length = {2: 2048}.get(level, 1 << 30)
    lines = [
        "[2025-12-01 08:00:00] server_args={'model_path': '/models/qwen3', 'served_model_name': 'qwen3-8b', 'tp_size': 1}"
    ]
    for k, r in enumerate(requests):
        stamp = f"[2025-12-01 08:{k // 60:02d}:{k % 60:02d}]"
        obj = GenerateReqInput(
            rid=f"rid-{k}", input_ids=list(r.prompt_ids), sampling_params={"max_new_tokens": 1, "temperature": 0.0}
        )
        openai_body = {"model": "qwen3-8b", "messages": list(r.messages or [])[:1], "max_tokens": 1}
        out = {
            "text": "ok",
            "meta_info": {
                "id": f"rid-{k}",
                "prompt_tokens": len(r.prompt_ids),
                "cached_tokens": 128 * k,
                "completion_tokens": 1,
            },
        }
        if fmt == "json":
            received = {"rid": obj.rid, "obj": sglang_json(obj, max_length)}
            if level <= 1:
                received["obj"] = {key: v for key, v in received["obj"].items() if key not in ("text", "input_ids")}
            lines.append(
                f"{stamp} "
                + json.dumps(
                    {"timestamp": "2025-12-01T08:00:00.123456", "event": "request.received.openai", "obj": openai_body}
                )
            )
            lines.append(
                f"{stamp} "
                + json.dumps(
                    {
                        "timestamp": f"2025-12-01T08:{k // 60:02d}:{k % 60:02d}.5",
                        "event": "request.received",
                        **received,
                    }
                )
            )
            lines.append(
                f"{stamp} "
                + json.dumps(
                    {
                        "timestamp": "2025-12-01T08:00:01",
                        "event": "request.finished",
                        "rid": obj.rid,
                        "obj": {"rid": obj.rid},
                        "out": out,
                    }
                )
            )
            continue
        shown = sglang_text(obj, max_length)
        if level <= 1:  # levels 0 and 1 skip text and input_ids (level 0 also sampling_params)
            shown = shown.replace(f", input_ids={sglang_text(obj.input_ids, max_length)}", "").replace(
                ", text=None", ""
            )
        if level >= 2:
            lines.append(f"{stamp} Receive OpenAI: obj={sglang_text(openai_body, 2048)}")
        lines.append(f"{stamp} Receive: obj={shown}")
        lines.append(f"{stamp} Prefill batch. #new-seq: 1, #new-token: 64, #cached-token: 0, token usage: 0.00")
        lines.append(f"{stamp} Finish: obj={shown}, out={sglang_text(out, max_length)}")
    lines += extra or []
    path = tmp_path / f"sglang-{fmt}-{level}.log"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path, requests


def _read(path: Path) -> tuple[list, LineErrors]:
    errors = LineErrors()
    return list(iter_requests([str(path)], ReadOptions(), errors)), errors


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_level_3_log_gives_every_request_with_the_engine_ids(tmp_path: Path, fmt: str) -> None:
    path, engine = _log(tmp_path, fmt=fmt)
    requests, errors = _read(path)
    assert errors.count == 0, errors.summary()
    assert errors.sources[str(path)].reader == "sglang-log"
    assert [r.prompt_ids for r in requests] == [r.prompt_ids for r in engine]
    assert {r.model for r in requests} == {"qwen3-8b"} and {r.format for r in requests} == {"sglang-log"}
    assert [r.logged_cached_tokens for r in requests] == [128 * k for k in range(len(engine))]
    assert requests[0].output_length == 1 and requests[0].id == "rid-0"
    assert requests[1].time - requests[0].time == pytest.approx(1.0)


def test_level_2_cuts_long_inputs_and_they_are_reported(tmp_path: Path) -> None:
    for fmt in ("text", "json"):
        path, engine = _log(tmp_path, level=2, fmt=fmt)
        requests, errors = _read(path)
        long = [k for k, r in enumerate(engine) if len(r.prompt_ids) > 2048]
        assert len(long) == 1 and errors.by_reason == {"truncated": 1}
        assert errors.samples[0].reason.startswith(f"truncated: request rid-{long[0]}: input cut")
        assert len(requests) == len(engine) - 1


def test_levels_0_and_1_log_no_prompt_and_analyze_says_which_flag(tmp_path: Path, capsys) -> None:
    path, engine = _log(tmp_path, level=1)
    requests, errors = _read(path)
    assert requests == [] and errors.by_reason == {"no prompt": len(engine)}
    code = main(["analyze", str(path), "--no-store", "-q"])
    err = capsys.readouterr().err
    assert code == 2 and "--log-requests-level 3" in err


def test_malformed_and_unknown_lines_are_reported_by_line(tmp_path: Path) -> None:
    extra = [
        "[2025-12-01 09:00:00] Receive: obj=GenerateReqInput(rid='bad', input_ids=[1, 2, 3",
        "[2025-12-01 09:00:01] Receive: obj=ScoreReqInput(rid='s1', query='q')",
        '[2025-12-01 09:00:02] {"timestamp": "2025-12-01T09:00:02", "event": "request.aborted", "rid": "x", "obj": {}}',
        "[2025-12-01 09:00:03] Decode batch. #running-req: 1, #token: 100",
    ]
    path, engine = _log(tmp_path, extra=extra)
    requests, errors = _read(path)
    n = len(path.read_text().splitlines())
    reasons = {s.line_no: s.reason for s in errors.samples}
    assert reasons[n - 3].startswith("bad request line: Receive")
    assert reasons[n - 2].startswith("unknown record: Receive obj is ScoreReqInput")
    assert reasons[n - 1].startswith("unknown record: event 'request.aborted'")
    assert errors.count == 3 and len(requests) == len(engine)


def test_batch_requests_and_lora(tmp_path: Path) -> None:
    ids = [r.prompt_ids for r in _engine_requests()[:2]]
    obj = GenerateReqInput(
        rid=["a", "b"],
        input_ids=[list(i) for i in ids],
        sampling_params=[{"max_new_tokens": 2}] * 2,
        lora_path="sql-lora",
    )
    path = tmp_path / "batch.log"
    path.write_text(f"[2025-12-01 08:00:00] Receive: obj={sglang_text(obj, 1 << 30)}\n")
    requests, errors = _read(path)
    assert [r.id for r in requests] == ["a", "b"] and [r.prompt_ids for r in requests] == ids
    assert {r.lora for r in requests} == {"sql-lora"} and errors.count == 0
