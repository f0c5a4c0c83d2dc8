"""The routing policies shared by the gateway and ``simulate --replicas``; the fleet simulation."""

from __future__ import annotations

import json

import numpy as np
import pytest

from prefixplan.core.granularity import engine_granularity
from prefixplan.errors import UsageError
from prefixplan.routing.content import request_route_bytes, route_units
from prefixplan.routing.policies import Router, RouterConfig
from prefixplan.simulation.fleet import FleetModel, FleetRequest, simulate_fleet
from prefixplan.trace.blocks import build_trace
from prefixplan.trace.requests import SimRequest


def _units(text: str) -> list[int]:
    return route_units(text.encode())


def test_route_units_are_chained_prefix_hashes() -> None:
    a = _units("x" * 64 + "y" * 64 + "z")
    b = _units("x" * 64 + "y" * 64 + "w" * 10)
    c = _units("q" + "x" * 63 + "y" * 64)
    assert len(a) == 3 and a[:2] == b[:2] and a[2] != b[2]
    assert c[1] != a[1]  # a unit stands for the whole prefix, not its own piece


def test_request_bytes_put_tools_first_and_keep_key_order() -> None:
    tools = [{"type": "function", "function": {"name": "f", "b": 1, "a": 2}}]
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]
    data = request_route_bytes(msgs, tools).decode()
    assert data.index('"b":1,"a":2') < data.index("system\x1fS") < data.index("user\x1fU")


def test_round_robin_takes_turns_and_skips_excluded() -> None:
    r = Router(3, RouterConfig(policy="round-robin"))
    assert [r.choose([1]).replica for _ in range(4)] == [0, 1, 2, 0]
    assert r.choose([1], exclude={2}).replica in (0, 1)
    with pytest.raises(UsageError):
        r.choose([1], exclude={0, 1, 2})


def test_prefix_hash_is_consistent_on_the_first_units() -> None:
    cfg = RouterConfig(policy="prefix-hash", prefix_units=2)
    r = Router(4, cfg)
    shared = _units("s" * 128 + "tail one")
    same_start = _units("s" * 128 + "another tail, longer")
    assert r.choose(shared).replica == r.choose(same_start).replica
    # Adding a replica moves only part of the keys (consistent hashing), never all of them.
    keys = [_units(f"prefix {i} " * 20) for i in range(200)]
    before = [Router(4, cfg).choose(k).replica for k in keys]
    after = [Router(5, cfg).choose(k).replica for k in keys]
    moved = sum(b != a for b, a in zip(before, after, strict=True))
    assert 0 < moved < 100
    assert all(a == 4 for b, a in zip(before, after, strict=True) if b != a)


def test_cache_aware_follows_the_longest_match_above_the_threshold() -> None:
    r = Router(2, RouterConfig(policy="cache-aware", cache_threshold=0.5))
    first = _units("system prompt A " * 40 + "question 1")
    d = r.choose(first)
    assert d.reason == "least-loaded"
    r.observe(d.replica, first)
    again = _units("system prompt A " * 40 + "question 2")
    d2 = r.choose(again)
    assert (d2.replica, d2.reason) == (d.replica, "cache-match") and d2.matched >= len(again) - 1
    # A different prompt does not match: least loaded (ties in turn, so the other replica).
    other = _units("system prompt B " * 40 + "question 1")
    d3 = r.choose(other)
    assert d3.reason == "least-loaded"
    # Below the threshold: a short shared start is not enough.
    short = _units("system prompt A " * 2 + "x" * 2000)
    assert r.choose(short).reason == "least-loaded"


def test_load_guard_overrides_the_match_when_imbalanced() -> None:
    r = Router(2, RouterConfig(policy="cache-aware", balance_abs=3, balance_rel=1.5))
    units = _units("hot prefix " * 50)
    r.observe(0, units)
    for _ in range(3):
        r.start(0)
    assert r.choose(units).reason == "cache-match"  # 3 - 0 is not > 3: balanced enough
    r.start(0)
    d = r.choose(units)  # 4 - 0 > 3 and 4 > 1.5 x 0
    assert (d.replica, d.reason) == (1, "load-guard")
    for _ in range(4):
        r.finish(0)
    assert r.choose(units).reason == "cache-match"


def test_keyed_affinity_only_to_replicas_verified_for_that_version() -> None:
    r = Router(3, RouterConfig(policy="round-robin"))
    r.set_ready("bot@v2", [1, 2])
    r.set_ready("bot@v1", [0])
    picks = {r.choose([5], key="bot@v2").replica for _ in range(6)}
    assert picks == {1, 2}
    r.start(1)
    assert r.choose([5], key="bot@v2").replica == 2  # least loaded among the ready ones
    d = r.choose([5], key="bot@v3")  # not ready anywhere: the policy decides
    assert d.reason == "round-robin"
    assert r.choose([5], key="bot@v1", exclude={0}).reason == "round-robin"


def _trace(prompts: list[list[int]], block: int = 4):
    reqs = [
        SimRequest(time=float(i), namespace="m", tokens=np.array(p, dtype=np.uint32)) for i, p in enumerate(prompts)
    ]
    return build_trace(reqs, engine_granularity("vllm", block))


def test_fleet_round_robin_vs_cache_aware_by_hand() -> None:
    # Two system prompts A and B (8 tokens = 2 blocks of 4), alternating, each with a new 2-token tail.
    a, b = [1, 2, 3, 4, 5, 6, 7, 8], [9, 10, 11, 12, 13, 14, 15, 16]
    prompts = [a + [100 + i, 200 + i] if i % 4 < 2 else b + [100 + i, 200 + i] for i in range(8)]
    # order: A A B B A A B B
    trace = _trace(prompts)
    routing = [
        FleetRequest(
            units=tuple(_units(("A" if i % 4 < 2 else "B") * 256 + f"q{i}")),
            key="A" if i % 4 < 2 else "B",
            key_tokens=8,
        )
        for i in range(8)
    ]
    model = FleetModel(replicas=2, routers=("round-robin", "cache-aware", "keyed"))
    rr, ca, keyed = simulate_fleet(trace, routing, model, np.zeros(8))
    # round-robin: A->0, A->1, B->0, B->1, then every prompt is resident on both: 4 hits x 8 tokens.
    assert rr.replica.tolist() == [0, 1, 0, 1, 0, 1, 0, 1]
    assert rr.cached.tolist() == [0, 0, 0, 0, 8, 8, 8, 8]
    # cache-aware: A stays on one replica, B on the other; only the first of each misses.
    assert ca.cached.tolist() == [0, 8, 0, 8, 8, 8, 8, 8]
    assert len(set(ca.replica[[0, 1, 4, 5]].tolist())) == 1 and ca.replica[0] != ca.replica[2]
    assert ca.hit_rate > rr.hit_rate
    # keyed: after its first request a key is warm everywhere: only the first request of each misses.
    assert keyed.cached.tolist() == [0, 8, 0, 8, 8, 8, 8, 8]
    assert keyed.decisions["affinity"] == 6
    doc = json.loads(json.dumps(keyed.to_json()))
    assert doc["cached_tokens"] == 48 and doc["prompt_tokens"] == 80


def test_fleet_capacity_evicts_per_replica() -> None:
    prompts = [[i * 10 + j for j in range(9)] for i in range(3)] * 2
    trace = _trace(prompts)
    routing = [FleetRequest(units=(i % 3,)) for i in range(6)]
    (unbounded,) = simulate_fleet(trace, routing, FleetModel(replicas=1, routers=("round-robin",)), np.zeros(6))
    (small,) = simulate_fleet(
        trace, routing, FleetModel(replicas=1, routers=("round-robin",), capacity_tokens=8), np.zeros(6)
    )
    assert unbounded.cached.tolist() == [0, 0, 0, 8, 8, 8]
    assert small.cached.tolist() == [0] * 6


def test_one_replica_fleet_equals_the_single_cache_lru() -> None:
    """A replica's cache drops a prompt's tail before the shared head it hangs from, as the
    single-cache LRU model (and the engines) do: one replica replays exactly like one cache."""
    from prefixplan.simulation.models import run_model
    from prefixplan.simulation.spec import CacheSpec

    rng = np.random.default_rng(7)
    heads = [list(range(100 * h, 100 * h + 16)) for h in range(3)]
    prompts = []
    for i in range(60):
        head = heads[int(rng.integers(0, 3))] if rng.random() < 0.8 else []
        prompts.append(head + [1000 + 10 * i + j for j in range(int(rng.integers(1, 14)))])
    trace = _trace(prompts)
    routing = [FleetRequest(units=(0,)) for _ in prompts]
    for cap in (8, 16, 24, 40, 64):
        model = FleetModel(replicas=1, routers=("round-robin",), capacity_tokens=cap)
        (fleet,) = simulate_fleet(trace, routing, model, np.zeros(len(prompts)))
        single = run_model(trace, CacheSpec("lru", cap)).hit_blocks * 4
        assert fleet.cached.tolist() == np.minimum(single, trace.cap_blocks * 4).tolist(), cap


def test_simulate_cli_compares_routers(tmp_path, capsys) -> None:
    from prefixplan.cli.app import main

    out = tmp_path / "sim.json"
    code = main(
        [
            "simulate",
            "examples/agent_log.jsonl.gz",
            "--replicas",
            "2",
            "--router",
            "round-robin,cache-aware,keyed",
            "--json",
            str(out),
            "-q",
        ]
    )
    assert code == 0
    fleet = json.loads(out.read_text())["fleet"]
    assert [f["policy"] for f in fleet] == ["round-robin", "cache-aware", "keyed"]
    assert all(f["replicas"] == 2 and sum(p["requests"] for p in f["per_replica"]) == 400 for f in fleet)
    assert fleet[1]["hit_rate"] >= fleet[0]["hit_rate"]
    assert main(["simulate", "examples/agent_log.jsonl.gz", "--router", "keyed", "-q"]) == 2
    assert "--replicas" in capsys.readouterr().err
    assert main(["simulate", "examples/agent_log.jsonl.gz", "--replicas", "2", "--router", "random", "-q"]) == 2


def test_fleet_refuses_what_it_does_not_model_and_keeps_the_running_share() -> None:
    from dataclasses import replace

    from prefixplan.simulation import CacheModel, SimConfig, Tier, replay_requests
    from prefixplan.simulation.options import build_config

    with pytest.raises(UsageError, match=r"--provider, --tier are not modelled per replica"):
        build_config(capacity="1000", provider="openai", tiers=["cpu:1e6"], replicas=2)
    prompts = [[i * 10 + j for j in range(9)] for i in range(3)] * 2
    reqs = [
        SimRequest(time=float(i), namespace="m", tokens=np.array(p, dtype=np.uint32)) for i, p in enumerate(prompts)
    ]
    fleet = FleetModel(replicas=1, routers=("round-robin",), capacity_tokens=40.0)
    with pytest.raises(UsageError, match="--tier is not modelled"):
        replay_requests(reqs, SimConfig(cache=CacheModel(capacities=(1e3,), tiers=(Tier("cpu", 1e6),)), fleet=fleet))
    # 40 tokens hold the three prompts' six blocks; with half of it held by running requests, the
    # replica's cache is the 20-token one (five blocks: each prompt's root survives, not its tail).
    full = replay_requests(reqs, SimConfig(cache=CacheModel(block_size=4), fleet=fleet)).fleet[0]
    half = replay_requests(reqs, SimConfig(cache=CacheModel(block_size=4, running_fraction=0.5), fleet=fleet)).fleet[0]
    small = replace(fleet, capacity_tokens=20.0)
    twenty = replay_requests(reqs, SimConfig(cache=CacheModel(block_size=4), fleet=small)).fleet[0]
    assert full.cached.tolist() == [0, 0, 0, 8, 8, 8]
    assert half.cached.tolist() == twenty.cached.tolist() == [0, 0, 0, 4, 4, 4]


@pytest.mark.parametrize("cap", [None, 24, 40])
@pytest.mark.parametrize("ttl", [None, 1.5, 4.0])
def test_one_replica_fleet_with_a_ttl_equals_the_single_cache_model(cap, ttl) -> None:
    """A block expires ``ttl`` after the last request using it finished (not while in use); a hit
    is a prefix of alive blocks: one replica replays like the single cache at the same TTL."""
    from prefixplan.simulation.models import run_model
    from prefixplan.simulation.spec import CacheSpec

    rng = np.random.default_rng(11)
    heads = [list(range(100 * h, 100 * h + 16)) for h in range(3)]
    prompts = [
        heads[int(rng.integers(0, 3))] + [1000 + 10 * i + j for j in range(int(rng.integers(1, 14)))] for i in range(50)
    ]
    times = np.cumsum(rng.exponential(1.0, size=len(prompts)))
    service = rng.uniform(0.0, 2.0, size=len(prompts))
    reqs = [
        SimRequest(time=float(t), namespace="m", tokens=np.array(p, dtype=np.uint32))
        for t, p in zip(times, prompts, strict=True)
    ]
    trace = build_trace(reqs, engine_granularity("vllm", 4))
    model = FleetModel(replicas=1, routers=("round-robin",), capacity_tokens=cap, ttl_s=ttl)
    (fleet,) = simulate_fleet(trace, [FleetRequest(units=(0,))] * len(prompts), model, service)
    single = run_model(trace, CacheSpec("lru", cap, ttl), service_s=service).hit_blocks * 4
    assert fleet.cached.tolist() == np.minimum(single, trace.cap_blocks * 4).tolist()


def test_options_the_models_cannot_combine_are_refused_by_name() -> None:
    from prefixplan.simulation import CacheModel, SimConfig, Workload, replay_requests
    from prefixplan.simulation.options import build_config

    with pytest.raises(UsageError, match="--tier cannot be combined with --auto-promote"):
        build_config(capacity="1000", auto_promote=3, tiers=["cpu:1e6"])
    # The eviction-risk table's pinned share must fit next to the running requests' share.
    head = np.arange(1, 65, dtype=np.uint32)
    reqs = [
        SimRequest(time=float(i), namespace="m", tokens=np.concatenate([head, np.arange(1000 * i, 1000 * i + 40)]))
        for i in range(1, 6)
    ]
    hot = Workload(hot_prefixes=(("sys", "m", head),))
    crowded = replay_requests(
        reqs, SimConfig(cache=CacheModel(capacities=(1000.0,), running_fraction=0.9), workload=hot)
    )
    assert crowded.risk == () and any(n.startswith("eviction risk not compared") for n in crowded.notes)
    roomy = replay_requests(reqs, SimConfig(cache=CacheModel(capacities=(1000.0,), running_fraction=0.5), workload=hot))
    assert len(roomy.risk) == 1


# --- the residency-and-load router ------------------------------------------------------------


def test_residency_scores_resident_tokens_against_load() -> None:
    config = RouterConfig(policy="residency", prefill_weight=1.0, request_weight=100.0)
    router = Router(3, config)
    units = _units("x" * 640)  # 10 units: 160 tokens at 4 bytes per token
    # resident tokens win when the load is equal: cost = pending + prompt - resident + 100 x in flight
    d = router.choose(units, resident=[0, 128, 64])
    assert (d.replica, d.reason, d.matched, d.prefill) == (1, "residency", 128, 32)
    router.start(1, d.prefill)
    # r1: 32 pending + 32 + 100 = 164 > r2: 96; r2 wins
    d2 = router.choose(units, resident=[0, 128, 64])
    assert (d2.replica, d2.prefill) == (2, 96)
    router.finish(1, d.prefill)
    assert router.pending_tokens == [0, 0, 0] and router.in_flight == [0, 0, 0]
    # pending prefill tokens alone can outweigh residency
    router.start(1, 500)
    router.finish(1, 0)  # in flight 0, still 500 tokens pending (prefill passed wrongly: kept)
    assert router.choose(units, resident=[0, 128, 64]).replica == 2
    # nothing known anywhere: the mirror's match, at bytes_per_token; ties in turn
    fresh = Router(2, config)
    first = fresh.choose(units)
    assert (first.reason, first.prefill) == ("least-cost", 160)
    fresh.observe(0, units)
    d3 = fresh.choose(units, resident=[None, 0])
    assert (d3.replica, d3.matched) == (0, 160)
    # the prompt's length caps nothing below what is resident
    assert fresh.choose(units, prompt_tokens=10, resident=[None, 300]).prefill == 0


def test_router_weights_parse_and_are_checked() -> None:
    from prefixplan.routing.policies import parse_weights

    assert parse_weights("prefill=2, request=64,bytes_per_token=3.5") == {
        "prefill_weight": 2.0,
        "request_weight": 64.0,
        "bytes_per_token": 3.5,
    }
    assert parse_weights(None) == {}
    with pytest.raises(UsageError):
        parse_weights("speed=1")
    with pytest.raises(UsageError):
        parse_weights("prefill=fast")
    with pytest.raises(UsageError):
        RouterConfig(policy="residency", request_weight=-1)


def test_the_simulation_and_the_gateway_choose_the_same_replica_for_the_same_state() -> None:
    """The same fleet state seen both ways: the gateway's KV-event index and key tracker, and the
    simulation's per-replica caches; the same loads. Both feed the shared router the same
    residency and it picks the same replica, as the loads change."""
    pytest.importorskip("msgpack")
    from prefixplan.gateway.keyresidency import KeyResidency, router_residency
    from prefixplan.residency.decode import decode_batch
    from prefixplan.residency.index import ResidencyIndex
    from prefixplan.simulation.fleet import _Cache, key_residency
    from tests.kv_event_cases import pack, tagged_stored

    bs, ids, model = 4, list(range(700, 726)), "m"  # a 26-token key: 6 full blocks
    replicas = ["r0", "r1", "r2"]
    held = {"r0": 2, "r1": 6, "r2": 6}  # full blocks of the key each replica holds
    index = ResidencyIndex()
    for r in replicas:
        index.add_replica(r, source="test", model=model)
        index.mark_live(r, 0.0)
        n = held[r]
        index.apply(r, decode_batch(pack([tagged_stored(list(range(1, n + 1)), None, ids[: n * bs], bs)])))
    keys = KeyResidency(index, replicas)
    keys.track("bot@v1", ids, dict.fromkeys(replicas, bs))
    path = index.prompt_keys(ids + [1, 2, 3, 4, 5, 6], bs, model=model)  # the request: key + a tail
    caches = [_Cache(None) for _ in replicas]
    for cache, r in zip(caches, replicas, strict=True):
        cache.add(path[: held[r]])

    gw = router_residency(keys, replicas, "bot@v1", frozenset())
    sim = key_residency(caches, path, len(ids), bs)
    assert gw == sim == [8, 24, 24]

    config = RouterConfig(policy="residency", request_weight=16.0)
    gateway_router, sim_router = Router(3, config), Router(3, config)
    units = _units("S" * 200 + "tail")
    picks = []
    for load in ([0, 0, 0], [0, 1, 0], [0, 1, 1], [1, 1, 1]):
        for router in (gateway_router, sim_router):
            for r, n in enumerate(load):
                while router.in_flight[r] < n:
                    router.start(r, 10)
        a = gateway_router.choose(units, key="bot@v1", resident=gw)
        b = sim_router.choose(units, key="bot@v1", resident=sim)
        assert a == b
        picks.append(a.replica)
    # residency (a tie in turn), then load moves it, to the cold replica, and back to a warm one in turn
    assert picks == [1, 2, 0, 2]
