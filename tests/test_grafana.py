"""docs/grafana-dashboard.json: valid dashboard JSON that plots the hit rate against the 70% target
per key and per replica, and references only metrics prefixplan exports (status --prometheus and
the gateway's /metrics, both generated here and read back with prometheus_client's parser)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from prefixplan.report.prometheus import render_prometheus
from prefixplan.warming.status import KeySeen, ReplicaStatus

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = ROOT / "docs" / "grafana-dashboard.json"
parser = pytest.importorskip("prometheus_client.parser")


def _status_names() -> set[str]:
    rows = [
        ReplicaStatus(
            endpoint="r1",
            engine="vllm",
            model="m",
            block_size=16,
            hits=5.0,
            queries=10.0,
            hit_rate=0.5,
            window_s=30.0,
            window_hit_rate=0.4,
            verdict="below-target",
            keys=(KeySeen("k@v1", "2026-01-01T00:00:00Z", "verified", "2026-01-01T00:00:00Z"),),
        )
    ]
    text = render_prometheus(rows, 0.7)
    return {s.name for f in parser.text_string_to_metric_families(text) for s in f.samples}


def _gateway_names() -> set[str]:
    metrics = pytest.importorskip("prefixplan.gateway.metrics", reason="the gateway (issue 11) is not installed")
    gm = metrics.GatewayMetrics()
    gm.observe("k@v1", "r1", 200, 100, 50, 0.1)
    return {s.name for f in gm.registry.collect() for s in f.samples}


def _exprs(dash: dict) -> list[str]:
    out = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    out += [v["query"]["query"] for v in dash["templating"]["list"] if isinstance(v.get("query"), dict)]
    return out


def test_dashboard_parses_and_is_well_formed():
    dash = json.loads(DASHBOARD.read_text())
    assert dash["uid"] and dash["title"] and isinstance(dash["schemaVersion"], int)
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    for p in dash["panels"]:
        assert p["targets"] and all(t["expr"].strip() for t in p["targets"]), p["title"]
        assert {"h", "w", "x", "y"} <= set(p["gridPos"]) and p["gridPos"]["x"] + p["gridPos"]["w"] <= 24
        for t in p["targets"]:
            assert t["expr"].count("(") == t["expr"].count(")") and t["expr"].count("{") == t["expr"].count("}")
    variables = {v["name"] for v in dash["templating"]["list"]}
    used = set(re.findall(r"\$(\w+)", json.dumps(dash["panels"]))) - {"__rate_interval", "__all"}
    assert used <= variables


def test_hit_rate_is_plotted_against_the_target_per_key_and_per_replica():
    dash = json.loads(DASHBOARD.read_text())
    hit_panels = [p for p in dash["panels"] if p["type"] == "timeseries" and "hit rate" in p["title"].lower()]
    for p in hit_panels:
        exprs = [t["expr"] for t in p["targets"]]
        assert any("prefixplan_hit_rate_target" in e for e in exprs), p["title"]
        steps = p["fieldConfig"]["defaults"]["thresholds"]["steps"]
        assert any(s["value"] == 0.7 for s in steps), p["title"]
        assert p["fieldConfig"]["defaults"]["unit"] == "percentunit"
    by = {m for p in hit_panels for t in p["targets"] for m in re.findall(r"sum by \(([\w, ]+)\)", t["expr"])}
    assert "key" in by and "replica" in by


def test_dashboard_references_only_exported_metrics():
    dash = json.loads(DASHBOARD.read_text())
    exported = _status_names() | _gateway_names()
    referenced = {m for e in _exprs(dash) for m in re.findall(r"\b(prefixplan_\w+)", e)}
    assert referenced and referenced <= exported, referenced - exported
    # nothing but prefixplan's metrics (no engine-specific series the textfile or gateway lack)
    others = {m for e in _exprs(dash) for m in re.findall(r"\b((?:vllm|sglang|node)[:_]\w+)", e)}
    assert others == set()
