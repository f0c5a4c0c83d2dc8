"""Granularity rules: full blocks, last token, OpenAI 1024/128, Anthropic breakpoints/minimums,
Mooncake block scale, and the infinite cache against the radix tree."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prefixplan.core.granularity import anthropic_min_tokens, engine_granularity
from prefixplan.errors import UsageError
from prefixplan.simulation import CacheModel, SimConfig, SimRequest, replay_requests
from prefixplan.trace.requests import request_boundaries


def _toks(seed: int, n: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 50_000, size=n, dtype=np.uint32)


def _reqs(*prompts, times=None, ns="m", breakpoints=None, ends=()):
    """SimRequests; ``ends``: segment ends shared by all (where the Anthropic model looks up entries)."""
    out = []
    for i, p in enumerate(prompts):
        bps = tuple(breakpoints[i]) if breakpoints else ()
        out.append(
            SimRequest(
                time=float(times[i] if times else i),
                namespace=ns,
                tokens=np.asarray(p, np.uint32),
                breakpoints=bps,
                index=i,
                boundaries=request_boundaries(len(p), bps, ends),
            )
        )
    return out


def _cached(result, label=None):
    return result.run(label or result.persistent).cached.tolist()


def test_full_block_reuse_vllm():
    a = _toks(1, 40)
    b = np.concatenate([a, _toks(2, 10)])  # shares 40 tokens = 2 full blocks + 8
    res = replay_requests(_reqs(a, b), SimConfig(cache=CacheModel(engine="vllm")))
    assert _cached(res) == [0, 32]
    assert "16-token" in res.granularity and "vllm" in res.granularity
    # lmcache chunks of 256: the 40 shared tokens are not a full chunk
    assert _cached(replay_requests(_reqs(a, b), SimConfig(cache=CacheModel(engine="lmcache")))) == [0, 0]
    # --block-size overrides the engine default
    assert _cached(replay_requests(_reqs(a, b), SimConfig(cache=CacheModel(engine="vllm", block_size=8)))) == [0, 40]


def test_last_token_rule():
    a = _toks(3, 32)
    assert _cached(replay_requests(_reqs(a, a), SimConfig(cache=CacheModel(engine="vllm")))) == [0, 16]  # not 32
    c = _toks(4, 10)
    assert _cached(replay_requests(_reqs(c, c), SimConfig(cache=CacheModel(engine="sglang")))) == [
        0,
        9,
    ]  # page 1: all but last


def test_openai_1024_128_rule():
    p = _toks(5, 2000)
    reqs = _reqs(p, p[:1100], p[:1000], p[:1300].copy(), np.concatenate([p[:1100], _toks(6, 500)]))
    res = replay_requests(reqs, SimConfig(cache=CacheModel(provider="openai", model="gpt-4o")))
    # 1100 -> 8 blocks = 1024; 1000 < 1024 -> 0; 1300 -> floor(1299/128)=10 -> 1280; shared 1100 -> 1024
    assert _cached(res) == [0, 1024, 0, 1280, 1024]
    assert "1024" in res.granularity and "128" in res.granularity
    # money: gpt-4o $2.50/M input, $1.25/M cached
    total = sum(len(r.tokens) for r in reqs)
    hit = 1024 + 1280 + 1024
    assert res.money.cost_with == pytest.approx((total - hit) * 2.5e-6 + hit * 1.25e-6)


def test_openai_ttl_expiry():
    p = _toks(7, 1500)
    res = replay_requests(
        _reqs(p, p, p, times=[0, 100, 1000]), SimConfig(cache=CacheModel(provider="openai", model="gpt-4o", ttl="5m"))
    )
    assert _cached(res) == [0, 1408, 0]  # floor(1499/128)*128 = 1408; expired after 900 s idle


def test_anthropic_breakpoints_and_minimums():
    sys_ = _toks(8, 2000)
    r1 = np.concatenate([sys_, _toks(9, 1000)])
    r2 = np.concatenate([sys_, _toks(10, 600)])
    r3 = np.concatenate([sys_, _toks(11, 900)])
    reqs = _reqs(r1, r2, r3, breakpoints=[[2000], [2000], [2500]], ends=[2000])  # the system text ends at 2000
    res = replay_requests(reqs, SimConfig(cache=CacheModel(provider="anthropic", model="claude-sonnet-4-5")))
    run = res.run(res.persistent)
    # r1 writes 2000; r2 reads 2000; r3 reads the 2000 entry (<= its breakpoint 2500) and writes 500
    assert run.cached.tolist() == [0, 2000, 2000]
    assert run.write_tokens == 2000 + 500
    m = res.money  # Sonnet $3/M, 5m writes x1.25, reads x0.1
    total = len(r1) + len(r2) + len(r3)
    expect = 3e-6 * ((total - 4000 - 2500) + 2500 * 1.25 + 4000 * 0.1)
    assert m.cost_with == pytest.approx(expect)
    # Haiku 3.5 minimum 2048: a 2000-token breakpoint is never cached
    assert anthropic_min_tokens("claude-3-5-haiku-20241022") == 2048
    res_h = replay_requests(reqs[:2], SimConfig(cache=CacheModel(provider="anthropic", model="claude-3-5-haiku")))
    assert _cached(res_h) == [0, 0]
    assert anthropic_min_tokens("claude-opus-4-5") == 4096
    assert anthropic_min_tokens("claude-sonnet-4") == 1024


def test_anthropic_auto_breakpoint_and_ttl():
    p = _toks(12, 1500)
    longer = np.concatenate([p, _toks(13, 100)])
    reqs = _reqs(p, p, longer, p, times=[0, 10, 20, 2000], ends=[1500])  # the longer one adds a message
    res = replay_requests(
        reqs, SimConfig(cache=CacheModel(provider="anthropic", model="claude-sonnet-4", anthropic_breakpoints="auto"))
    )
    # auto: one breakpoint at the prompt end; reads up to the breakpoint (no last-token rule);
    # the 4th request comes 1980 s after the entry was last used (> 5m): expired
    assert _cached(res) == [0, 1500, 1500, 0]
    res_1h = replay_requests(reqs, SimConfig(cache=CacheModel(provider="anthropic", model="claude-sonnet-4", ttl="1h")))
    assert _cached(res_1h) == [0, 1500, 1500, 1500]


def test_mooncake_block_scale():
    ids = np.array([11, 12, 13], dtype=np.uint32)
    reqs = [SimRequest(time=float(i), namespace="trace", tokens=ids, block_scale=512, index=i) for i in range(2)]
    res = replay_requests(reqs, SimConfig(cache=CacheModel(engine="vllm")))
    # 3 trace blocks = 1536 tokens; last-token rule leaves 2 whole 512-token blocks
    assert _cached(res) == [0, 1024]
    assert res.prompt_tokens == 2 * 1536


def test_namespaces_never_share():
    p = _toks(14, 64)
    reqs = [SimRequest(0.0, "a", p), SimRequest(1.0, "b", p)]
    assert _cached(replay_requests(reqs, SimConfig())) == [0, 0]


def test_bad_engine_and_provider():
    with pytest.raises(UsageError):
        engine_granularity("tgi")
    with pytest.raises(UsageError):
        replay_requests([], SimConfig(cache=CacheModel(provider="cohere")))
    with pytest.raises(UsageError):
        replay_requests([], SimConfig(cache=CacheModel(policies=("random",))))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.integers(0, 3), max_size=40), min_size=1, max_size=25), st.sampled_from([1, 4, 16]))
def test_infinite_equals_radix_tree(prompts, block):
    """Unbounded-cache hits equal the radix tree's longest previous prefix, block-aligned."""
    from oracles.radix import RadixTree

    from prefixplan.core.granularity import reusable_prefix

    stems = [np.arange(30, dtype=np.uint32) * 7, np.arange(30, dtype=np.uint32) * 5]
    reqs = []
    for i, p in enumerate(prompts):
        toks = np.concatenate([stems[i % 2][: len(p)], np.asarray(p, dtype=np.uint32)])
        reqs.append(SimRequest(float(i), "m", toks, index=i))
    tree = RadixTree()
    expect = [
        reusable_prefix(tree.insert(r.tokens, r.namespace, request_index=r.index), len(r.tokens), block) for r in reqs
    ]
    res = replay_requests(reqs, SimConfig(cache=CacheModel(engine="custom", block_size=block)))
    assert _cached(res) == expect


def test_anthropic_minimum_counts_tokens_not_trace_units() -> None:
    """A Mooncake trace's unit is a 512-token block: a 10-unit prompt is 5,120 tokens, above the
    1,024-token minimum, and is cached as the same prompt given token by token is."""
    cache = CacheModel(provider="anthropic", model="claude-sonnet-4-5", anthropic_breakpoints="auto")
    units = np.arange(1, 11, dtype=np.uint32)
    tokens = np.arange(1, 5121, dtype=np.uint32)
    by_unit = replay_requests(
        [SimRequest(float(i), "m", units, block_scale=512, index=i) for i in range(3)], SimConfig(cache)
    )
    by_token = replay_requests([SimRequest(float(i), "m", tokens, index=i) for i in range(3)], SimConfig(cache))
    a, b = by_unit.run(by_unit.headline), by_token.run(by_token.headline)
    assert a.cached.tolist() == b.cached.tolist() == [0, 5120, 5120] and a.write_tokens == b.write_tokens == 5120
