"""Cache models vs slow, obviously-correct reference implementations (hypothesis)."""

from __future__ import annotations

import math
from collections import deque

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from prefixplan.core.granularity import engine_granularity
from prefixplan.simulation.models import AutoPromote, CacheSpec, Tier, run_model
from prefixplan.simulation.trace import SimRequest, build_trace

# ---------------------------------------------------------------- reference oracles
# Blocks are identified by (namespace, tuple of all prefix tokens): no hashing, no ids.


def _paths(reqs, block):
    out = []
    for req in reqs:
        toks = tuple(int(t) for t in req.tokens)
        nb = len(toks) // block
        path = [(req.namespace, toks[: (j + 1) * block]) for j in range(nb)]
        cap = min(nb, (len(toks) - 1) // block) if toks else 0
        out.append((path, cap))
    return out


def _is_child(parent, child, block):
    return child[0] == parent[0] and len(child[1]) == len(parent[1]) + block and child[1][: len(parent[1])] == parent[1]


def _pinned_keys(reqs, block, pins, budget):
    seen = {k for path, _ in _paths(reqs, block) for k in path}
    chosen: list = []
    for ns, toks in pins:
        toks = tuple(int(t) for t in toks)
        for j in range(len(toks) // block):
            key = (ns, toks[: (j + 1) * block])
            if key not in seen:
                break
            if key in chosen:
                continue
            if len(chosen) + 1 > budget:
                return set(chosen)
            chosen.append(key)
    return set(chosen)


def reference(reqs, block, policy, cap, *, ttl=None, pins=(), pin_cap=0, auto=None, prios=None):
    """Straightforward replay: dict of cached blocks, eviction by scanning for the min leaf."""
    cache: dict = {}
    pinset = _pinned_keys(reqs, block, pins, pin_cap) if pins and auto is None else set()
    hits_window: dict = {}
    last_hit: dict = {}
    auto_pinned: set = set()
    out = []
    for r, (req, (path, capr)) in enumerate(zip(reqs, _paths(reqs, block), strict=False)):
        now = req.time
        if auto is not None:
            for k in sorted(auto_pinned, key=lambda k: -len(k[1])):
                if last_hit.get(k, -math.inf) < now - auto.cold_after_s:
                    cache[k]["pinned"] = False
                    auto_pinned.discard(k)
        if ttl is not None:
            for k in [k for k, v in cache.items() if not v["pinned"] and v["t"] < now - ttl]:
                del cache[k]
        present = 0
        while present < len(path) and path[present] in cache:
            present += 1
        hit = min(present, capr)
        out.append(hit)
        if auto is not None and hit:
            for k in path[:hit]:
                dq = hits_window.setdefault(k, deque())
                dq.append(now)
                while dq and dq[0] < now - auto.window_s:
                    dq.popleft()
                last_hit[k] = now
            npinned = sum(1 for v in cache.values() if v["pinned"])
            for k in path[:hit]:
                if cache[k]["pinned"]:
                    continue
                if len(hits_window[k]) < auto.min_hits or npinned + 1 > pin_cap:
                    break
                cache[k]["pinned"] = True
                auto_pinned.add(k)
                npinned += 1
        new_reg = sum(1 for k in path[present:] if k not in pinset)

        def key(k):
            v = cache[k]
            return {
                "lru": (v["last"],),
                "lfu": (v["count"], v["last"]),
                "fifo": (v["ins"],),
                "priority": (v["prio"], v["last"]),
            }[policy]

        while sum(1 for v in cache.values() if not v["pinned"]) + new_reg > cap:
            leaves = [
                k
                for k, v in cache.items()
                if not v["pinned"] and k not in path and not any(_is_child(k, c, block) for c in cache)
            ]
            if not leaves:
                break
            del cache[min(leaves, key=key)]
        p = prios[r] if prios is not None else 0
        for k in path:
            if k not in cache:
                cache[k] = {"ins": r, "count": 0, "prio": p, "pinned": k in pinset}
            v = cache[k]
            v["last"] = r
            v["t"] = now
            v["count"] += 1
            v["prio"] = max(v["prio"], p)
        while sum(1 for v in cache.values() if not v["pinned"]) > cap:  # over-long request gives back
            leaves = [k for k, v in cache.items() if not v["pinned"] and not any(_is_child(k, c, block) for c in cache)]
            del cache[min(leaves, key=key)]
    return out


def reference_tiers(reqs, block, caps):
    """LRU GPU tier with demotion to lower tiers on eviction and promotion on hit.

    Tiers are one recency order: a lower tier with free space takes the most recent blocks
    of the tiers below it (see prefixplan.simulation.models)."""
    tiers: list[dict] = [{} for _ in caps]  # key -> last use
    out = []
    for r, (path, capr) in enumerate(_paths(reqs, block)):
        present = 0
        where = []
        while present < len(path):
            t = next((i for i, tier in enumerate(tiers) if path[present] in tier), None)
            if t is None:
                break
            where.append(t)
            present += 1
        hit = min(present, capr)
        out.append(tuple(sum(1 for t in where[:hit] if t == i) for i in range(len(caps))))
        gpu = tiers[0]
        for k in path:  # promotion: hit blocks leave the lower tiers first
            for tier in tiers[1:]:
                tier.pop(k, None)
        need = sum(1 for k in path if k not in gpu)

        def demote(locked):
            leaves = [k for k in gpu if k not in locked and not any(_is_child(k, c, block) for c in gpu)]
            if not leaves:
                return False
            victim = min(leaves, key=lambda k: (gpu[k], -len(k[1])))
            last = gpu.pop(victim)
            for i in range(1, len(tiers)):
                tiers[i][victim] = last
                if len(tiers[i]) <= caps[i]:
                    break
                victim = min(tiers[i], key=lambda k, t=tiers[i]: (t[k], -len(k[1])))
                last = tiers[i].pop(victim)
            return True

        while len(gpu) + need > caps[0] and demote(path):
            pass
        for k in path:
            gpu[k] = r
        while len(gpu) > caps[0] and demote(()):
            pass
        # a lower tier with free space holds the most recent blocks of the tiers below it
        for i in range(1, len(tiers)):
            while len(tiers[i]) < caps[i]:
                below = [(t[k], -len(k[1]), j, k) for j in range(i + 1, len(tiers)) for t in [tiers[j]] for k in t]
                if not below:
                    break
                _last, _, j, k = max(below)
                tiers[i][k] = tiers[j].pop(k)
    return out


# ---------------------------------------------------------------- strategies

VOCAB = st.integers(0, 2)


@st.composite
def traces(draw, max_requests=14):
    n = draw(st.integers(1, max_requests))
    base = [draw(st.lists(VOCAB, min_size=0, max_size=10)) for _ in range(3)]
    reqs = []
    t = 0.0
    for i in range(n):
        stem = base[draw(st.integers(0, 2))]
        keep = draw(st.integers(0, len(stem)))
        tail = draw(st.lists(VOCAB, min_size=0, max_size=5))
        t += draw(st.sampled_from([0.0, 1.0, 5.0, 30.0]))
        ns = draw(st.sampled_from(["m", "m", "other"]))
        toks = np.asarray(stem[:keep] + tail, dtype=np.uint32)
        reqs.append(SimRequest(time=t, namespace=ns, tokens=toks, index=i))
    return reqs


SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _run(reqs, block, spec, prios=None):
    trace = build_trace(reqs, engine_granularity("custom", block))
    return run_model(trace, spec, priorities=prios).hit_blocks.tolist()


@SETTINGS
@given(traces(), st.integers(1, 3), st.integers(0, 10), st.sampled_from(["lru", "lfu", "fifo", "priority"]), st.data())
def test_policies_match_reference(reqs, block, cap, policy, data):
    prios = np.asarray(data.draw(st.lists(st.integers(0, 2), min_size=len(reqs), max_size=len(reqs))))
    spec = CacheSpec(policy=policy, capacity_tokens=cap * block)
    got = _run(reqs, block, spec, prios)
    assert got == reference(reqs, block, policy, cap, prios=prios)


@SETTINGS
@given(traces(), st.integers(1, 3), st.integers(0, 10))
def test_lru_stack_matches_generic_lru_and_reference(reqs, block, cap):
    from prefixplan.simulation.models import GenericCache

    trace = build_trace(reqs, engine_granularity("custom", block))
    stack = run_model(trace, CacheSpec(policy="lru", capacity_tokens=cap * block))
    generic = GenericCache(trace, "lru", cap).run()
    ref = reference(reqs, block, "lru", cap)
    assert stack.hit_blocks.tolist() == ref
    assert generic.hit_blocks.tolist() == ref
    assert stack.evictions == generic.evictions


@SETTINGS
@given(
    traces(),
    st.integers(1, 2),
    st.integers(0, 8),
    st.sampled_from([0.0, 1.0, 5.0, 40.0]),
    st.sampled_from(["lru", "lfu", "fifo"]),
)
def test_ttl_matches_reference(reqs, block, cap, ttl, policy):
    spec = CacheSpec(policy=policy, capacity_tokens=cap * block, ttl_s=ttl)
    assert _run(reqs, block, spec) == reference(reqs, block, policy, cap, ttl=ttl)


@SETTINGS
@given(traces(), st.integers(1, 2), st.integers(0, 8), st.sampled_from([0.0, 1.0, 40.0]))
def test_unbounded_ttl_matches_reference(reqs, block, cap, ttl):
    spec = CacheSpec(policy="lru", capacity_tokens=None, ttl_s=ttl)
    assert _run(reqs, block, spec) == reference(reqs, block, "lru", math.inf, ttl=ttl)


@SETTINGS
@given(
    traces(),
    st.integers(1, 2),
    st.integers(1, 12),
    st.sampled_from([0.25, 0.5]),
    st.sampled_from(["lru", "lfu", "fifo", "priority"]),
    st.data(),
)
def test_pinned_partition_matches_reference(reqs, block, cap, frac, policy, data):
    pins = tuple(
        (reqs[i].namespace, reqs[i].tokens[: data.draw(st.integers(0, len(reqs[i].tokens)))])
        for i in data.draw(st.lists(st.integers(0, len(reqs) - 1), min_size=1, max_size=3))
    )
    spec = CacheSpec(policy=policy, capacity_tokens=cap * block, pinned_fraction=frac, pins=pins)
    pin_cap = math.floor(cap * frac)
    got = _run(reqs, block, spec)
    assert got == reference(reqs, block, policy, cap - pin_cap, pins=pins, pin_cap=pin_cap)


@SETTINGS
@given(
    traces(),
    st.integers(1, 2),
    st.integers(1, 12),
    st.integers(1, 3),
    st.sampled_from([5.0, 60.0]),
    st.sampled_from(["lru", "lfu"]),
)
def test_auto_promotion_matches_reference(reqs, block, cap, min_hits, window, policy):
    auto = AutoPromote(min_hits=min_hits, window_s=window, cold_after_s=window)
    spec = CacheSpec(policy=policy, capacity_tokens=cap * block, pinned_fraction=0.5, auto_promote=auto)
    pin_cap = math.floor(cap * 0.5)
    got = _run(reqs, block, spec)
    assert got == reference(reqs, block, policy, cap - pin_cap, auto=auto, pin_cap=pin_cap)


@SETTINGS
@given(traces(), st.integers(1, 2), st.integers(0, 6), st.integers(0, 6), st.integers(0, 6))
def test_tiers_match_reference(reqs, block, gpu, cpu, disk):
    spec = CacheSpec(
        policy="lru",
        capacity_tokens=gpu * block,
        tiers=(Tier("cpu", cpu * block), Tier("disk", disk * block)),
    )
    trace = build_trace(reqs, engine_granularity("custom", block))
    out = run_model(trace, spec)
    ref = reference_tiers(reqs, block, (gpu, cpu, disk))
    got = list(
        zip(
            (out.hit_blocks - out.tier_blocks["cpu"] - out.tier_blocks["disk"]).tolist(),
            out.tier_blocks["cpu"].tolist(),
            out.tier_blocks["disk"].tolist(),
            strict=False,
        )
    )
    assert got == ref


def _brute_infinite(reqs, block):
    out = []
    for i, req in enumerate(reqs):
        toks = [int(t) for t in req.tokens]
        best = 0
        for prev in reqs[:i]:
            if prev.namespace != req.namespace:
                continue
            other = [int(t) for t in prev.tokens]
            lcp = 0
            while lcp < min(len(toks), len(other)) and toks[lcp] == other[lcp]:
                lcp += 1
            best = max(best, lcp)
        cap = (len(toks) - 1) // block if toks else 0
        out.append(min(best // block, cap))
    return out


@SETTINGS
@given(traces(max_requests=20), st.integers(1, 4))
def test_infinite_equals_longest_previous_prefix(reqs, block):
    spec = CacheSpec(policy="infinite")
    assert _run(reqs, block, spec) == _brute_infinite(reqs, block)
    # an unbounded LRU stack gives the same answer
    assert _run(reqs, block, CacheSpec(policy="lru", capacity_tokens=1e12)) == _brute_infinite(reqs, block)


@SETTINGS
@given(
    traces(max_requests=20),
    st.integers(1, 3),
    st.integers(0, 12),
    st.sampled_from(["lru", "lfu", "fifo", "priority"]),
    st.sampled_from([None, 0.0, 5.0, 40.0]),
    st.booleans(),
    st.data(),
)
def test_node_cache_equals_block_level_cache(reqs, block, cap, policy, ttl, prewarm, data):
    """The chain-compressed simulator replays exactly what the block-level one does (pins,
    prewarm, TTL, priorities): hits, evictions and pinned blocks."""
    from prefixplan.simulation.models import GenericCache, NodeCache, choose_pins

    trace = build_trace(reqs, engine_granularity("custom", block))
    prios = np.asarray(data.draw(st.lists(st.integers(0, 3), min_size=len(reqs), max_size=len(reqs))))
    pins_src = tuple(
        (reqs[i].namespace, reqs[i].tokens[: data.draw(st.integers(0, len(reqs[i].tokens)))])
        for i in data.draw(st.lists(st.integers(0, len(reqs) - 1), max_size=3))
    )
    pin_cap = data.draw(st.integers(0, 4))
    pins = choose_pins(trace, pins_src, pin_cap)
    kw = {"ttl_s": ttl, "pinned_blocks": pins, "priorities": prios, "prewarm_pins": prewarm}
    fast = NodeCache(trace, policy, cap, **kw).run()
    slow = GenericCache(trace, policy, cap, pinned_capacity=pin_cap, **kw).run()
    assert fast.hit_blocks.tolist() == slow.hit_blocks.tolist()
    assert (fast.evictions, fast.pinned_blocks) == (slow.evictions, slow.pinned_blocks)
