"""Cache models vs slow, obviously-correct reference implementations (hypothesis)."""

from __future__ import annotations

import itertools
import math
from collections import deque

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from prefixplan.core.granularity import engine_granularity
from prefixplan.simulation.models import run_model
from prefixplan.simulation.spec import AutoPromote, CacheSpec, Tier
from prefixplan.trace.blocks import build_trace
from prefixplan.trace.requests import SimRequest

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


def _replay_order(reqs):
    """Input positions in replay order: arrival time, ties in input order."""
    return sorted(range(len(reqs)), key=lambda i: (reqs[i].time, i))


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


def reference(reqs, block, policy, cap, *, ttl=None, service=None, pins=(), pin_cap=0, auto=None, prios=None):
    """Straightforward replay: dict of cached blocks, eviction by scanning for the min leaf.

    Requests replay in arrival order (ties in input order); ``service`` and ``prios`` are per input
    request, and so are the hits returned. A block's last-use time is the latest finish (arrival +
    service) of the requests that used it; with a TTL it is gone once that lies more than ``ttl``
    before an arrival."""
    cache: dict = {}
    last_finish: dict = {}
    pinset = _pinned_keys(reqs, block, pins, pin_cap) if pins and auto is None else set()
    hits_window: dict = {}
    last_hit: dict = {}
    auto_pinned: set = set()
    paths = _paths(reqs, block)
    out = [0] * len(reqs)
    for r, i in enumerate(_replay_order(reqs)):
        req = reqs[i]
        path, capr = paths[i]
        now = req.time
        if auto is not None:
            for k in sorted(auto_pinned, key=lambda k: -len(k[1])):
                if last_hit.get(k, -math.inf) < now - auto.cold_after_s:
                    cache[k]["pinned"] = False
                    auto_pinned.discard(k)
        if ttl is not None:
            for k in [k for k, v in cache.items() if not v["pinned"] and last_finish[k] < now - ttl]:
                del cache[k]
        present = 0
        while present < len(path) and path[present] in cache:
            present += 1
        hit = min(present, capr)
        out[i] = hit
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
        p = prios[i] if prios is not None else 0
        finish = now + (service[i] if service is not None else 0.0)
        for k in path:
            if k not in cache:
                cache[k] = {"ins": r, "count": 0, "prio": p, "pinned": k in pinset}
            v = cache[k]
            v["last"] = r
            v["count"] += 1
            v["prio"] = max(v["prio"], p)
            last_finish[k] = max(last_finish.get(k, -math.inf), finish)
        while sum(1 for v in cache.values() if not v["pinned"]) > cap:  # over-long request gives back
            leaves = [k for k, v in cache.items() if not v["pinned"] and not any(_is_child(k, c, block) for c in cache)]
            del cache[min(leaves, key=key)]
    return out


def slow_unbounded(reqs, block, ttl, service):
    """The unbounded cache with a TTL, from its definition: block j of a request is reused iff blocks
    0..j-1 are, and an earlier arrival used it, and the latest such one finished (arrival +
    service) no more than ``ttl`` before this request arrived. Hits per input request."""
    paths = _paths(reqs, block)
    order = _replay_order(reqs)
    out = [0] * len(reqs)
    for pos, i in enumerate(order):
        path, capr = paths[i]
        hit = 0
        for key in path:
            finishes = [reqs[j].time + service[j] for j in order[:pos] if key in paths[j][0]]
            if not finishes or (ttl is not None and max(finishes) < reqs[i].time - ttl):
                break
            hit += 1
        out[i] = min(hit, capr)
    return out


def reference_tiers(reqs, block, caps):
    """LRU GPU tier with demotion to lower tiers on eviction and promotion on hit.

    Tiers are one recency order: a lower tier with free space takes the most recent blocks
    of the tiers below it (see prefixplan.simulation.models)."""
    tiers: list[dict] = [{} for _ in caps]  # key -> last use
    paths = _paths(reqs, block)
    out: list = [None] * len(reqs)
    for r, q in enumerate(_replay_order(reqs)):
        path, capr = paths[q]
        present = 0
        where = []
        while present < len(path):
            t = next((i for i, tier in enumerate(tiers) if path[present] in tier), None)
            if t is None:
                break
            where.append(t)
            present += 1
        hit = min(present, capr)
        out[q] = tuple(sum(1 for t in where[:hit] if t == j) for j in range(len(caps)))
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
    """Requests in any file order: arrival times come with ties (equal times) and, when the list is
    shuffled, out of file order; ``index`` is the position in the list."""
    n = draw(st.integers(1, max_requests))
    base = [draw(st.lists(VOCAB, min_size=0, max_size=10)) for _ in range(3)]
    reqs = []
    t = 0.0
    for _ in range(n):
        stem = base[draw(st.integers(0, 2))]
        keep = draw(st.integers(0, len(stem)))
        tail = draw(st.lists(VOCAB, min_size=0, max_size=5))
        t += draw(st.sampled_from([0.0, 1.0, 5.0, 30.0]))
        ns = draw(st.sampled_from(["m", "m", "other"]))
        toks = np.asarray(stem[:keep] + tail, dtype=np.uint32)
        reqs.append((t, ns, toks))
    if draw(st.booleans()):
        reqs = draw(st.permutations(reqs))
    return [SimRequest(time=t, namespace=ns, tokens=toks, index=i) for i, (t, ns, toks) in enumerate(reqs)]


def services(n, data, varied=True):
    """Service seconds per input request: none, one for all (finishes in arrival order), or (with
    ``varied``) each its own, so a later arrival may finish first."""
    kinds = ["none", "fixed", "each"] if varied else ["none", "fixed"]
    kind = data.draw(st.sampled_from(kinds))
    if kind == "none":
        return [0.0] * n
    if kind == "fixed":
        return [data.draw(st.sampled_from([0.5, 3.0, 40.0]))] * n
    return data.draw(st.lists(st.sampled_from([0.0, 0.5, 3.0, 40.0]), min_size=n, max_size=n))


SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _trace(reqs, block):
    return build_trace(reqs, engine_granularity("custom", block))


def _rows(trace, per_input):
    """Per-input values (priorities, service times) in the trace's row (arrival) order."""
    return None if per_input is None else np.asarray(per_input)[trace.order]


def _inputs(trace, per_row):
    """Per-row results back in input order."""
    out = np.zeros_like(per_row)
    out[trace.order] = per_row
    return out.tolist()


def _run(reqs, block, spec, prios=None, service=None):
    trace = _trace(reqs, block)
    out = run_model(trace, spec, priorities=_rows(trace, prios), service_s=_rows(trace, service))
    return _inputs(trace, out.hit_blocks)


@SETTINGS
@given(traces(), st.integers(1, 3), st.integers(0, 10), st.sampled_from(["lru", "lfu", "fifo", "priority"]), st.data())
def test_policies_match_reference(reqs, block, cap, policy, data):
    prios = np.asarray(data.draw(st.lists(st.integers(0, 2), min_size=len(reqs), max_size=len(reqs))))
    spec = CacheSpec(policy=policy, capacity_tokens=cap * block)
    got = _run(reqs, block, spec, prios)
    assert got == reference(reqs, block, policy, cap, prios=prios)


@SETTINGS
@given(traces(), st.integers(1, 3))
def test_node_depths_count_the_walk_to_the_root(reqs, block):
    """NodeTree.depths (pointer jumping in numpy) equals walking each node's parents one by one."""
    from prefixplan.trace.nodes import build_tree

    tree = build_tree(_trace(reqs, block))
    walked = []
    for v in range(tree.n_nodes):
        d, u = 0, v
        while u >= 0:
            d, u = d + 1, int(tree.node_parent[u])
        walked.append(d)
    depths = tree.depths().tolist()
    assert depths == walked
    assert all(len(tree.path(r)) == (depths[e] if e >= 0 else 0) for r, e in enumerate(tree.req_node.tolist()))


@SETTINGS
@given(traces(), st.integers(1, 3), st.integers(0, 10))
def test_lru_stack_matches_generic_lru_and_reference(reqs, block, cap):
    from prefixplan.simulation.generic import GenericCache

    trace = _trace(reqs, block)
    stack = run_model(trace, CacheSpec(policy="lru", capacity_tokens=cap * block))
    generic = GenericCache(trace, "lru", cap).run()
    ref = reference(reqs, block, "lru", cap)
    assert _inputs(trace, stack.hit_blocks) == ref
    assert _inputs(trace, generic.hit_blocks) == ref
    assert stack.evictions == generic.evictions


TTLS = st.sampled_from([0.0, 1.0, 5.0, 40.0])


@SETTINGS
@given(
    traces(), st.integers(1, 2), st.integers(0, 8), TTLS, st.sampled_from(["lru", "lfu", "fifo", "priority"]), st.data()
)
def test_ttl_matches_reference(reqs, block, cap, ttl, policy, data):
    """Every policy at a finite capacity with a TTL counted from each block's latest finish (service
    times that let later arrivals finish first included)."""
    service = services(len(reqs), data)
    prios = data.draw(st.lists(st.integers(0, 2), min_size=len(reqs), max_size=len(reqs)))
    spec = CacheSpec(policy=policy, capacity_tokens=cap * block, ttl_s=ttl)
    got = _run(reqs, block, spec, prios, service)
    assert got == reference(reqs, block, policy, cap, ttl=ttl, service=service, prios=prios)


@SETTINGS
@given(traces(), st.integers(1, 2), st.integers(0, 8), TTLS, st.data())
def test_lru_stack_with_ttl_is_exact_when_finishes_keep_arrival_order(reqs, block, cap, ttl, data):
    """With no service times or one for all, expiry only removes the bottom of the LRU stack: the
    one-pass stack gives the reference's hits at every capacity, and the block-level simulator's
    evictions (blocks leaving by expiry are not evictions)."""
    from prefixplan.simulation.generic import GenericCache
    from prefixplan.simulation.lru import LRUStack, stack_exact
    from prefixplan.trace.nodes import build_tree

    service = services(len(reqs), data, varied=False)
    trace = _trace(reqs, block)
    rows = _rows(trace, service)
    assert stack_exact(trace, ttl, rows)
    stack = LRUStack(trace, build_tree(trace), ttl_s=ttl, service_s=rows)
    for c in (cap, cap + 3, math.inf):
        present, _, evictions = stack.evaluate(c)
        hits = np.minimum(present, trace.cap_blocks)
        assert _inputs(trace, hits) == reference(reqs, block, "lru", c, ttl=ttl, service=service)
        assert evictions == GenericCache(trace, "lru", c, ttl_s=ttl, service_s=rows).run().evictions


def test_lru_stack_is_not_used_where_a_recent_block_expires_first():
    """A long request's blocks outlive a later, short request's: once the short one's blocks
    expire, the stack would see the long one's blocks on top again, although the short one
    evicted them. LRU with a TTL then runs node by node."""
    from prefixplan.simulation.lru import LRUStack, stack_exact
    from prefixplan.trace.nodes import build_tree

    a, b = (np.asarray([k, k, 9], dtype=np.uint32) for k in (1, 2))  # 3 blocks each at block 1
    reqs = [SimRequest(0.0, "m", a, index=0), SimRequest(1.0, "m", b, index=1), SimRequest(51.0, "m", a, index=2)]
    service = [100.0, 0.0, 0.0]  # a is in use until 100 s; b is done at 1 s and expires at 11 s
    trace = _trace(reqs, 1)
    assert not stack_exact(trace, 10.0, _rows(trace, service))
    expect = reference(reqs, 1, "lru", 3, ttl=10.0, service=service)
    assert expect == [0, 0, 0]  # b evicted a at 1 s (3 blocks fit)
    assert _run(reqs, 1, CacheSpec("lru", 3, 10.0), service=service) == expect
    stack = LRUStack(trace, build_tree(trace), ttl_s=10.0, service_s=_rows(trace, service))
    assert np.minimum(stack.evaluate(3)[0], trace.cap_blocks).tolist() == [0, 0, 2]  # why it is not used


@SETTINGS
@given(traces(), st.integers(1, 2), TTLS, st.sampled_from(["lru", "lfu", "fifo", "priority"]), st.data())
def test_unbounded_ttl_every_policy_equals_slow_reference(reqs, block, ttl, policy, data):
    """At unbounded capacity nothing is evicted, so every policy with the same TTL reuses the same
    blocks: each model (the stack, the chain-compressed and block-level simulators, the unbounded
    pass) equals the definition in :func:`slow_unbounded`."""
    from prefixplan.simulation.generic import GenericCache
    from prefixplan.simulation.lru import LRUStack
    from prefixplan.simulation.nodecache import NodeCache
    from prefixplan.simulation.spec import infinite_hits
    from prefixplan.trace.nodes import build_tree

    service = services(len(reqs), data)
    expect = slow_unbounded(reqs, block, ttl, service)
    assert expect == reference(reqs, block, policy, math.inf, ttl=ttl, service=service)
    assert _run(reqs, block, CacheSpec(policy=policy, capacity_tokens=None, ttl_s=ttl), service=service) == expect
    trace = _trace(reqs, block)
    rows = _rows(trace, service)
    models = {
        "node": NodeCache(trace, policy, math.inf, ttl_s=ttl, service_s=rows).run().hit_blocks,
        "block": GenericCache(trace, policy, math.inf, ttl_s=ttl, service_s=rows).run().hit_blocks,
        "stack": np.minimum(
            LRUStack(trace, build_tree(trace), ttl_s=ttl, service_s=rows).evaluate(math.inf)[0], trace.cap_blocks
        ),
        "pass": infinite_hits(trace, ttl, rows),
    }
    for name, hits in models.items():
        assert _inputs(trace, hits) == expect, name


@SETTINGS
@given(traces(), st.integers(1, 2), st.data())
def test_in_flight_sharing_never_exceeds_the_persistent_cache(reqs, block, data):
    """A block an in-flight request holds has a last use after now, so the persistent cache with
    any TTL (0 included) reuses at least what in-batch sharing does, and no more than with none."""
    from prefixplan.simulation.batch import in_batch_hits
    from prefixplan.simulation.spec import infinite_hits
    from prefixplan.trace.nodes import build_tree

    trace = _trace(reqs, block)
    rows = _rows(trace, services(len(reqs), data))
    batch = in_batch_hits(trace, build_tree(trace), rows)
    for ttl in (0.0, 1.0, 40.0):
        persistent = infinite_hits(trace, ttl, rows)
        assert np.all(batch <= persistent) and np.all(persistent <= infinite_hits(trace))
    # requests are turned into Python values a window at a time: any window gives the same hits
    from unittest import mock

    import prefixplan.simulation.spec as spec_mod

    for step in (1, 3):
        with mock.patch.object(spec_mod, "ROWS_PER_STEP", step):
            assert in_batch_hits(trace, build_tree(trace), rows).tolist() == batch.tolist()


def _expiry_case(service):
    """Block size 1. r0 uses 1..10; r1 uses 1..5; r2 wants 1..10 at 50 s with a 10 s TTL."""
    head = list(range(1, 11))
    prompts = [head + [50], head[:5] + [51], head + [52]]
    return [
        SimRequest(t, "m", np.asarray(p, dtype=np.uint32), index=i)
        for i, (t, p) in enumerate(zip((0.0, 1.0, 50.0), prompts, strict=True))
    ], service


def _all_models(reqs, service, ttl):
    """Hits of every model: each policy at unbounded and at a finite capacity, tiers, auto-promotion,
    and (under ``"pins"``, as pinned blocks never expire) the first 3 blocks of request 0 pinned."""
    out = {}
    for policy in ("lru", "lfu", "fifo", "priority"):
        for cap in (None, 40):
            spec = CacheSpec(policy=policy, capacity_tokens=cap, ttl_s=ttl)
            out[f"{policy} {cap}"] = _run(reqs, 1, spec, service=service)
    out["lru tiers"] = _run(reqs, 1, CacheSpec("lru", 12, ttl, tiers=(Tier("cpu", 20),)), service=service)
    auto = AutoPromote(min_hits=1, window_s=5.0, cold_after_s=5.0)
    out["lru auto"] = _run(reqs, 1, CacheSpec("lru", 40, ttl, 0.25, auto_promote=auto), service=service)
    pins = ((reqs[0].namespace, reqs[0].tokens[:3]),)
    pinned = {pol: _run(reqs, 1, CacheSpec(pol, 40, ttl, 0.25, pins), service=service) for pol in ("lru", "lfu")}
    assert pinned["lru"] == pinned["lfu"]
    return out, pinned["lru"]


def test_a_hit_is_a_prefix_of_alive_blocks():
    """r0 (0 s, served 100 s) uses blocks 1-10; r1 (1 s, served 0 s) uses 1-5 again. At 50 s with a
    10 s TTL blocks 1-5 are still in use by r0: r2 reuses all ten. A model that took r1's finish
    as the last use of 1-5 would find them expired and credit 6-10 alone (or nothing)."""
    cases = [
        (_expiry_case([100.0, 0.0, 0.0]), [0, 5, 10], [0, 5, 10]),
        # r0 done at once: at 50 s blocks 6-10 are long gone, 1-5 too (used until 1 s); pins stay
        (_expiry_case([0.0, 0.0, 0.0]), [0, 5, 0], [0, 5, 3]),
    ]
    # r1 at 45 s renews 1-5 only: r2 reuses 1-5 and never 6-10 (expired since 10 s)
    (reqs, service), _, _ = cases[1]
    renewed = [reqs[0], SimRequest(45.0, "m", reqs[1].tokens, index=1), reqs[2]]
    cases.append(((renewed, service), [0, 0, 5], [0, 3, 5]))
    for (reqs, service), expect, with_pins in cases:
        models, pinned = _all_models(reqs, service, 10.0)
        for name, hits in models.items():
            assert hits == expect, name
        assert pinned == with_pins


def test_entries_in_use_do_not_expire_and_file_order_does_not_matter():
    """Timestamps out of file order: replay is by arrival. r (0 s) is served 30 s; with a 5 s TTL
    its blocks are alive until 35 s, for every policy."""
    p = np.asarray(list(range(1, 9)) + [40], dtype=np.uint32)
    reqs = [
        SimRequest(34.0, "m", p, index=0),  # written first, arrives last: r finished 4 s ago
        SimRequest(20.0, "m", p, index=1),  # while r is served
        SimRequest(0.0, "m", p, index=2),  # r
        SimRequest(20.0, "m", p, index=3),  # tie with index 1: replayed after it
    ]
    service = [0.0, 0.0, 30.0, 0.0]
    late = [SimRequest(36.0, "m", p, index=0), *reqs[1:]]  # 6 s after r finished, 16 s after the 20 s pair
    for case, expect, with_pins in ((reqs, [8, 8, 0, 8], [8, 8, 0, 8]), (late, [0, 8, 0, 8], [3, 8, 0, 8])):
        models, pinned = _all_models(case, service, 5.0)
        for name, hits in models.items():
            assert hits == expect, name
        assert pinned == with_pins


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
    ttl = data.draw(st.sampled_from([None, 1.0, 40.0]))
    service = services(len(reqs), data)
    spec = CacheSpec(policy=policy, capacity_tokens=cap * block, ttl_s=ttl, pinned_fraction=frac, pins=pins)
    pin_cap = math.floor(cap * frac)
    got = _run(reqs, block, spec, service=service)
    assert got == reference(reqs, block, policy, cap - pin_cap, ttl=ttl, service=service, pins=pins, pin_cap=pin_cap)


@SETTINGS
@given(
    traces(),
    st.integers(1, 2),
    st.integers(1, 12),
    st.integers(1, 3),
    st.sampled_from([5.0, 60.0]),
    st.sampled_from(["lru", "lfu"]),
    st.data(),
)
def test_auto_promotion_matches_reference(reqs, block, cap, min_hits, window, policy, data):
    auto = AutoPromote(min_hits=min_hits, window_s=window, cold_after_s=window)
    ttl = data.draw(st.sampled_from([None, 1.0, 40.0]))
    service = services(len(reqs), data)
    spec = CacheSpec(policy=policy, capacity_tokens=cap * block, ttl_s=ttl, pinned_fraction=0.5, auto_promote=auto)
    pin_cap = math.floor(cap * 0.5)
    got = _run(reqs, block, spec, service=service)
    assert got == reference(reqs, block, policy, cap - pin_cap, ttl=ttl, service=service, auto=auto, pin_cap=pin_cap)


@SETTINGS
@given(traces(), st.integers(1, 2), st.integers(0, 6), st.integers(0, 6), st.integers(0, 6))
def test_tiers_match_reference(reqs, block, gpu, cpu, disk):
    spec = CacheSpec(
        policy="lru",
        capacity_tokens=gpu * block,
        tiers=(Tier("cpu", cpu * block), Tier("disk", disk * block)),
    )
    trace = _trace(reqs, block)
    out = run_model(trace, spec)
    ref = reference_tiers(reqs, block, (gpu, cpu, disk))
    got = list(
        zip(
            _inputs(trace, out.hit_blocks - out.tier_blocks["cpu"] - out.tier_blocks["disk"]),
            _inputs(trace, out.tier_blocks["cpu"]),
            _inputs(trace, out.tier_blocks["disk"]),
            strict=False,
        )
    )
    assert got == ref


@SETTINGS
@given(traces(), st.integers(1, 2), st.integers(0, 6), st.integers(0, 6), TTLS, st.data())
def test_tiers_with_ttl_match_reference(reqs, block, gpu, cpu, ttl, data):
    """The tiers are one recency order: the GPU holds what an LRU cache of its size holds, GPU + CPU
    what one of their summed size holds, TTL included (by the stack, or block by block where the
    stack is not exact)."""
    service = services(len(reqs), data)
    spec = CacheSpec("lru", gpu * block, ttl, tiers=(Tier("cpu", cpu * block),))
    trace = _trace(reqs, block)
    out = run_model(trace, spec, service_s=_rows(trace, service))
    gpu_hits = _inputs(trace, out.hit_blocks - out.tier_blocks["cpu"])
    assert gpu_hits == reference(reqs, block, "lru", gpu, ttl=ttl, service=service)
    assert _inputs(trace, out.hit_blocks) == reference(reqs, block, "lru", gpu + cpu, ttl=ttl, service=service)


@SETTINGS
@given(traces(), st.integers(1, 2), st.integers(2, 12), st.integers(0, 6), st.data())
def test_pins_with_a_lower_tier_match_reference(reqs, block, gpu, cpu, data):
    """Pinned blocks stay on the GPU: the GPU's hits are the pinned partition's, and the CPU tier
    adds what an LRU of the regular GPU share plus the CPU holds (never a negative load)."""
    pins = tuple(
        (reqs[i].namespace, reqs[i].tokens[: data.draw(st.integers(0, len(reqs[i].tokens)))])
        for i in data.draw(st.lists(st.integers(0, len(reqs) - 1), min_size=1, max_size=2))
    )
    spec = CacheSpec("lru", gpu * block, None, 0.5, pins, tiers=(Tier("cpu", cpu * block),))
    pin_cap = math.floor(gpu * 0.5)
    trace = _trace(reqs, block)
    out = run_model(trace, spec)
    assert (out.tier_blocks["cpu"] >= 0).all()
    gpu_hits = _inputs(trace, out.hit_blocks - out.tier_blocks["cpu"])
    assert gpu_hits == reference(reqs, block, "lru", gpu - pin_cap, pins=pins, pin_cap=pin_cap)
    total = reference(reqs, block, "lru", gpu - pin_cap + cpu, pins=pins, pin_cap=pin_cap)
    assert _inputs(trace, out.hit_blocks) == total


def _brute_infinite(reqs, block):
    order = _replay_order(reqs)
    out = [0] * len(reqs)
    for pos, i in enumerate(order):
        req = reqs[i]
        toks = [int(t) for t in req.tokens]
        best = 0
        for prev in (reqs[j] for j in order[:pos]):
            if prev.namespace != req.namespace:
                continue
            other = [int(t) for t in prev.tokens]
            lcp = 0
            while lcp < min(len(toks), len(other)) and toks[lcp] == other[lcp]:
                lcp += 1
            best = max(best, lcp)
        cap = (len(toks) - 1) // block if toks else 0
        out[i] = min(best // block, cap)
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
    prewarm, TTL with service times, priorities): hits, evictions and pinned blocks."""
    from prefixplan.simulation.generic import GenericCache
    from prefixplan.simulation.nodecache import NodeCache
    from prefixplan.simulation.spec import choose_pins

    trace = build_trace(reqs, engine_granularity("custom", block))
    prios = np.asarray(data.draw(st.lists(st.integers(0, 3), min_size=len(reqs), max_size=len(reqs))))
    pins_src = tuple(
        (reqs[i].namespace, reqs[i].tokens[: data.draw(st.integers(0, len(reqs[i].tokens)))])
        for i in data.draw(st.lists(st.integers(0, len(reqs) - 1), max_size=3))
    )
    pin_cap = data.draw(st.integers(0, 4))
    pins = choose_pins(trace, pins_src, pin_cap)
    service = _rows(trace, services(len(reqs), data))
    kw = {"ttl_s": ttl, "pinned_blocks": pins, "priorities": prios, "prewarm_pins": prewarm, "service_s": service}
    fast = NodeCache(trace, policy, cap, **kw).run()
    slow = GenericCache(trace, policy, cap, pinned_capacity=pin_cap, **kw).run()
    assert fast.hit_blocks.tolist() == slow.hit_blocks.tolist()
    assert (fast.evictions, fast.pinned_blocks) == (slow.evictions, slow.pinned_blocks)


@SETTINGS
@given(traces(), st.integers(1, 2), st.integers(0, 8), st.integers(0, 6), st.booleans(), st.data())
def test_the_lru_stack_evaluates_the_same_in_steps(reqs, block, gpu, cpu, prewarm, data):
    """Touches are evaluated a bounded step at a time, cut between requests: every step size gives
    the per-request results and evictions of one step, with pins and a lower tier."""
    import prefixplan.simulation.lru as lru

    pins = tuple(
        (reqs[i].namespace, reqs[i].tokens[: data.draw(st.integers(0, len(reqs[i].tokens)))])
        for i in data.draw(st.lists(st.integers(0, len(reqs) - 1), min_size=0, max_size=2))
    )
    frac = 0.5 if pins and gpu else 0.0
    spec = CacheSpec("lru", gpu * block, None, frac, pins, tiers=(Tier("cpu", cpu * block),), prewarm_pins=prewarm)
    trace = _trace(reqs, block)
    saved = lru.TOUCHES_PER_STEP
    outs = []
    try:
        for step in (1 << 20, 1, 2, 5):
            lru.TOUCHES_PER_STEP = step
            out = run_model(trace, spec)
            outs.append((out.hit_blocks.tolist(), {k: v.tolist() for k, v in out.tier_blocks.items()}, out.evictions))
    finally:
        lru.TOUCHES_PER_STEP = saved
    assert all(o == outs[0] for o in outs)
    counts = [3, 0, 1, 4, 2, 1, 0]
    touch_end = np.cumsum(counts)
    for step in (1, 2, 3, 100):
        cuts = lru._request_steps(touch_end, step)
        assert cuts[0][0] == 0 and cuts[-1][1] == len(counts)
        assert all(a < b for a, b in cuts) and all(b == c for (_, b), (c, _) in itertools.pairwise(cuts))
        # a step holds at least `step` touches unless it is the last, and never more than one
        # request past it
        assert all(sum(counts[a:b]) >= step for a, b in cuts[:-1])
        assert all(sum(counts[a : b - 1]) < step for a, b in cuts)


def _stack_inputs(reqs, block, pin, data):  # type: ignore[no-untyped-def]
    """The block trace of ``reqs``, its tree, a pinned node drawn when ``pin``, and drawn
    service times: what an :class:`LRUStack` is built from."""
    from prefixplan.trace.nodes import build_tree

    trace = _trace(reqs, block)
    tree = build_tree(trace)
    pinned = np.zeros(tree.n_nodes, dtype=bool)
    if pin and tree.n_nodes:
        pinned[data.draw(st.integers(0, tree.n_nodes - 1))] = True
    return trace, tree, pinned, _rows(trace, services(len(reqs), data))


def _loop_only():  # type: ignore[no-untyped-def]
    """Run the Fenwick loop for every TTL (the tests of its own mechanics: windows,
    renumbering); without a TTL stacks are otherwise found at once (``stackdist``)."""
    from unittest import mock

    import prefixplan.simulation.lru as lru

    return mock.patch.object(lru, "OFFLINE_TOUCHES", -1)


def _stack_arrays(stack):  # type: ignore[no-untyped-def]
    return (
        stack.touch_end.tolist(),
        stack.t_node.tolist(),
        stack.t_above.tolist(),
        stack.m_reg.tolist(),
        stack.e_above.tolist(),
        stack.e_w.tolist(),
        stack.resident_regular,
    )


@SETTINGS
@given(traces(), st.integers(1, 2), st.sampled_from([None, 0.0, 1.0, 5.0]), st.booleans(), st.data())
def test_the_lru_stack_reads_requests_in_windows(reqs, block, ttl, pin, data):
    """Requests' paths walked and read as Python values a window of about one, two, three or all
    touches at a time give the same touches, stack distances and expiries (with TTL, service
    times and a pin)."""
    with _loop_only():
        from unittest import mock

        import prefixplan.simulation.lru as lru
        from prefixplan.simulation.lru import LRUStack

        trace, tree, pinned, rows = _stack_inputs(reqs, block, pin, data)
        want = _stack_arrays(LRUStack(trace, tree, pinned, ttl_s=ttl, service_s=rows))
        for window in (1, 2, 3):
            with mock.patch.object(lru, "BUILD_TOUCHES", window):
                assert _stack_arrays(LRUStack(trace, tree, pinned, ttl_s=ttl, service_s=rows)) == want


@SETTINGS
@given(traces(), st.integers(1, 2), st.sampled_from([None, 0.0, 1.0, 5.0]), st.booleans(), st.data())
def test_the_lru_stack_renumbers_its_positions_without_changing_a_touch(reqs, block, ttl, pin, data):
    """Stack positions renumbered whenever they run out (no slack), now and then, or never, in
    4- or 8-byte slots, give the same touches, stack distances and expiries. The requests come four times over (later),
    so positions run out: at least once without slack."""
    with _loop_only():
        from unittest import mock

        import prefixplan.simulation.lru as lru
        from prefixplan.simulation.lru import LRUStack

        end = max(r.time for r in reqs)
        reqs = [
            SimRequest(
                time=r.time + k * (end + 1.0), namespace=r.namespace, tokens=r.tokens, index=k * len(reqs) + r.index
            )
            for k in range(4)
            for r in reqs
        ]
        trace, tree, pinned, rows = _stack_inputs(reqs, block, pin, data)
        with mock.patch.object(lru, "STACK_SLACK", 1e9):
            want = _stack_arrays(stack := LRUStack(trace, tree, pinned, ttl_s=ttl, service_s=rows))
        assert stack.renumbered == 0
        for slack, narrow in ((0.0, lru.NARROW_LIMIT), (0.5, lru.NARROW_LIMIT), (0.0, 0)):
            # narrow 0: positions and Fenwick sums in 8-byte slots, as on a tree of 2**31 blocks
            with mock.patch.object(lru, "STACK_SLACK", slack), mock.patch.object(lru, "NARROW_LIMIT", narrow):
                stack = LRUStack(trace, tree, pinned, ttl_s=ttl, service_s=rows)
            assert _stack_arrays(stack) == want
            if slack == 0.0 and not pin and stack.t_node.shape[0]:
                assert stack.renumbered > 0


def test_the_lru_stack_positions_grow_with_nodes_not_touches():
    """The same few prompts asked many times: positions run out and are renumbered, the Fenwick
    tree stays about 1.5 slots per node, and the stack distances equal those of a stack that
    never renumbers."""
    with _loop_only():
        from unittest import mock

        import prefixplan.simulation.lru as lru
        from prefixplan.simulation.lru import LRUStack
        from prefixplan.trace.nodes import build_tree

        prompts = [np.arange(i * 100, i * 100 + 7, dtype=np.uint32) for i in range(4)]
        reqs = [SimRequest(time=float(t), namespace="m", tokens=prompts[t % 4], index=t) for t in range(400)]
        trace = _trace(reqs, 2)
        tree = build_tree(trace)
        stack = LRUStack(trace, tree)
        assert stack.renumbered > 10
        with mock.patch.object(lru, "STACK_SLACK", 1e9):
            never = LRUStack(trace, tree)
        assert never.renumbered == 0
        assert _stack_arrays(stack) == _stack_arrays(never)
        present, _, _ = stack.evaluate(2 * 3)  # two of the four prompts fit: round robin always misses
        assert present[4:].tolist() == [0] * (len(reqs) - 4)
        present, _, _ = stack.evaluate(4 * 3)
        assert present[4:].tolist() == [3] * (len(reqs) - 4)
