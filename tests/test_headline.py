"""The analyze headline simulation's record section (simulation/headline.py): the fine capacity
sweep, savings per capacity, windowed hit rates, TTFT histograms and the pinned what-if, each
checked against the simulation it summarises."""

from __future__ import annotations

import numpy as np
import pytest

from prefixplan.analysis.record import CandidateRecord
from prefixplan.savings.prefill import load_profile, time_savings
from prefixplan.simulation import CacheModel, SimConfig, SimRequest, replay_requests
from prefixplan.simulation.headline import SWEEP_STEPS, headline_simulation, sweep_capacities


def test_sweep_stops_at_the_footprint():
    caps = sweep_capacities(123_456)
    assert caps[0] == 1e4 and caps[-1] >= 123_456 > caps[-2]
    assert caps[:10] == tuple(m * 1e4 for m in SWEEP_STEPS)
    assert sweep_capacities(5) == (1e4,)


def _requests(n: int = 60) -> tuple[list[SimRequest], list[np.ndarray]]:
    rng = np.random.default_rng(11)
    systems = [rng.integers(0, 40_000, 320, dtype=np.uint32) for _ in range(3)]
    out = []
    for i in range(n):
        sys_tokens = systems[i % 3]
        tail = rng.integers(0, 40_000, int(rng.integers(20, 400)), dtype=np.uint32)
        out.append(SimRequest(time=10.0 * i, namespace="m", tokens=np.concatenate([sys_tokens, tail]), index=i))
    return out, systems


def test_section_figures_match_the_runs():
    reqs, systems = _requests()
    sim = headline_simulation(configured_capacity=1600.0)
    for r in reqs:
        sim.add(r)
    cands = [
        CandidateRecord(
            rank=i + 1,
            namespace="m",
            label="system",
            length=800,
            hits=20,
            reusable_tokens=0,
            marginal_tokens=0,
            tenants=5,
            token_ids=tuple(int(t) for t in s),
        )
        for i, s in enumerate(systems)
    ]
    sec = sim.section(1600.0, cands)
    res = sim.result()
    # the sweep reaches the log's footprint, where LRU equals the unbounded cache
    lru = sec["curves"]["lru"]
    assert lru[-1]["hit_rate_tokens"] == pytest.approx(res.run(res.persistent).hit_rate_tokens)
    assert 1600.0 in [p["capacity_tokens"] for p in lru]
    # savings per capacity: the prefill model over each run's per-request hits
    profile = load_profile(None)
    prompt = np.array([len(r.tokens) for r in reqs])
    for pt in sec["savings_curve"]["lru"]:
        run = next(r for r in res.runs if r.policy == "lru" and r.capacity_tokens == pt["capacity_tokens"])
        assert pt["gpu_seconds_saved"] == pytest.approx(time_savings(prompt, run.cached, profile).gpu_seconds_saved)
    head = next(p for p in sec["savings_curve"]["lru"] if p["capacity_tokens"] == 1600.0)
    assert head["gpu_seconds_saved"] == pytest.approx(sec["savings"]["gpu_seconds_saved"])
    # the timeline partitions the requests and each run's hits
    tl = sec["timeline"]
    assert sum(tl["requests"]) == len(reqs) and sum(tl["prompt_tokens"]) == int(prompt.sum())
    for name, series in tl["series"].items():
        assert sum(series["hit_tokens"]) == res.run(series["label"]).hit_tokens, name
    assert tl["edges_s"][0] == 0 and tl["edges_s"][-1] == pytest.approx(10.0 * (len(reqs) - 1))
    # TTFT histograms count every request once, before and after
    tt = sec["ttft"]
    assert sum(tt["without"]) == sum(tt["with"]) == len(reqs) and tt["run"] == res.headline
    hit = res.run(res.headline).cached
    assert hit.sum() > 0
    edges = np.asarray(tt["edges_s"])
    assert tt["with"] == np.histogram(profile.seconds(prompt - hit, hit), edges)[0].tolist()
    assert tt["without"] == np.histogram(profile.seconds(prompt, 0), edges)[0].tolist()
    # the pinned what-if equals a simulation with the same pins
    pinned = sec["pinned"]
    assert pinned["ranks"] and pinned["pinned_tokens"] <= 0.2 * 1600
    pins = tuple(("m", np.asarray(cands[r - 1].token_ids, dtype=np.uint32)) for r in pinned["ranks"])
    again = replay_requests(
        reqs,
        SimConfig(cache=CacheModel(capacities=(1600.0,), pinned_fraction=0.2, pins=pins, prewarm_pins=True)),
    )
    assert next(r for r in again.runs if r.capacity_tokens == 1600.0).hit_tokens == pinned["hit_tokens"]
    assert pinned["baseline_hit_tokens"] == res.run(res.headline).hit_tokens


def test_withheld_candidates_are_never_pinned():
    reqs, _systems = _requests()
    sim = headline_simulation(configured_capacity=1600.0)
    for r in reqs:
        sim.add(r)
    cands = [
        CandidateRecord(
            rank=1,
            namespace="m",
            label="system",
            length=800,
            hits=20,
            reusable_tokens=0,
            marginal_tokens=0,
            tenants=1,
            withheld=True,
            token_ids=None,
        )
    ]
    assert "pinned" not in sim.section(1600.0, cands)


def test_a_sweep_on_disk_gives_the_same_section(monkeypatch: pytest.MonkeyPatch) -> None:
    """Large logs keep each sweep run's per-request tokens on disk (the headline's in memory):
    the section, every run and every per-request array are the same as with all of them in memory."""
    import prefixplan.simulation.replay as api
    from prefixplan.trace.storage.spill import ShelvedArray

    reqs, systems = _requests()
    cands = [
        CandidateRecord(
            rank=i + 1, namespace="m", label="system", length=800, hits=20, reusable_tokens=0,
            marginal_tokens=0, tenants=5, token_ids=tuple(int(t) for t in s),
        )
        for i, s in enumerate(systems)
    ]  # fmt: skip
    out = []
    for shelve_from in (len(reqs) + 1, len(reqs)):
        monkeypatch.setattr(api, "SHELVE_FROM_REQUESTS", shelve_from)
        sim = headline_simulation(configured_capacity=1600.0)
        for r in reqs:
            sim.add(r)
        sec = sim.section(1600.0, cands)
        res = sim.result()
        shelved = {r.label for r in res.runs if isinstance(r.per_request, ShelvedArray)}
        out.append((sec, [(r.label, r.hit_tokens, r.cached.tolist()) for r in res.runs], shelved, res))
    (in_memory, runs, none_shelved, _), (on_disk, runs_disk, shelved, res) = out
    assert not none_shelved
    assert shelved and res.headline not in shelved and res.persistent not in shelved
    assert len(shelved) == len([r for r in res.runs if r.capacity_tokens is not None]) - 1
    assert on_disk == in_memory and runs_disk == runs
    assert "pinned" in on_disk and on_disk["savings_curve"]["lru"]
    # a shelved run pickles and copies as its array (the shelf's file stays here), writable
    import copy
    import pickle

    run = next(r for r in res.runs if isinstance(r.per_request, ShelvedArray))
    assert run.cached.flags.writeable
    for clone in (pickle.loads(pickle.dumps(run)), copy.deepcopy(run)):
        assert isinstance(clone.per_request, np.ndarray)
        assert clone.cached.tolist() == run.cached.tolist() and clone.label == run.label
