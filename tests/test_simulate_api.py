"""replay_requests(): the two generations side by side, sweeps, risk, savings wiring, JSON."""

from __future__ import annotations

import json

import numpy as np
import pytest

from prefixplan.savings.kvsize import lookup_builtin
from prefixplan.savings.prefill import PrefillProfile
from prefixplan.simulation import (
    CacheModel,
    SavingsModel,
    SimConfig,
    SimRequest,
    Tier,
    Workload,
    replay_requests,
    sweep,
    to_json,
    tokens_from_bytes,
)


def _toks(seed, n):
    return np.random.default_rng(seed).integers(0, 50_000, size=n, dtype=np.uint32)


def test_two_generations_batch_window():
    sys_ = _toks(1, 160)
    reqs = [
        SimRequest(float(t), "m", np.concatenate([sys_, _toks(10 + i, 20)]), index=i)
        for i, t in enumerate([0.0, 1.0, 10.0, 12.0, 30.0])
    ]
    res = replay_requests(reqs, SimConfig(workload=Workload(batch_window=5.0)))
    batch = res.run(res.in_batch).cached.tolist()
    persist = res.run(res.persistent).cached.tolist()
    # in flight for 5 s: t=1 overlaps t=0, t=12 overlaps t=10; t=10 and t=30 arrive alone
    assert batch == [0, 160, 0, 160, 0]
    assert persist == [0, 160, 160, 160, 160]
    assert res.run(res.in_batch).hit_rate_requests == pytest.approx(2 / 5)
    assert res.run(res.persistent).hit_rate_tokens == pytest.approx(4 * 160 / (5 * 180))


def test_estimated_service_time():
    p = _toks(2, 8000)
    # 8000 prompt tokens at 8000 tok/s + 200 default output tokens at 40 tok/s = 6 s in flight
    reqs = [SimRequest(0.0, "m", p), SimRequest(5.9, "m", p), SimRequest(12.0, "m", p)]
    res = replay_requests(reqs, SimConfig())
    assert res.run(res.in_batch).cached.tolist() == [0, 7984, 0]  # 2nd runs 5.9..11.9, 3rd arrives at 12
    # a logged output length of 400 keeps the 2nd in flight 1 + 400/40 = 11 s, until 16.9
    reqs[1] = SimRequest(5.9, "m", p, output_len=400)
    res = replay_requests(reqs, SimConfig())
    assert res.run(res.in_batch).cached.tolist() == [0, 7984, 7984]


def test_capacity_curve_monotone_and_json():
    rng = np.random.default_rng(3)
    systems = [_toks(100 + k, 256) for k in range(6)]
    reqs = [
        SimRequest(float(i), "m", np.concatenate([systems[int(rng.integers(0, 6))], _toks(1000 + i, 40)]), index=i)
        for i in range(300)
    ]
    caps = (300, 1000, 2000, 5000)
    curves = sweep(reqs, caps, ("lru", "lfu", "fifo"))
    for pol, pts in curves.items():
        rates = [t for _, t, _ in pts]
        assert [c for c, _, _ in pts] == list(map(float, caps))
        assert all(0 <= r <= 1 for r in rates)
    lru = [t for _, t, _ in curves["lru"]]
    assert lru == sorted(lru)  # LRU has the inclusion property: never worse with more capacity
    res = replay_requests(reqs, SimConfig(cache=CacheModel(capacities=(1000,))))
    doc = to_json(res)
    json.dumps(doc)
    head = next(r for r in doc["runs"] if r["label"] == doc["headline"])
    assert len(head["cached_tokens_per_request"]) == 300
    assert head["prefill_tokens_computed"] + head["hit_tokens"] == head["prompt_tokens"]
    assert doc["savings"]["queueing_modelled"] is False
    assert any("queueing is not modelled" in n for n in doc["notes"])


def test_risk_pinned_protects_hot_prefix():
    hot = _toks(5, 512)
    reqs = []
    for i in range(200):
        if i % 10 == 0:
            toks = np.concatenate([hot, _toks(2000 + i, 16)])
        else:  # a burst of unrelated long prompts
            toks = _toks(5000 + i, 600)
        reqs.append(SimRequest(float(i), "m", toks, index=i))
    cfg = SimConfig(
        cache=CacheModel(capacities=(2000,), pinned_fraction=0.3), workload=Workload(hot_prefixes=(("hot", "m", hot),))
    )
    res = replay_requests(reqs, cfg)
    (r,) = res.risk
    assert r.uses == 20 and r.tokens == 512
    lru_re, lru_tok = r.by_model["lru"]
    assert lru_re == 19 and lru_tok == 19 * 512  # pushed out every time
    assert r.by_model["pinned 30%"] == (0, 0)


def test_savings_and_self_hosted_money():
    p = _toks(6, 1000)
    reqs = [SimRequest(0.0, "m", p), SimRequest(100.0, "m", p)]
    prof = PrefillProfile("t", a=0.01, b=1e-4, c=1e-8, gpu_hour_price=3600.0, source="measured")
    res = replay_requests(reqs, SimConfig(cache=CacheModel(engine="sglang"), savings=SavingsModel(profile=prof)))
    # second request reuses 999 tokens: t(1, 999) = 0.01 + 1e-4 + 1e-8*1*(999 + 0.5)
    with_ = 0.115 + (0.01 + 1e-4 + 1e-8 * 999.5)
    assert res.savings.gpu_seconds_with == pytest.approx(with_)
    assert res.savings.gpu_seconds_saved == pytest.approx(0.230 - with_)
    assert res.self_hosted_usd == pytest.approx(0.230 - with_)  # $3600/h = $1/s


def test_tiers_and_bytes_capacity():
    kv = lookup_builtin("Llama-3.1-8B-Instruct")
    assert tokens_from_bytes(40 * 2**30, kv) == pytest.approx(40 * 2**30 / 131_072)
    a, b = _toks(7, 320), _toks(8, 320)
    reqs = [SimRequest(float(i), "m", x, index=i) for i, x in enumerate([a, b, a])]
    tier = Tier("cpu", 1000, bandwidth_bytes_per_s=131_072 * 1000, latency_s=0.01)
    prof = PrefillProfile("t", a=0.0, b=0.0, c=0.0, source="measured")
    res = replay_requests(
        reqs, SimConfig(cache=CacheModel(capacities=(320,), tiers=(tier,)), savings=SavingsModel(kv=kv, profile=prof))
    )
    head = res.run(res.headline)
    assert head.cached.tolist() == [0, 0, 304]  # a was demoted to CPU, then promoted
    assert head.loaded == {"cpu": 304}
    # load = 304 tokens * 131072 B / (131072*1000 B/s) + 10 ms latency
    assert res.savings.ttft_p95_with == pytest.approx(np.percentile([0, 0, 0.304 + 0.01], 95))


def test_pins_resolve_block_level_traces_at_their_scale():
    """Mooncake hash-id pins resolve at the trace block size the namespace's requests used."""
    hot = np.arange(1, 9, dtype=np.uint32)  # 8 hash ids = 8 blocks of 512 tokens
    reqs = [
        SimRequest(
            float(i), "m", np.concatenate([hot, np.asarray([100 + i], dtype=np.uint32)]), block_scale=512, index=i
        )
        for i in range(3)
    ]
    from prefixplan.core.granularity import engine_granularity
    from prefixplan.trace.blocks import build_trace

    trace = build_trace(reqs, engine_granularity("vllm", 16))
    assert len(trace.resolve(hot, "m")) == 8
    assert trace.resolve(hot, "m", 1) == []  # the same ids read as 1-token units are other blocks
    res = replay_requests(
        reqs,
        SimConfig(
            cache=CacheModel(capacities=(512 * 9,), pins=(("m", hot),), pinned_fraction=0.5),
            workload=Workload(hot_prefixes=(("hot", "m", hot),)),
        ),
    )
    (risk,) = res.risk
    assert risk.uses == 3 and risk.tokens == 8 * 512
