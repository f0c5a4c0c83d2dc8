"""Live tests against a real vLLM (CPU build, tiny random-weight model, real Qwen3 tokenizer).

Must-show of issue 5:
- analyze a log with the server's tokenizer -> warm top-N -> replay the log in order -> every
  request's reported cached_tokens equals what prefixplan predicts (prefixplan.simulation, infinite
  cache, the server's block size, with warm-ups and probes included as the first requests);
- the 50-request token-equality set (tests/chat_cases.py) equals this server's /tokenize;
- cold vs warm TTFT of the warmed prefixes; calibrate on live timings.
Figures are written to test-artifacts/live-summary.json.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import httpx
import pytest

from prefixplan.cli.app import main
from prefixplan.errors import ExitCode

pytestmark = pytest.mark.live

ROOT = Path(__file__).resolve().parents[2]
SUMMARY = ROOT / "test-artifacts" / "live-summary.json"
sys.path.insert(0, str(ROOT / "tests"))


def _summary(key: str, value: object) -> None:
    SUMMARY.parent.mkdir(exist_ok=True)
    data = json.loads(SUMMARY.read_text()) if SUMMARY.is_file() else {}
    data[key] = value
    SUMMARY.write_text(json.dumps(data, indent=2) + "\n")
    print(f"{key}: {json.dumps(value)}")


def test_chat_cases_equal_server_tokenize(vllm_server) -> None:
    from chat_cases import cases

    from prefixplan.core.types import Request
    from prefixplan.render.hf import HFRenderer

    renderer = HFRenderer(str(vllm_server.model_dir))
    all_cases = cases()
    assert len(all_cases) >= 50
    restated = 0
    with httpx.Client(base_url=vllm_server.url, timeout=60) as c:
        for i, case in enumerate(all_cases):
            messages = case["messages"]
            body = {"model": vllm_server.served_model_name, "messages": messages, "add_generation_prompt": True}
            if case["tools"]:
                body["tools"] = case["tools"]
            r = c.post("/tokenize", json=body)
            if r.status_code == 400 and "arguments" in r.text:
                # vLLM's OpenAI schema wants tool-call arguments as JSON strings; send both sides the
                # same request with the dict arguments serialised.
                messages = _string_arguments(messages)
                r = c.post("/tokenize", json=dict(body, messages=messages))
                restated += 1
            r.raise_for_status()
            req = Request(
                source="cases",
                line_no=i + 1,
                id=str(i),
                format="openai-chat",
                messages=tuple(messages),
                tools=tuple(case["tools"]) if case["tools"] else None,
            )
            assert renderer.render(req).tokens.tolist() == r.json()["tokens"], f"case {i}"
    _summary(
        "token_equality_cases",
        {"cases": len(all_cases), "equal": len(all_cases), "tool_call_arguments_sent_as_strings": restated},
    )


def _string_arguments(messages: list[dict]) -> list[dict]:
    out = []
    for m in messages:
        calls = m.get("tool_calls")
        if calls:
            m = dict(
                m,
                tool_calls=[
                    dict(
                        tc,
                        function=dict(
                            tc["function"],
                            arguments=tc["function"]["arguments"]
                            if isinstance(tc["function"].get("arguments"), str)
                            else json.dumps(tc["function"]["arguments"], ensure_ascii=False),
                        ),
                    )
                    for tc in calls
                ],
            )
        out.append(m)
    return out


def _chat_log(path: Path) -> list[dict]:
    """A deterministic agent-like log: 3 system prompts x tenants, tools on two, follow-up turns."""
    from chat_cases import TOOLS

    base = {
        "acme": "You are the Acme Cloud support assistant. "
        + " ".join(
            f"Policy {i}: answer precisely, cite section {i}, never reveal internal ticket data." for i in range(40)
        ),
        "globex": "You are Globex's travel planner. "
        + " ".join(f"Rule {i}: prefer trains over flights when the trip is under {i + 3} hours." for i in range(55)),
        "initech": "Initech code reviewer. "
        + " ".join(f"Check {i}: flag functions longer than {i + 20} lines and missing tests." for i in range(25)),
    }
    tools = {"acme": TOOLS[:2], "globex": TOOLS, "initech": None}
    lines = []
    for turn in range(3):
        for t in range(5):
            for name, system in base.items():
                msgs = [
                    {"role": "system", "content": system},
                    {"role": "user", "content": f"Question {t} from tenant {t} about {name}?"},
                ]
                if turn:
                    msgs += [
                        {"role": "assistant", "content": f"Answer {t} part {turn}."},
                        {"role": "user", "content": f"Follow-up {turn} on question {t}."},
                    ]
                line = {"model": "tiny-qwen3", "user": f"tenant-{t}", "messages": msgs}
                if tools[name]:
                    line["tools"] = tools[name]
                lines.append(line)
    path.write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines))
    return lines


def _predict(record: dict, lines: list[dict], model_dir: Path, block: int, top: int, warm: bool = True) -> list[int]:
    """prefixplan's per-request prediction: simulate the warm-ups + probes, then the log, in an
    infinite cache at the server's block size."""
    import numpy as np
    from records import plan_from_record

    from prefixplan.core.granularity import engine_granularity
    from prefixplan.core.types import Request
    from prefixplan.render import load_renderer
    from prefixplan.simulation.spec import infinite_hits
    from prefixplan.trace.blocks import build_trace
    from prefixplan.trace.requests import SimRequest
    from prefixplan.warming.run import probe_prompt, warm_prompt

    renderer = load_renderer(f"hf:{model_dir}")
    plan = plan_from_record(record, top=top)
    sims: list[SimRequest] = []
    for item in plan.items if warm else ():
        for ids in (warm_prompt(item.token_ids), probe_prompt(item.token_ids)):
            sims.append(
                SimRequest(time=len(sims), namespace="m", tokens=np.asarray(ids, dtype=np.uint32), index=len(sims))
            )
    n_warm = len(sims)
    for i, line in enumerate(lines):
        req = Request(
            source="log",
            line_no=i + 1,
            id=str(i),
            format="openai-chat",
            messages=tuple(line["messages"]),
            tools=tuple(line["tools"]) if line.get("tools") else None,
        )
        sims.append(SimRequest(time=len(sims), namespace="m", tokens=renderer.render(req).tokens, index=len(sims)))
    trace = build_trace(sims, engine_granularity("vllm", block))
    hits = infinite_hits(trace)
    return [int(h) * block for h in hits[n_warm:]]


def test_end_to_end_analyze_warm_replay_matches_prediction(vllm_server, tmp_path: Path) -> None:
    vllm_server.reset()
    log = tmp_path / "log.jsonl"
    lines = _chat_log(log)
    rec_path = tmp_path / "rec.json"
    top = 6
    code = main(
        [
            "analyze",
            str(log),
            "--tokenizer",
            f"hf:{vllm_server.model_dir}",
            "--block-size",
            str(vllm_server.block_size),
            "--top",
            "20",
            "--json",
            str(rec_path),
            "--no-store",
            "-q",
        ]
    )
    assert code == 0
    record = json.loads(rec_path.read_text())
    assert record["granularity"]["block_size"] == vllm_server.block_size
    out = tmp_path / "warm.json"
    code = main(
        [
            "warm",
            "--analysis",
            str(rec_path),
            "--endpoint",
            vllm_server.url,
            "--top",
            str(top),
            "--json",
            str(out),
            "--timeout",
            "120",
        ]
    )
    warm = json.loads(out.read_text())
    assert code == ExitCode.OK and warm["status"] == "ready", warm
    assert warm["replicas"][0]["tokenizer_check"] == "match" and warm["replicas"][0]["engine"] == "vllm"
    for r in warm["results"]:
        assert r["status"] == "verified" and r["cached_tokens"] >= r["expected_cached"] > 0
    predicted = _predict(record, lines, vllm_server.model_dir, vllm_server.block_size, top)
    reported, prompt_tokens = [], []
    with httpx.Client(base_url=vllm_server.url, timeout=120) as c:
        for line in lines:
            body = {
                "model": vllm_server.served_model_name,
                "messages": line["messages"],
                "max_tokens": 1,
                "temperature": 0,
            }
            if line.get("tools"):
                body["tools"] = line["tools"]
            r = c.post("/v1/chat/completions", json=body)
            r.raise_for_status()
            usage = r.json()["usage"]
            reported.append(usage["prompt_tokens_details"]["cached_tokens"])
            prompt_tokens.append(usage["prompt_tokens"])
    mismatches = [(i, p, r) for i, (p, r) in enumerate(zip(predicted, reported, strict=False)) if p != r]
    ttft = [
        {
            "key": r["key"],
            "tokens": r["tokens"],
            "cold_ms": round(1000 * r["cold_ttft_s"], 2),
            "probe_ms": round(1000 * r["warm_ttft_s"], 2),
            "cached": r["cached_tokens"],
        }
        for r in warm["results"]
    ]
    _summary(
        "end_to_end",
        {
            "requests": len(lines),
            "prompt_tokens": sum(prompt_tokens),
            "predicted_cached": sum(predicted),
            "reported_cached": sum(reported),
            "predicted_cached_without_warm": sum(
                _predict(record, lines, vllm_server.model_dir, vllm_server.block_size, top, warm=False)
            ),
            "mismatches": len(mismatches),
            "warmed": len(warm["results"]),
            "block_size": vllm_server.block_size,
            "warm_ttft": ttft,
        },
    )
    assert not mismatches, f"(request, predicted, reported): {mismatches[:10]}"
    assert sum(reported) > 0


def test_warm_cold_vs_probe_ttft_and_status(vllm_server, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    vllm_server.reset()
    with httpx.Client(base_url=vllm_server.url, timeout=60) as c:
        ids = c.post(
            "/tokenize",
            json={
                "model": vllm_server.served_model_name,
                "prompt": "A long shared system prompt about caching. " * 700,
                "add_special_tokens": False,
            },
        ).json()["tokens"][:6000]
    rec = {
        "schema_version": 1,
        "tokenizer": {"spec": f"hf:{vllm_server.model_dir}", "label": "qwen3"},
        "granularity": {"block_size": vllm_server.block_size},
        "candidates": [
            {
                "rank": 1,
                "name": "big",
                "key": "big@v1",
                "length": len(ids),
                "token_ids": ids,
                "marginal_tokens": 1,
                "parent": None,
            }
        ],
    }
    path = tmp_path / "r.json"
    path.write_text(json.dumps(rec))
    code = main(["warm", "--analysis", str(path), "--endpoint", vllm_server.url, "--json", "-"])
    data = json.loads(capsys.readouterr().out)
    r = data["results"][0]
    assert code == 0 and r["status"] == "verified"
    assert r["cached_tokens"] >= (len(ids) // vllm_server.block_size) * vllm_server.block_size
    assert r["warm_ttft_s"] < r["cold_ttft_s"], r
    _summary(
        "ttft_6000_tokens",
        {"cold_ms": round(1000 * r["cold_ttft_s"], 2), "probe_ms": round(1000 * r["warm_ttft_s"], 2)},
    )
    capsys.readouterr()
    code = main(["status", "--endpoint", vllm_server.url, "--target", "0.0", "--json", "-"])
    st = json.loads(capsys.readouterr().out)["replicas"][0]
    assert code == 0 and st["engine"] == "vllm" and st["block_size"] == vllm_server.block_size
    assert st["hits"] > 0 and 0 < st["hit_rate"] <= 1
    assert any(k["key"] == "big@v1" and k["last_verified"] for k in st["keys"])


def test_tokenizer_mismatch_live(vllm_server, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rec = {
        "schema_version": 1,
        "tokenizer": {
            "spec": "other",
            "label": "some-other-tokenizer",
            "fingerprint": "fp-other",
            "probe_ids": [1, 2, 3],
        },
        "granularity": {"block_size": vllm_server.block_size},
        "candidates": [
            {
                "rank": 1,
                "name": "x",
                "length": 300,
                "token_ids": list(range(1000, 1300)),
                "marginal_tokens": 1,
                "parent": None,
            }
        ],
    }
    path = tmp_path / "r.json"
    path.write_text(json.dumps(rec))
    code = main(["warm", "--analysis", str(path), "--endpoint", vllm_server.url])
    out = capsys.readouterr().out
    assert code == ExitCode.ENDPOINT
    assert "tokenizer mismatch" in out and "some-other-tokenizer" in out and vllm_server.served_model_name in out


def test_calibrate_live(vllm_server, tmp_path: Path) -> None:
    from prefixplan.warming.calibrate import calibrate_endpoint

    vllm_server.reset()
    profile, path = calibrate_endpoint(
        vllm_server.url,
        lengths=[256, 1024, 2048, 4096],
        fractions=[0.0, 0.5, 0.9],
        repeats=2,
        out=tmp_path / "profile.yaml",
        timeout=120,
    )
    f = profile.fit
    by = {}
    for s in profile.samples:
        by.setdefault((s.new + s.cached, s.cached > 0), []).append(s.ttft_s)
    import statistics

    cold = statistics.median(by[(4096, False)])
    warm90 = statistics.median(t for (n, w), ts in by.items() if n == 4096 and w for t in ts)
    assert path is not None and path.is_file()
    # What the data can show: reuse is faster, and a prefill model has no negative cost (the split
    # between the per-token and attention terms is not identifiable on this tiny CPU model).
    assert warm90 < cold
    assert min(f.a_s, f.b_s_per_token, f.c_s_per_token2) >= 0 and f.b_s_per_token + f.c_s_per_token2 > 0
    mean = sum(s.ttft_s for s in profile.samples) / len(profile.samples)
    assert f.rmse_s < 0.5 * mean, (f.rmse_s, mean)
    _summary(
        "calibrate",
        {
            "a_ms": round(1000 * f.a_s, 3),
            "b_us_per_token": round(1e6 * f.b_s_per_token, 4),
            "c_ns_per_token2": round(1e9 * f.c_s_per_token2, 6),
            "c_stderr_ns": round(1e9 * f.stderr[2], 6),
            "attention_measurable": f.attention_measurable,
            "rmse_ms": round(1000 * f.rmse_s, 3),
            "r2": round(f.r2, 3),
            "cold_4096_ms": round(1000 * cold, 2),
            "warm90_4096_ms": round(1000 * warm90, 2),
            "samples": f.n_samples,
        },
    )


def _live_recipes(root: Path) -> tuple[Path, str, list[dict], list[str]]:
    """Two recipes: system + tools (chat), and system + documents leading the user message."""
    from chat_cases import TOOLS

    system = "You are the Acme Cloud support assistant. " + " ".join(
        f"Rule {i}: answer precisely and cite section {i} of the handbook." for i in range(30)
    )
    docs = [f"## Section {i}\n\nThe quota for tier {i} is {i * 10} requests per minute.\n" for i in range(12)]
    d = root / "recipes"
    (d / "parts" / "tools").mkdir(parents=True)
    (d / "parts" / "docs").mkdir(parents=True)
    (d / "parts" / "system.md").write_text(system)
    for i, tool in enumerate(TOOLS):
        (d / "parts" / "tools" / f"{i:02d}.json").write_text(json.dumps(tool, indent=2))
    for i, text in enumerate(docs):
        (d / "parts" / "docs" / f"{i:02d}.md").write_text(text)
    (d / "acme.yaml").write_text(
        "prefixes:\n"
        "  - name: acme-support\n    version: 4\n    render: chat\n    system: {file: parts/system.md}\n"
        "    tools: [{glob_tools}]\n"
        "  - name: acme-handbook\n    version: 1\n    render: chat\n    system: {file: parts/system.md}\n"
        "    documents: [{glob: 'parts/docs/*.md'}]\n".replace(
            "{glob_tools}", ", ".join(f"parts/tools/{i:02d}.json" for i in range(len(TOOLS)))
        )
    )
    return d, system, TOOLS, docs


def test_warm_recipes_live_then_real_chat_request_hits(vllm_server, tmp_path: Path) -> None:
    """--recipes rendered by the server's own /tokenize (default), warmed, then real chat requests
    (system + tools + a new question; system + documents + a new question) reuse the prefix."""
    from prefixplan.engines.endpoint import Endpoint
    from prefixplan.keys.recipes import load_recipes
    from prefixplan.warming.recipes import source_from_recipes

    vllm_server.reset()
    rdir, system, tools, docs = _live_recipes(tmp_path)
    out = tmp_path / "warm.json"
    code = main(["warm", "--recipes", str(rdir), "--endpoint", vllm_server.url, "--json", str(out), "--timeout", "120"])
    warm = json.loads(out.read_text())
    assert code == ExitCode.OK and warm["status"] == "ready", warm
    assert warm["replicas"][0]["tokenizer_check"] == "match"
    by_key = {r["key"]: r for r in warm["results"]}
    assert set(by_key) == {"acme-support@v4", "acme-handbook@v1"}
    # The local Qwen3 rendering (hf:) of the recipes equals the server's (vllm:).
    local = source_from_recipes(load_recipes(rdir), tokenizer=f"hf:{vllm_server.model_dir}")
    remote = source_from_recipes(load_recipes(rdir), endpoint=Endpoint(vllm_server.url))
    assert [c.token_ids for c in local.candidates] == [c.token_ids for c in remote.candidates]
    block = vllm_server.block_size
    figures = {}
    with httpx.Client(base_url=vllm_server.url, timeout=120) as c:
        for key, body in (
            (
                "acme-support@v4",
                {
                    "messages": [
                        {"role": "system", "content": system},
                        {"role": "user", "content": "My deployment in eu-west fails; why?"},
                    ],
                    "tools": tools,
                },
            ),
            (
                "acme-handbook@v1",
                {
                    "messages": [
                        {"role": "system", "content": system},
                        {"role": "user", "content": "".join(docs) + "What is the tier 7 quota?"},
                    ]
                },
            ),
        ):
            r = c.post(
                "/v1/chat/completions",
                json=dict(body, model=vllm_server.served_model_name, max_tokens=1, temperature=0),
            )
            r.raise_for_status()
            cached = r.json()["usage"]["prompt_tokens_details"]["cached_tokens"]
            tokens = by_key[key]["tokens"]
            assert cached >= (tokens // block) * block > 0, (key, cached, tokens)
            figures[key] = {
                "prefix_tokens": tokens,
                "real_request_cached": cached,
                "prompt_tokens": r.json()["usage"]["prompt_tokens"],
                "cold_ms": round(1000 * by_key[key]["cold_ttft_s"], 2),
                "probe_ms": round(1000 * by_key[key]["warm_ttft_s"], 2),
            }
    _summary("recipes", figures)


def test_warm_through_chat_requests_live(vllm_server, tmp_path: Path) -> None:
    """The generic OpenAI-compatible path (--engine openai-compatible --via chat) on the real vLLM:
    recipes and analysis candidates (their example requests re-read from the log) are warmed with
    chat requests the server renders itself, verified by usage.cached_tokens."""
    vllm_server.reset()
    rdir, *_ = _live_recipes(tmp_path)
    out = tmp_path / "chat.json"
    common = [
        "--endpoint",
        vllm_server.url,
        "--engine",
        "openai-compatible",
        "--via",
        "chat",
        "--block-size",
        str(vllm_server.block_size),
        "--timeout",
        "120",
    ]
    code = main(["warm", "--recipes", str(rdir), *common, "--json", str(out)])
    data = json.loads(out.read_text())
    assert code == ExitCode.OK and data["status"] == "ready", data
    assert all(r["via"] == "chat" and r["method"] == "usage" for r in data["results"])
    assert data["replicas"][0]["engine"] == "openai-compatible"
    log = tmp_path / "log.jsonl"
    _chat_log(log)
    rec = tmp_path / "rec.json"
    assert (
        main(
            [
                "analyze",
                str(log),
                "--tokenizer",
                f"hf:{vllm_server.model_dir}",
                "--block-size",
                str(vllm_server.block_size),
                "--top",
                "20",
                "--json",
                str(rec),
                "--no-store",
                "-q",
            ]
        )
        == 0
    )
    record = json.loads(rec.read_text())
    keep = [c for c in record["candidates"] if c["label"] in ("system", "tools", "system+tools")]
    assert keep
    record["candidates"] = keep
    rec.write_text(json.dumps(record))
    vllm_server.reset()
    out2 = tmp_path / "chat2.json"
    code = main(["warm", "--analysis", str(rec), "--top", "20", *common, "--json", str(out2)])
    data2 = json.loads(out2.read_text())
    assert code == ExitCode.OK and data2["status"] == "ready", data2
    _summary(
        "via_chat",
        {
            "recipes": [
                {"key": r["key"], "tokens": r["tokens"], "cached": r["cached_tokens"]} for r in data["results"]
            ],
            "analysis": [
                {"key": r["key"], "tokens": r["tokens"], "cached": r["cached_tokens"]} for r in data2["results"]
            ],
        },
    )
