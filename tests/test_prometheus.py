"""prefixplan status --prometheus: the textfile-collector output parses with prometheus_client's own
parser and carries the same figures as status --json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fake_engine import FakeEngine, free_port_url

from prefixplan.cli.app import main
from prefixplan.errors import ExitCode
from prefixplan.report.prometheus import FAMILIES, render_prometheus
from prefixplan.warming.status import KeySeen, ReplicaStatus

parser = pytest.importorskip("prometheus_client.parser")


def _parse(text: str) -> dict[str, list]:
    """metric family name -> samples, through prometheus_client's parser."""
    return {f.name: list(f.samples) for f in parser.text_string_to_metric_families(text)}


def test_status_prometheus_equals_status_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from prefixplan.engines.endpoint import Endpoint
    from prefixplan.engines.vllm import VLLMAdapter
    from prefixplan.store import open_store

    with FakeEngine("vllm", block_size=16) as fake:
        with VLLMAdapter(Endpoint(fake.url)) as a:
            ids = list(range(100, 164))
            a.complete_ids([*ids, 1])
            a.complete_ids([*ids, 2])  # 64 of 65 tokens cached
        with open_store() as s:
            s.record_warm_run(endpoint=fake.url, key="support@v2", version=2, tokens=64, status="verified")
        dead = free_port_url()
        prom, js = tmp_path / "prefixplan.prom", tmp_path / "status.json"
        argv = ["status", "--endpoint", fake.url, "--endpoint", dead, "--target", "0.3", "--timeout", "2"]
        code = main([*argv, "--prometheus", str(prom), "--json", str(js)])
    assert code == ExitCode.ENDPOINT  # one replica is unreachable
    data = json.loads(js.read_text())
    live, gone = data["replicas"]
    fams = _parse(prom.read_text())
    assert set(fams) <= {n.removesuffix("_total") for n in FAMILIES}

    def value(family: str, **labels: str) -> float:
        (s,) = [s for s in fams[family] if all(s.labels.get(k) == v for k, v in labels.items())]
        return s.value

    assert value("prefixplan_hit_rate_target") == 0.3
    assert value("prefixplan_replica_up", replica=live["endpoint"]) == 1
    assert value("prefixplan_replica_up", replica=gone["endpoint"]) == 0
    assert value("prefixplan_replica_prompt_tokens", replica=live["endpoint"]) == live["queries"] == 130
    assert value("prefixplan_replica_cached_tokens", replica=live["endpoint"]) == live["hits"] == 64
    assert value("prefixplan_replica_hit_rate", replica=live["endpoint"]) == pytest.approx(live["hit_rate"])
    assert value("prefixplan_replica_below_target", replica=live["endpoint"]) == 0  # 49% >= 30%
    info = next(s for s in fams["prefixplan_replica_info"] if s.labels["replica"] == live["endpoint"])
    assert info.labels["engine"] == "vllm" and info.labels["block_size"] == "16"
    assert value("prefixplan_key_verified", key="support@v2", replica=live["endpoint"]) == 1
    assert value("prefixplan_key_last_verified_timestamp_seconds", key="support@v2", replica=live["endpoint"]) > 1e9
    # an unreachable replica has no counters (absent, not zero)
    assert not [s for s in fams.get("prefixplan_replica_hit_rate", []) if s.labels["replica"] == gone["endpoint"]]
    assert fams["prefixplan_replica_prompt_tokens"][0].name == "prefixplan_replica_prompt_tokens_total"
    # to stdout, without the console table
    capsys.readouterr()
    with FakeEngine("vllm", block_size=16) as fake:
        assert main(["status", "--endpoint", fake.url, "--prometheus", "-"]) == ExitCode.OK
    out = capsys.readouterr().out
    assert out.startswith("# HELP prefixplan_replica_up ") and "prefix cache" not in out
    assert "prefixplan_replica_up" in _parse(out)


def test_label_values_are_escaped() -> None:
    hostile = 'http://a"b\\c\nd'
    rows = [
        ReplicaStatus(
            endpoint=hostile,
            engine="vllm",
            model='m"1',
            hits=1.0,
            queries=4.0,
            hit_rate=0.25,
            window_s=30.0,
            window_hit_rate=0.5,
            verdict="below-target",
            keys=(KeySeen('k"@v1', None, "failed", "2026-01-01T00:00:00Z"),),
        )
    ]
    fams = _parse(render_prometheus(rows, 0.7))
    (up,) = fams["prefixplan_replica_up"]
    assert up.labels["replica"] == hostile
    (win,) = fams["prefixplan_replica_window_hit_rate"]
    assert win.value == 0.5 and win.labels["window"] == "30s"
    (below,) = fams["prefixplan_replica_below_target"]
    assert below.value == 1
    (key,) = fams["prefixplan_key_verified"]
    assert key.labels["key"] == 'k"@v1' and key.value == 0
    assert "prefixplan_key_last_verified_timestamp_seconds" not in fams  # never verified: no timestamp
