"""Hostile servers: every misbehaviour is refused cleanly, within the time allowed, and leaks nothing.

Servers come from the fault fake (tests/fake_engine.py): a JSON nesting bomb, absurd or
impossible cached-token counts, a body that trickles one byte at a time or never ends, and a server
that echoes the Authorization header back into a model name.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from fake_engine import FakeEngine
from records import plan_from_record

from prefixplan.cli.app import main
from prefixplan.engines.endpoint import Endpoint
from prefixplan.errors import ExitCode
from prefixplan.warming.results import WarmOptions
from prefixplan.warming.run import run_warm

IDS = list(range(100, 164))
RECORD = {
    "granularity": {"block_size": 16},
    "candidates": [{"rank": 1, "name": "sys", "key": "sys@v1", "length": 64, "token_ids": IDS, "marginal_tokens": 10}],
}


def _warm(fake: FakeEngine, **options) -> object:
    return run_warm(plan_from_record(RECORD, top=1), [Endpoint(fake.url)], WarmOptions(**options))


@pytest.mark.parametrize("fault", ["cached_huge", "cached_billion", "cached_full"])
def test_impossible_cached_counts_are_failures_said_as_such(fault: str, tmp_path: Path, capsys) -> None:
    with FakeEngine("vllm", fault=fault) as fake:
        report = _warm(fake, retries=0, timeout=5)
    (result,) = report.results
    assert result.status == "failed" and report.status == "failed" and report.exit_code == ExitCode.FINDINGS
    assert "implausible cached_tokens" in result.error or "impossible evidence" in result.error
    # The CLI records the failure (the store keeps no 10**400) and exits 1, never 70.
    rec = tmp_path / "a.json"
    rec.write_text(json.dumps({"schema_version": 1, **RECORD}))
    with FakeEngine("vllm", fault=fault) as fake:
        code = main(["warm", "--analysis", str(rec), "--endpoint", fake.url, "--retries", "0", "--json", "-"])
    out = json.loads(capsys.readouterr().out)
    assert code == ExitCode.FINDINGS and out["results"][0]["status"] == "failed"
    from prefixplan.store import open_store

    with open_store() as store:
        (row,) = store.warm_runs()
    assert row["status"] == "failed" and (row["cached_tokens"] is None or row["cached_tokens"] < 2**31)


def test_json_nesting_bomb_is_a_malformed_answer(capsys) -> None:
    with FakeEngine("vllm", fault="nest_bomb") as fake:
        code = main(["status", "--endpoint", fake.url, "--timeout", "5"])
    err = capsys.readouterr()
    assert code in (ExitCode.ENDPOINT, ExitCode.FINDINGS, ExitCode.OK), err
    assert "Traceback" not in err.err and "RecursionError" not in err.out + err.err


WARM_FAULTS = [
    "trickle",  # 1 byte per delay
    "endless",  # a stream that never ends
    "slow",  # answers after delay > timeout
    "http500",
    "malformed",
    "redirect",
    "nest_bomb",  # in /v1/models, during preflight
    "endless_json",  # /v1/models never ends
    "die",  # the server goes away after the first completion
    "refused",  # nothing listens
]


@pytest.mark.parametrize("fault", WARM_FAULTS)
def test_every_warm_fault_ends_within_timeout_times_attempts(fault: str) -> None:
    timeout, retries = 1.0, 1
    kwargs: dict[str, object] = {"delay": 3.0 if fault == "slow" else 0.2}
    if fault == "die":
        kwargs["die_after"] = 1
    with FakeEngine("vllm", fault=None if fault in ("die", "refused") else fault, **kwargs) as fake:
        url = fake.url
        if fault == "refused":
            fake.die()
        started = time.monotonic()
        report = run_warm(
            plan_from_record(RECORD, top=1),
            [Endpoint(url)],
            WarmOptions(retries=retries, timeout=timeout, backoff=0.01),
        )
        elapsed = time.monotonic() - started
    statuses = [r.status for r in report.results]
    assert report.exit_code != ExitCode.OK and statuses in ([], ["failed"]), (statuses, report)
    # Generous bound on a busy box: timeout x (retries + 1) per request for the warm-up and the
    # probe, plus a constant for connecting and preflight (which has its own deadline).
    assert elapsed < 2 * timeout * (retries + 1) + 15, elapsed


def test_an_endless_json_answer_is_refused_not_buffered(capsys) -> None:
    with FakeEngine("vllm", fault="endless_json") as fake:
        code = main(["status", "--endpoint", fake.url, "--timeout", "20"])
    captured = capsys.readouterr()
    assert "larger than 32 MiB" in captured.out + captured.err and "Traceback" not in captured.err
    assert code != ExitCode.INTERNAL


def test_endpoint_with_an_invalid_port_is_a_usage_error(capsys) -> None:
    assert main(["warm", "--endpoint", "http://127.0.0.1:99999", "--dry-run", "--keys", "x@v1"]) == ExitCode.USAGE
    assert "port must be 1-65535" in capsys.readouterr().err


def test_a_server_echoing_the_key_leaks_it_nowhere(tmp_path: Path, monkeypatch, capsys) -> None:
    secret = "sk-MARKER-0123456789abcdef"
    monkeypatch.setenv("PREFIXPLAN_API_KEY", secret)
    rec = tmp_path / "a.json"
    rec.write_text(json.dumps({"schema_version": 1, **RECORD}))
    out_json = tmp_path / "warm.json"
    for fault in ("echo_auth_model", "echo_auth_500"):
        with FakeEngine("vllm", fault=fault, api_key=secret) as fake:
            main(["warm", "--analysis", str(rec), "--endpoint", fake.url, "--retries", "0", "--json", str(out_json)])
        captured = capsys.readouterr()
        assert secret not in captured.out + captured.err
        assert secret not in out_json.read_text()
    import base64
    import sqlite3

    from prefixplan.store import resolve_db_path

    db = resolve_db_path()
    blob = b"".join(p.read_bytes() for p in db.parent.glob(db.name + "*"))
    assert secret.encode() not in blob and base64.b64encode(secret.encode()) not in blob
    with sqlite3.connect(db) as conn:
        dump = "\n".join(conn.iterdump())
    assert secret not in dump


def test_a_redirect_to_another_host_is_said_as_such(capsys) -> None:
    with FakeEngine("vllm", fault="redirect") as fake:
        code = main(["status", "--endpoint", fake.url, "--timeout", "5"])
    out = capsys.readouterr()
    text = out.out + out.err
    assert code == ExitCode.ENDPOINT, text
    assert "HTTP 307" in text and "redirected to http://elsewhere.invalid:8443/v1/models" in text
    assert "give the final URL" in text and "leaked-in-query" not in text and "malformed" not in text
