"""The hit-loss waterfall: every step is the difference of two separate ``simulate`` runs made
through the public API, the steps add up to the prompt tokens, and the achieved bar is the log's
``cached_tokens``."""

from __future__ import annotations

import json

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from prefixplan.api import simulate, simulation_config
from prefixplan.cli.app import main


def _records(seed: int, n: int, cached: bool = False) -> list[dict]:
    """Completion requests as token ids (no tokenizer): a few shared prefixes of random lengths
    (some shorter than a block), multi-turn continuations, random tails, users and times."""
    rng = np.random.default_rng(seed)
    prefixes = [rng.integers(0, 5000, size=int(rng.integers(3, 90))).tolist() for _ in range(4)]
    out, t, earlier = [], 0.0, []
    for i in range(n):
        t += float(rng.exponential(3.0))
        if earlier and rng.random() < 0.25:
            ids = (
                earlier[int(rng.integers(len(earlier)))] + rng.integers(0, 5000, size=int(rng.integers(1, 30))).tolist()
            )
        else:
            ids = (
                prefixes[int(rng.integers(len(prefixes)))]
                + rng.integers(0, 5000, size=int(rng.integers(1, 40))).tolist()
            )
        earlier.append(ids)
        rec = {"model": "m", "prompt": ids, "timestamp": 1.7e9 + t, "user": f"u{int(rng.integers(3))}"}
        rec["usage"] = {"prompt_tokens": len(ids), "completion_tokens": int(rng.integers(1, 300))}
        if cached:
            rec["usage"]["prompt_tokens_details"] = {"cached_tokens": int(rng.integers(0, len(ids)))}
        out.append(rec)
    return out


def _hits(records: list[dict], fleet: bool = False, **options) -> int:
    result = simulate(records, simulation_config(waterfall=False, **options), workers=1).result
    if fleet:
        return result.fleet[0].cached_tokens
    return result.run(result.headline).hit_tokens


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    n=st.integers(2, 30),
    block=st.sampled_from([1, 4, 16]),
    capacity=st.sampled_from([None, "60", "300"]),
    policy=st.sampled_from(["lru", "lfu"]),
    ttl=st.sampled_from([None, "5", "40"]),
    replicas=st.sampled_from([None, 2, 3]),
    router=st.sampled_from(["round-robin", "cache-aware"]),
)
def test_every_step_is_the_difference_of_two_simulate_runs(seed, n, block, capacity, policy, ttl, replicas, router):
    records = _records(seed, n)
    options = {"block_size": block, "capacity": capacity, "policy": policy, "cache_ttl": ttl}
    fleet = {"replicas": replicas, "router": router} if replicas else {}
    wf = simulate(records, simulation_config(**options, **fleet), workers=1).result.waterfall
    prompt = sum(len(r["prompt"]) for r in records)
    token = _hits(records, block_size=1)
    unbounded = _hits(records, block_size=block)
    bounded = _hits(records, block_size=block, capacity=capacity, policy=policy) if capacity else unbounded
    timed = _hits(records, **options)
    spread = _hits(records, fleet=True, **options, **fleet) if replicas else timed
    steps = {s.name: s.tokens for s in wf.steps}
    assert wf.prompt_tokens == prompt
    assert steps["unique"] == prompt - token
    assert steps["breakers"] is None  # no analysis record given
    assert steps["block"] == token - unbounded
    assert steps["capacity"] == unbounded - bounded
    assert steps["ttl"] == bounded - timed
    assert steps["replicas"] == timed - spread
    assert wf.predicted_tokens == spread
    assert sum(v for v in steps.values() if v is not None) + wf.predicted_tokens == prompt
    assert [r.hit_tokens for r in wf.runs] == [token, unbounded, bounded, timed, spread]


def test_a_prefix_shorter_than_a_block_is_lost_to_granularity():
    # 10 requests share a 12-token prefix: at 16-token blocks nothing is reused, at token level 12 each
    shared = list(range(100, 112))
    records = [{"model": "m", "prompt": shared + [1000 + i] * 20, "timestamp": float(i)} for i in range(10)]
    wf = simulate(records, simulation_config(block_size=16), workers=1).result.waterfall
    assert wf.run("token").hit_tokens == 9 * 12
    assert wf.step("block").tokens == 9 * 12
    assert wf.predicted_tokens == 0


def test_achieved_is_the_sum_of_the_logs_cached_tokens():
    records = _records(7, 30, cached=True)
    wf = simulate(records, simulation_config(capacity="200"), workers=1).result.waterfall
    logged = sum(r["usage"]["prompt_tokens_details"]["cached_tokens"] for r in records)
    assert wf.achieved_tokens == logged
    assert wf.achieved_requests == 30
    assert wf.unexplained_tokens == wf.predicted_tokens - logged
    doc = wf.to_json()
    assert doc["achieved_tokens"] == logged and doc["unexplained_tokens"] == wf.predicted_tokens - logged
    # without the engine's counts there is no achieved bar
    plain = simulate(_records(7, 30), simulation_config(capacity="200"), workers=1).result.waterfall
    assert plain.achieved_tokens is None and plain.unexplained_tokens is None


def test_breakers_come_from_an_analysis_record(tmp_path):
    from prefixplan.api import analyze

    rec = tmp_path / "analysis.json"
    analysis = analyze(["examples/agent_log.jsonl.gz"], simulate=True)
    rec.write_text(json.dumps(analysis.to_json()))
    expected = sum(b["cost_tokens"] for b in analysis.record.breakers)
    assert expected > 0
    wf_doc = analysis.record.simulation["waterfall"]
    steps = {s["name"]: s["tokens"] for s in wf_doc["steps"]}
    unshared_block = wf_doc["prompt_tokens"] - wf_doc["runs"][1]["hit_tokens"]
    assert steps["breakers"] == min(expected, unshared_block)
    assert sum(v for v in steps.values() if v is not None) + wf_doc["predicted_tokens"] == wf_doc["prompt_tokens"]
    sim = simulate(["examples/agent_log.jsonl.gz"], simulation_config(), pins_from=rec, pin_top=1, workers=1)
    wf = sim.result.waterfall
    assert wf.step("breakers").tokens == min(expected, wf.prompt_tokens - wf.run("token").hit_tokens)


def test_simulate_prints_the_waterfall(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["simulate", "examples/agent_log.jsonl.gz", "--capacity", "2e4"]) == 0
    out = capsys.readouterr().out
    assert "Where the hits go" in out
    assert "block granularity" in out and "--block-size 1 - --block-size 16" in out
    assert main(["simulate", "examples/agent_log.jsonl.gz", "--no-waterfall"]) == 0
    assert "Where the hits go" not in capsys.readouterr().out


def test_trace_files_keep_their_block_size_and_give_the_token_level_when_fine(tmp_path):
    coarse, fine = tmp_path / "coarse.parquet", tmp_path / "fine.parquet"
    outs = [tmp_path / f"{k}.json" for k in ("log", "coarse-out", "coarse-in", "fine-in")]
    assert main(["simulate", "examples/agent_log.jsonl.gz", "-q", "--json", str(outs[0])]) == 0
    # rows written to a trace file stay at the block size: no token-level run then
    assert (
        main(["simulate", "examples/agent_log.jsonl.gz", "-q", "--trace-out", str(coarse), "--json", str(outs[1])]) == 0
    )
    assert main(["simulate", str(coarse), "-q", "--json", str(outs[2])]) == 0
    assert main(["simulate", "examples/agent_log.jsonl.gz", "-q", "--block-size", "1", "--trace-out", str(fine)]) == 0
    assert main(["simulate", str(fine), "-q", "--block-size", "16", "--json", str(outs[3])]) == 0
    log, coarse_out, coarse_in, fine_in = (json.loads(p.read_text())["waterfall"] for p in outs)
    for wf in (coarse_out, coarse_in):
        assert wf["runs"][0]["hit_tokens"] is None and any("token level not known" in n for n in wf["notes"])
        assert wf["runs"][1:] == log["runs"][1:]
    assert fine_in["runs"] == log["runs"] and fine_in["steps"] == log["steps"]
