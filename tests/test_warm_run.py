"""`warm` on fleets of fake engines: verification, fleet semantics, faults, store rows, secrets.

The fake (tests/fake_engine.py) is used only for fault injection and SGLang, built from the
engines' documented response shapes; the real path is tested live against vLLM in tests/live.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from fake_engine import FakeEngine, char_tokenize, free_port_url
from records import plan_from_record

from prefixplan.cli.app import main
from prefixplan.engines.base import TOKENIZER_PROBE_TEXT
from prefixplan.engines.endpoint import Endpoint
from prefixplan.errors import ExitCode, UsageError
from prefixplan.store import open_store
from prefixplan.warming.run import WarmOptions, run_warm

SYS = list(range(100, 164))  # 64 tokens
TOOLS = SYS + list(range(300, 340))  # 104 tokens, child
OTHER = list(range(600, 650))  # 50 tokens


def record(probe: list[int] | None = None) -> dict:
    tok = {
        "spec": "fake:char",
        "fingerprint": "fp-char",
        "label": "char tokenizer",
        "exact": True,
        "probe_ids": char_tokenize(TOKENIZER_PROBE_TEXT) if probe is None else probe,
    }
    cands = [
        {
            "rank": 1,
            "name": "system-acme",
            "key": "system-acme@v1",
            "length": 64,
            "token_ids": SYS,
            "marginal_tokens": 640,
            "parent": None,
        },
        {
            "rank": 2,
            "name": "tools",
            "key": None,
            "length": 104,
            "token_ids": TOOLS,
            "marginal_tokens": 400,
            "parent": 1,
        },
        {
            "rank": 3,
            "name": "other",
            "key": "other@v3",
            "length": 50,
            "token_ids": OTHER,
            "marginal_tokens": 100,
            "parent": None,
        },
    ]
    return {"schema_version": 1, "tokenizer": tok, "granularity": {"block_size": 16}, "candidates": cands}


FAST = WarmOptions(timeout=2.0, retries=1, backoff=0.01)


def rows() -> list[dict]:
    with open_store() as s:
        return s.warm_runs()


@pytest.mark.parametrize("flavor", ["vllm", "sglang"])
def test_ready_on_every_replica(flavor: str) -> None:
    with FakeEngine(flavor, block_size=16) as a, FakeEngine(flavor, block_size=16) as b:
        plan = plan_from_record(record(), top=3)
        rep = run_warm(plan, [Endpoint(a.url), Endpoint(b.url)], FAST)
        assert rep.status == "ready" and rep.exit_code == ExitCode.OK
        assert [(k.rank, k.status, k.verified, k.replicas) for k in rep.keys] == [
            (2, "ready", 2, 2),
            (3, "ready", 2, 2),
        ]
        by = {(r.rank, r.endpoint): r for r in rep.results}
        r = by[(2, a.url)]
        # 104 tokens, block 16: 96 reusable; warm-up sent 105 tokens, probe 106.
        assert (r.expected_cached, r.cached_tokens, r.status, r.method, r.cached_at_warmup) == (
            96,
            96,
            "verified",
            "usage",
            0,
        )
        assert r.cold_ttft_s is not None and r.warm_ttft_s is not None
        assert all(x.replica.tokenizer_check == "match" if hasattr(x, "replica") else True for x in rep.results)
        assert [x.tokenizer_check for x in rep.replicas] == ["match", "match"]
        path = "/generate" if flavor == "sglang" else "/v1/completions"
        sent = [body for m, p, body, _ in a.requests if p == path]
        key = "input_ids" if flavor == "sglang" else "prompt"
        assert sent[0][key] == TOOLS + [TOOLS[-1]]  # exact ids + one extra token
        assert all((b_.get("max_tokens") or b_.get("sampling_params", {}).get("max_new_tokens")) == 1 for b_ in sent)


def test_cli_warm_records_rows_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rec = tmp_path / "rec.json"
    rec.write_text(json.dumps(record()))
    with FakeEngine("vllm") as a:
        code = main(
            ["warm", "--analysis", str(rec), "--endpoint", a.url, "--top", "3", "--json", "-", "--retries", "0"]
        )
        out = json.loads(capsys.readouterr().out)
        url = a.url
    assert code == ExitCode.OK and out["status"] == "ready"
    got = rows()
    assert [(r["endpoint"], r["key"], r["version"], r["tokens"], r["status"], r["cached_tokens"]) for r in got] == [
        (url, "tools", None, 104, "verified", 96),
        (url, "other@v3", 3, 50, "verified", 48),
    ]
    assert all(r["cold_ttft"] is not None and r["warm_ttft"] is not None for r in got)
    assert got[0]["data"]["fleet_status"] == "ready" and got[0]["data"]["expected_cached"] == 96


def test_dry_run_sends_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rec = tmp_path / "rec.json"
    rec.write_text(json.dumps(record()))
    with FakeEngine("vllm") as a:
        code = main(["warm", "--analysis", str(rec), "--endpoint", a.url, "--dry-run", "--json", "-"])
        data = json.loads(capsys.readouterr().out)
        assert not a.requests
    assert code == 0 and data["dry_run"] and [i["rank"] for i in data["plan"]["items"]] == [2, 3]
    assert data["plan"]["items"][0]["covers"] == [1] and data["plan"]["est_prefill_s"] > 0
    assert rows() == []


def test_connection_refused_exit_4_and_failed_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rec = tmp_path / "rec.json"
    rec.write_text(json.dumps(record()))
    url = free_port_url()
    t0 = time.perf_counter()
    code = main(["warm", "--analysis", str(rec), "--endpoint", url, "--retries", "1", "--timeout", "1"])
    assert time.perf_counter() - t0 < 10
    assert code == ExitCode.ENDPOINT
    got = rows()
    assert len(got) == 2 and all(r["status"] == "failed" and "connection refused" in r["error"] for r in got)
    assert all(url in r["error"] for r in got)
    assert "connection refused" in capsys.readouterr().out


@pytest.mark.parametrize(
    "fault,text",
    [
        ("http500", "HTTP 500"),
        ("malformed", "malformed JSON"),
        ("slow", "timed out"),
        ("ignore_max_tokens", "ignored max_tokens"),
    ],
)
def test_completion_faults_fail_items_not_ready(fault: str, text: str, tmp_path: Path) -> None:
    rec = tmp_path / "rec.json"
    rec.write_text(json.dumps(record()))
    kwargs = {"delay": 2.0} if fault == "slow" else {}
    with FakeEngine("vllm", fault=fault, **kwargs) as a:
        t0 = time.perf_counter()
        code = main(
            [
                "warm",
                "--analysis",
                str(rec),
                "--endpoint",
                a.url,
                "--retries",
                "1",
                "--timeout",
                "0.5",
                "--json",
                str(tmp_path / "out.json"),
            ]
        )
        assert time.perf_counter() - t0 < 15
    out = json.loads((tmp_path / "out.json").read_text())
    assert code == ExitCode.FINDINGS and out["status"] == "failed"
    got = rows()
    assert got and all(r["status"] == "failed" and text in r["error"] for r in got)
    assert not any(r["data"]["fleet_status"] == "ready" for r in got)


def test_partial_fleet_names_failing_replica(tmp_path: Path) -> None:
    rec = tmp_path / "rec.json"
    rec.write_text(json.dumps(record()))
    with FakeEngine("vllm") as good, FakeEngine("vllm", fault="http500") as bad:
        code = main(
            [
                "warm",
                "--analysis",
                str(rec),
                "--endpoint",
                good.url,
                "--endpoint",
                bad.url,
                "--retries",
                "0",
                "--json",
                str(tmp_path / "o.json"),
            ]
        )
        bad_url, good_url = bad.url, good.url
    out = json.loads((tmp_path / "o.json").read_text())
    assert code == ExitCode.FINDINGS and out["status"] == "partial"
    assert all(k["status"] == "partial" and k["verified"] == 1 and k["replicas"] == 2 for k in out["keys"])
    assert all(any(bad_url in e and "HTTP 500" in e for e in k["errors"]) for k in out["keys"])
    statuses = {(r["endpoint"], r["status"]) for r in rows()}
    assert statuses == {(good_url, "verified"), (bad_url, "failed")}
    assert all(r["data"]["fleet_status"] == "partial" for r in rows())


def test_tokenizer_mismatch_is_an_error_naming_both(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rec = tmp_path / "rec.json"
    rec.write_text(json.dumps(record()))
    with FakeEngine("vllm", tokenizer_offset=1, model="other-model") as a:
        code = main(["warm", "--analysis", str(rec), "--endpoint", a.url, "--retries", "0"])
        completions = [p for _, p, _, _ in a.requests if p == "/v1/completions"]
    err = capsys.readouterr().out
    assert code == ExitCode.ENDPOINT and not completions  # nothing sent to a mismatching server
    assert "tokenizer mismatch" in err and "other-model" in err and "char tokenizer" in err and "fp-char" in err
    assert all(r["status"] == "failed" and "tokenizer mismatch" in r["error"] for r in rows())


def test_replicas_must_agree_on_model() -> None:
    with FakeEngine("vllm", model="a") as x, FakeEngine("vllm", model="b") as y:
        rep = run_warm(plan_from_record(record(), top=1), [Endpoint(x.url), Endpoint(y.url)], FAST)
    assert rep.status == "partial" and "disagree on the model" in (rep.replicas[1].error or "")


def test_metrics_fallback_verifies_on_idle_replica_else_unverified() -> None:
    plan = plan_from_record(record(), top=1)
    with FakeEngine("vllm", report_cached=False) as a:
        rep = run_warm(plan, [Endpoint(a.url)], FAST)
    r = rep.results[0]
    assert (r.status, r.method, r.cached_tokens, rep.status) == ("verified", "metrics", 64, "ready")
    with FakeEngine("vllm", report_cached=False, metrics=False) as a:
        rep = run_warm(plan, [Endpoint(a.url)], FAST)
    assert rep.results[0].status == "unverified" and rep.status == "failed" and rep.exit_code == ExitCode.FINDINGS
    assert "no per-request cached tokens" in (rep.results[0].error or "")


def test_evicted_prefix_fails_verification() -> None:
    plan = plan_from_record(record(), top=1)

    class Forgetful(FakeEngine):
        def _cache(self, ids: list[int]) -> int:  # caches nothing: every probe reports 0
            self.queries += len(ids)
            return 0

    with Forgetful("vllm") as a:
        rep = run_warm(plan, [Endpoint(a.url)], FAST)
    assert rep.results[0].status == "failed" and "cached_tokens=0 < expected 64" in (rep.results[0].error or "")


def test_replica_dying_mid_run_fails_rest_quickly() -> None:
    plan = plan_from_record(record(), top=3)
    with FakeEngine("vllm", die_after=2) as a:
        t0 = time.perf_counter()
        rep = run_warm(plan, [Endpoint(a.url)], WarmOptions(timeout=1.0, retries=1, backoff=0.01))
        assert time.perf_counter() - t0 < 8
    assert [r.status for r in rep.results] == ["verified", "failed"]
    assert rep.status == "partial" and rep.exit_code == ExitCode.FINDINGS


def test_api_key_never_in_output_logs_or_store(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    secret = "sk-live-DO-NOT-LEAK-987654321"
    monkeypatch.setenv("FLEET_KEY", secret)
    rec = tmp_path / "rec.json"
    rec.write_text(json.dumps(record()))
    eps = tmp_path / "eps.yaml"
    with FakeEngine("vllm", api_key=secret) as good, FakeEngine("vllm", api_key=secret, fault="echo_auth_500") as bad:
        eps.write_text(f"replicas:\n  - url: {good.url}\n    name: gpu-a\n  - url: {bad.url}\n")
        code = main(
            [
                "warm",
                "--analysis",
                str(rec),
                "--endpoints",
                str(eps),
                "--api-key-env",
                "FLEET_KEY",
                "--retries",
                "0",
                "--json",
                str(tmp_path / "o.json"),
            ]
        )
        assert good.requests[-1][3]["authorization"] == f"Bearer {secret}"
        bad_url = bad.url
    assert code == ExitCode.FINDINGS
    out = capsys.readouterr()
    db_bytes = Path(str(open_store().path)).read_bytes()
    for text in (out.out, out.err, caplog.text, (tmp_path / "o.json").read_text(), json.dumps(rows())):
        assert secret not in text
    assert secret.encode() not in db_bytes
    assert any("***" in (r["error"] or "") for r in rows())
    assert {r["endpoint"] for r in rows()} == {"gpu-a", bad_url}


def test_endpoints_file_refuses_literal_secrets(tmp_path: Path) -> None:
    from prefixplan.errors import InputError
    from prefixplan.warming.source import load_endpoints

    f = tmp_path / "e.yaml"
    f.write_text("replicas:\n  - url: http://h:1\n    api_key: sk-abc\n")
    with pytest.raises(InputError, match="api_key_env"):
        load_endpoints(f)
    f.write_text("replicas:\n  - url: http://h:1\n    headers: {Authorization: Bearer x}\n")
    with pytest.raises(InputError, match="Authorization"):
        load_endpoints(f)


def test_nothing_to_warm_and_no_endpoint_are_usage_errors(tmp_path: Path) -> None:
    rec = record()
    rec["candidates"] = [dict(c, token_ids=None) for c in rec["candidates"]]
    with pytest.raises(UsageError, match="nothing to warm"):
        run_warm(plan_from_record(rec, top=3), [Endpoint("http://127.0.0.1:1")])
    f = tmp_path / "r.json"
    f.write_text(json.dumps(record()))
    assert main(["warm", "--analysis", str(f)]) == ExitCode.USAGE


def test_keepalive_rounds_record_each_round(tmp_path: Path) -> None:
    f = tmp_path / "r.json"
    f.write_text(json.dumps(record()))
    with FakeEngine("vllm") as a:
        code = main(
            [
                "warm",
                "--analysis",
                str(f),
                "--endpoint",
                a.url,
                "--top",
                "1",
                "--every",
                "0.05s",
                "--rounds",
                "3",
                "--json",
                str(tmp_path / "o.json"),
            ]
        )
    out = json.loads((tmp_path / "o.json").read_text())
    assert code == 0 and len(out["rounds"]) == 3 and len(rows()) == 3
    assert main(["warm", "--analysis", str(f), "--endpoint", "http://127.0.0.1:1", "--every", "1s"]) == ExitCode.USAGE


def test_vllm_without_its_block_size_is_verified_at_its_default_blocks() -> None:
    plan = plan_from_record(record(), top=2)
    with FakeEngine("vllm", block_size=16, metrics=False) as a:  # no /metrics: no cache_config_info
        rep = run_warm(plan, [Endpoint(a.url)], FAST)
        assert rep.replicas[0].engine == "vllm" and rep.replicas[0].block_size is None
        # vLLM caches whole blocks: 96 of a 104-token prefix is a full hit at 16-token blocks.
        r = rep.results[0]
        assert (r.expected_cached, r.cached_tokens, r.status) == (96, 96, "verified") and rep.status == "ready"
    with FakeEngine("vllm", block_size=64, metrics=False) as b:  # a larger block than the assumed default
        r = run_warm(plan, [Endpoint(b.url)], FAST).results[0]
        assert r.status == "failed" and r.cached_tokens == 64
        assert "block size 16, assumed: vllm's default, not reported by the server; see --block-size" in r.error


def test_generic_openai_server_uses_token_granularity_unless_told() -> None:
    plan = plan_from_record(record(), top=2)
    with FakeEngine("openai", block_size=16) as a:  # a server that hides its block size
        rep = run_warm(plan, [Endpoint(a.url)], FAST)
        assert rep.replicas[0].engine == "openai-compatible" and rep.replicas[0].block_size is None
        # Block size unknown: the whole prefix must be reported cached; 96 of 104 is not enough.
        assert rep.results[0].expected_cached == 104 and rep.results[0].status == "failed"
        rep = run_warm(plan, [Endpoint(a.url)], WarmOptions(timeout=2.0, retries=0, block_size=16))
        assert rep.status == "ready" and rep.results[0].expected_cached == 96
