"""``simulate --achieved-from-status``: the waterfall's achieved bar from the engines' prefix-cache
counters in ``prefixplan status --json`` snapshots (the difference of two, summed over replicas),
with where it came from and whether the counters cover the log's traffic. The real engine's
counters are checked in tests/live/test_waterfall_live.py."""

from __future__ import annotations

import json

import pytest

from prefixplan.api import simulate, simulation_config
from prefixplan.cli.app import main
from prefixplan.errors import UsageError
from prefixplan.simulation.engine_counts import coverage_note, engine_counts
from tests.test_simulate_waterfall import _records


def _snapshot(path, rows: dict[str, tuple[float, float | None]]) -> str:
    replicas = [{"endpoint": ep, "engine": "vllm", "hits": h, "queries": q} for ep, (h, q) in rows.items()]
    path.write_text(json.dumps({"target": 0.7, "replicas": replicas}))
    return str(path)


def test_counts_are_the_difference_summed_over_replicas(tmp_path):
    before = _snapshot(tmp_path / "b.json", {"http://a": (100, 1000), "http://b": (5, 50)})
    after = _snapshot(tmp_path / "a.json", {"http://a": (160, 1400), "http://b": (45, 350)})
    counts = engine_counts(f"{before},{after}")
    assert (counts.hits, counts.queries, counts.replicas) == (100, 700, 2)
    assert counts.source == f"vllm prefix-cache counters of 2 replicas, between {before} and {after}"
    since = engine_counts([after])
    assert (since.hits, since.queries) == (205, 1750) and "since start" in since.source
    assert "more traffic than the log" in coverage_note(counts, 600)
    assert "less traffic than the log" in coverage_note(counts, 800)
    assert "exactly" in coverage_note(counts, 700)


def test_counts_refuse_a_restart_other_replicas_or_missing_counters(tmp_path):
    before = _snapshot(tmp_path / "b.json", {"http://a": (100, 1000)})
    with pytest.raises(UsageError, match="went down"):
        engine_counts([before, _snapshot(tmp_path / "r.json", {"http://a": (10, 2000)})])
    with pytest.raises(UsageError, match="different replicas"):
        engine_counts([before, _snapshot(tmp_path / "o.json", {"http://c": (200, 2000)})])
    (tmp_path / "u.json").write_text(json.dumps({"replicas": [{"endpoint": "http://a", "hits": None}]}))
    with pytest.raises(UsageError, match="no prefix-cache counters"):
        engine_counts([before, str(tmp_path / "u.json")])
    with pytest.raises(UsageError, match="one or two"):
        engine_counts("a,b,c")
    with pytest.raises(UsageError, match="achieved bar"):
        simulation_config(waterfall=False, achieved_from_status=before)


def test_achieved_bar_from_the_counters_in_json_and_report(tmp_path):
    records = _records(4, 20, cached=True)
    prompt = sum(len(r["prompt"]) for r in records)
    logged = sum(r["usage"]["prompt_tokens_details"]["cached_tokens"] for r in records)
    before = _snapshot(tmp_path / "b.json", {"http://a": (1000, 5000)})
    after = _snapshot(tmp_path / "a.json", {"http://a": (1234, 5000 + prompt)})
    wf = simulate(records, simulation_config(block_size=4, achieved_from_status=f"{before},{after}"), workers=1)
    wf = wf.result.waterfall
    assert wf.achieved_tokens == 234 and wf.achieved_requests is None
    assert wf.unexplained_tokens == wf.predicted_tokens - 234
    assert wf.achieved_source.startswith("vllm prefix-cache counters of 1 replica, between")
    assert any("the log's prompt tokens exactly" in n for n in wf.notes)
    assert any(f"the log's cached_tokens sum to {logged:,}" in n for n in wf.notes)
    plain = simulate(records, simulation_config(block_size=4), workers=1).result.waterfall
    assert plain.achieved_tokens == logged and plain.achieved_source == "the log's cached_tokens, 20 requests"
    log = tmp_path / "log.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in records))
    out = tmp_path / "out.json"
    code = main(
        [
            "simulate",
            str(log),
            "-q",
            "--block-size",
            "4",
            "--achieved-from-status",
            f"{before},{after}",
            "--json",
            str(out),
        ]
    )
    assert code == 0
    doc = json.loads(out.read_text())["waterfall"]
    assert doc["achieved_tokens"] == 234 and doc["achieved_source"] == wf.achieved_source
    from prefixplan.report.waterfall import waterfall_bars

    bars = {b.label: b for b in waterfall_bars(doc)}
    assert bars["achieved (what the engine reused)"].tokens == 234
    assert bars["achieved (what the engine reused)"].source == wf.achieved_source
