"""Counting shared prefixes on block ids gives the candidates of the token radix tree (the
reference): same lengths, hits, tenants, marginal tokens, ranks and labels."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracles.candidates import find_candidates
from oracles.radix import RadixTree

from prefixplan.analysis.blocktree import BlockTree, count_tenants, find_block_candidates
from prefixplan.core.granularity import engine_granularity
from prefixplan.trace.blocks import TraceBuilder
from prefixplan.trace.requests import SimRequest


@st.composite
def streams(draw):  # type: ignore[no-untyped-def]
    n = draw(st.integers(1, 16))
    stems = [draw(st.lists(st.integers(0, 3), min_size=0, max_size=24)) for _ in range(3)]
    out = []
    for i in range(n):
        stem = stems[draw(st.integers(0, 2))]
        keep = draw(st.integers(0, len(stem)))
        tail = draw(st.lists(st.integers(0, 3), max_size=8))
        ns = draw(st.sampled_from(["m", "m", "x"]))
        tenant = draw(st.sampled_from([None, "a", "b", "c"]))
        out.append((float(i), ns, np.asarray(stem[:keep] + tail, dtype=np.uint32), tenant))
    return out


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(streams(), st.integers(1, 4), st.integers(1, 8), st.integers(1, 3), st.sampled_from([1, 3, 1 << 18]))
def test_block_candidates_equal_token_radix_candidates(stream, block, min_tokens, min_hits, window) -> None:  # type: ignore[no-untyped-def]
    """Candidates, their latest arrival and tenants (requests walked up a window of one, three
    or all at a time) equal those of the token radix tree."""
    from unittest import mock

    import prefixplan.analysis.blocktree as blocktree_mod

    with mock.patch.object(blocktree_mod, "ROW_WINDOW", window):
        _candidates_equal_radix(stream, block, min_tokens, min_hits)


def _candidates_equal_radix(stream, block, min_tokens, min_hits) -> None:  # type: ignore[no-untyped-def]
    tree = RadixTree()
    builder = TraceBuilder(engine_granularity("custom", block), index_singletons=min_hits < 2)
    for i, (t, ns, toks, tenant) in enumerate(stream):
        tree.insert(toks, ns, request_index=i, tenant=tenant or f"anon:{i}", time=t)
        builder.add(SimRequest(time=t, namespace=ns, tokens=toks, index=i))
    trace = builder.finish()
    blocks = BlockTree(trace)
    got = find_block_candidates(blocks, min_tokens=min_tokens, min_hits=min_hits)
    want = find_candidates(tree, block_size=block, min_tokens=min_tokens, min_hits=min_hits)
    assert [
        (c.namespace, c.length, c.hits, c.marginal_tokens, c.reusable_tokens, c.first_seen, c.last_seen) for c in got
    ] == [
        (c.namespace, c.length, c.hits, c.marginal_tokens, c.reusable_tokens, c.first_seen, c.last_seen) for c in want
    ]
    assert [c.parent for c in got] == [c.parent for c in want]
    names = [stream[int(i)][3] for i in trace.order]
    ids = {name: k + 1 for k, name in enumerate(sorted({n for n in names if n}))}
    tenants = count_tenants(blocks, got, np.array([ids.get(n, 0) if n else 0 for n in names], dtype=np.uint64))
    assert [tenants[c.node_id][0] for c in got] == [c.tenants for c in want]
    capped = count_tenants(blocks, got, np.array([ids.get(n, 0) if n else 0 for n in names], dtype=np.uint64), cap=1)
    assert [capped[c.node_id] for c in got] == [(min(c.tenants, 1), c.tenants > 1) for c in want]
    # the representative is the first request through the prefix, as in the radix tree
    assert [int(trace.order[c.request_index]) for c in got] == [c.request_index for c in want]


def _filtered_sizes(keys, index_singletons):  # type: ignore[no-untyped-def]
    """``index_sizes`` that keeps the keys seen once out of the index whenever it may."""
    from prefixplan.trace.blockids import COUNT_CHUNK
    from prefixplan.trace.storage.twice import estimate_keys

    distinct, repeated = estimate_keys(keys.iter_chunks(COUNT_CHUNK))
    if index_singletons:
        return int(1.05 * distinct) + 1024, 0
    return int(1.05 * repeated) + 1024, distinct + 1024


def _arrays(trace):  # type: ignore[no-untyped-def]
    names = ("times", "order", "n_blocks", "cap_blocks", "end_block", "known_blocks", "block_start", "attach")
    names = (*names, "parent", "block_depth")
    return {k: getattr(trace, k).tolist() for k in (*names, "block_first_row")}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(streams(), st.integers(1, 4), st.sampled_from([2, 3, 16]))
def test_blocks_of_one_request_left_out_of_the_index_change_no_id(stream, block, bits) -> None:  # type: ignore[no-untyped-def]
    """Leaving blocks seen once out of the index (the twice-filter; 2**2 slots makes most single
    keys false positives, 2**16 almost none) gives the same block trace, and every prefix that
    two requests share still resolves to the same ids; so do keys and index kept on disk, key
    counts read a few rows at a time, passes over one to three arrivals at a time (later
    batches bisect what earlier ones indexed), and the index built in 2, 4 or 8 parts."""
    from unittest import mock

    import prefixplan.trace.blockids as blockids_mod
    import prefixplan.trace.blocks as blocks_mod
    import prefixplan.trace.storage.twice as twice

    gran = engine_granularity("custom", block)
    built = []
    for singletons, spill, window, parts_bits, batch in (
        (True, 1 << 24, 1 << 16, 0, 512),
        (False, 1 << 24, 1 << 16, 0, 512),
        (False, 0, 1 << 16, 0, 1),
        (False, 0, 3, 0, 2),
        (False, 1 << 24, 1 << 16, 2, 3),
        (False, 0, 2, 3, 1),
        (True, 0, 1 << 16, 1, 2),
    ):
        builder = TraceBuilder(gran, index_singletons=singletons, spill_bytes=spill)
        for i, (t, ns, toks, _) in enumerate(stream):
            builder.add(SimRequest(time=t, namespace=ns, tokens=toks, index=i))
        with (
            mock.patch.object(twice, "slot_bits", lambda _n: bits),
            mock.patch.object(blockids_mod, "ASSIGN_WINDOW", window),
            mock.patch.object(blockids_mod, "INDEX_BUDGET", 1 << 40 if parts_bits == 0 else 0),
            mock.patch.object(blockids_mod, "MAX_INDEX_BITS", parts_bits),
            mock.patch.object(blockids_mod, "BATCH_ROWS", batch),
            # the lean builds filter the keys seen once even where every key would fit one part
            mock.patch.object(blocks_mod, "index_sizes", _filtered_sizes),
        ):
            built.append(builder.finish())
        assert built[-1].index._index.bits == parts_bits
    full, lean, spilled, windowed, parted, parted_spilled, parted_full = built
    assert _arrays(lean) == _arrays(full) == _arrays(spilled) == _arrays(windowed)
    assert _arrays(parted) == _arrays(parted_spilled) == _arrays(parted_full) == _arrays(full)
    hits = np.zeros(full.n_distinct_blocks, dtype=np.int64)
    first: dict[int, int] = {}
    for r in range(full.n_requests):
        hits[full.path_blocks(r)] += 1
        for b in full.path_blocks(r):
            first.setdefault(b, r)  # rows are arrivals: the first row through a block brought it
    assert full.block_first_row.tolist() == [first[b] for b in range(full.n_distinct_blocks)]
    for _, ns, toks, _ in stream:
        every = full.resolve(toks, ns)
        want = [b for b in every if hits[b] >= 2]
        assert lean.resolve(toks, ns)[: len(want)] == want
        assert spilled.resolve(toks, ns) == lean.resolve(toks, ns)
        assert parted_full.resolve(toks, ns) == every
        # each part has a filter of its own: other false positives, the same repeated blocks
        for lean_parts in (parted, parted_spilled):
            got = lean_parts.resolve(toks, ns)
            assert got == every[: len(got)] and len(got) >= len(want)


def test_twice_filter_never_misses_a_repeated_key() -> None:
    from prefixplan.trace.storage.twice import TwiceFilter

    rng = np.random.default_rng(3)
    keys = rng.integers(1, 2**63, size=50_000, dtype=np.int64).view(np.uint64)
    repeated = keys[:5_000]
    f = TwiceFilter(12)  # 4096 slots for 50k keys: many false positives, never a false negative
    f.add(np.concatenate([keys[:30_000], repeated[:10]]))
    f.add(np.concatenate([keys[30_000:], repeated[10:]]))
    assert f.maybe_twice(repeated).all()
    roomy = TwiceFilter.of([keys, repeated], 50_000)
    assert roomy.maybe_twice(repeated).all()
    assert roomy.maybe_twice(keys[5_000:]).mean() < 0.15  # ~distinct keys / slots


def test_distinct_keys_are_estimated_from_a_hash_sample() -> None:
    """The twice filter is sized by an estimate of distinct keys, however often each repeats."""
    from prefixplan.trace.storage.twice import estimate_keys

    rng = np.random.default_rng(5)
    keys = rng.integers(1, 2**63, size=200_000, dtype=np.int64).view(np.uint64)
    repeats = np.concatenate([keys, keys[:50_000], keys[:50_000], keys[:1_000]])
    rng.shuffle(repeats)
    got, _ = estimate_keys(np.array_split(repeats, 7))
    assert 180_000 <= got <= 220_000
    assert estimate_keys([])[0] == 0


def test_repeated_keys_are_estimated_from_the_same_sample() -> None:
    """The index of keys seen twice or more is sized by an estimate of how many there are,
    whether a key's occurrences fall in one chunk or several (the sample is merged now and then)."""
    from unittest import mock

    import prefixplan.trace.storage.twice as twice

    rng = np.random.default_rng(7)
    keys = rng.integers(1, 2**63, size=300_000, dtype=np.int64).view(np.uint64)
    repeats = np.concatenate([keys, keys[:60_000], keys[:1_000], keys[:1_000]])
    assert twice.estimate_keys([]) == (0, 0)
    for chunks, merge_at in ((7, 1 << 16), (300, 64)):
        rng.shuffle(repeats)
        with (
            mock.patch.object(twice, "MERGE_AT", merge_at),
            mock.patch.object(twice, "_merge_counts", wraps=twice._merge_counts) as merged,
        ):
            distinct, repeated = twice.estimate_keys(np.array_split(repeats, chunks))
        assert 270_000 <= distinct <= 330_000
        assert 52_000 <= repeated <= 68_000
        # once at the end, or (a low threshold) now and then along the way: the same estimate
        assert merged.call_count == 1 if merge_at > 1000 else merged.call_count > 3
    split = [c.view(np.int64) for c in np.array_split(repeats, 5)]  # signed chunks read as keys
    assert twice.estimate_keys(split) == twice.estimate_keys(np.array_split(repeats, 5))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(streams(), st.integers(1, 4), st.data())
def test_tree_nodes_are_runs_of_consecutive_block_ids(stream, block, data) -> None:  # type: ignore[no-untyped-def]
    """build_tree's node of each block equals following parents up to the node's start (the
    definition), with and without extra ends (pins)."""
    from prefixplan.trace.nodes import build_tree

    builder = TraceBuilder(engine_granularity("custom", block), index_singletons=False)
    for i, (t, ns, toks, _) in enumerate(stream):
        builder.add(SimRequest(time=t, namespace=ns, tokens=toks, index=i))
    trace = builder.finish()
    d = trace.n_distinct_blocks
    extra = sorted(data.draw(st.sets(st.integers(0, max(0, d - 1)), max_size=3))) if d else []
    tree = build_tree(trace, extra_ends=extra)
    parent = trace.parent.tolist()
    children = [0] * d
    for p in parent:
        if p >= 0:
            children[p] += 1
    ends = set(trace.end_block[trace.end_block >= 0].tolist())
    member = set(extra)
    starts = [p < 0 or children[p] != 1 or p in ends or ((b in member) != (p in member)) for b, p in enumerate(parent)]
    head = []
    for b in range(d):
        h = b
        while not starts[h]:
            h = parent[h]
        head.append(h)
    first = sorted(set(head))
    assert tree.first_block.tolist() == first
    assert tree.node_of_block.tolist() == [first.index(h) for h in head]
    assert tree.weight.tolist() == [head.count(f) for f in first]


@given(st.lists(st.integers(0, 40), max_size=300), st.integers(1, 64))
def test_stable_order_is_a_stable_argsort(values, step) -> None:  # type: ignore[no-untyped-def]
    from prefixplan.analysis.blocktree import stable_order

    a = np.asarray(values, dtype=np.int32)
    assert stable_order(a, step=step).tolist() == np.argsort(a, kind="stable").tolist()


def test_deep_prompts_keep_their_lengths() -> None:
    """Depths come from each request's known blocks and its run of new ids, with nothing kept per
    block: a 70,000-block prompt has its full length."""
    rng = np.random.default_rng(1)
    for n_tokens in (300, 70_000):
        shared = rng.integers(0, 50_000, n_tokens, dtype=np.uint32)
        builder = TraceBuilder(engine_granularity("custom", 1))
        for i in range(3):
            tail = np.asarray([60_000 + i, 60_100 + i], dtype=np.uint32)
            builder.add(SimRequest(time=float(i), namespace="m", tokens=np.concatenate([shared, tail]), index=i))
        trace = builder.finish()
        assert int(trace.block_depth.max()) == n_tokens + 2
        got = find_block_candidates(BlockTree(trace), min_tokens=1, min_hits=2)
        assert [(c.length, c.hits) for c in got] == [(n_tokens, 3)]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(streams(), st.integers(1, 4))
def test_parents_and_depths_follow_the_paths(stream, block) -> None:  # type: ignore[no-untyped-def]
    """Each request's path, walked root first, has depths 1, 2, ... and each block's parent is
    the block before it: the per-row ``attach`` and ``block_start`` describe every block."""
    builder = TraceBuilder(engine_granularity("custom", block), index_singletons=False)
    want_paths = []
    for i, (t, ns, toks, _) in enumerate(stream):
        builder.add(SimRequest(time=t, namespace=ns, tokens=toks, index=i))
        want_paths.append(len(toks) // block)
    trace = builder.finish()
    parent = trace.parent
    depth = trace.block_depth
    for r in range(trace.n_requests):
        path = trace.path_blocks(r)
        assert len(path) == trace.n_blocks[r] == want_paths[int(trace.order[r])]
        assert depth[path].tolist() == list(range(1, len(path) + 1))
        ups = [-1, *path[:-1]][: len(path)]
        assert parent[path].tolist() == ups
        assert trace.parents_of(np.asarray(path, dtype=np.int64)).tolist() == ups
