"""RadixTree against a brute-force oracle (a plain list of the inserted sequences)."""

from __future__ import annotations

import time as _time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from oracles.radix import RadixTree

from prefixplan.core.granularity import aligned, reusable_prefix
from prefixplan.errors import UsageError


def lcp(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def oracle_match(seqs: list[tuple[int, ...]], q: tuple[int, ...]) -> int:
    return max((lcp(s, q) for s in seqs), default=0)


# Small alphabets and short sequences so prefixes are shared, edges split, duplicates occur.
seq_st = st.lists(st.integers(0, 2), max_size=10).map(tuple)
item_st = st.tuples(
    st.sampled_from(["a", "b"]),
    seq_st,
    st.sampled_from([None, "t1", "t2", "t3"]),
    st.one_of(st.none(), st.integers(0, 50).map(float)),
)


@settings(max_examples=200, deadline=None)
@given(items=st.lists(item_st, max_size=25), queries=st.lists(seq_st, max_size=8))
def test_tree_matches_oracle(items, queries) -> None:
    tree = RadixTree()
    inserted: dict[str, list[tuple[int, tuple[int, ...], str | None, float | None]]] = {}
    for i, (ns, seq, tenant, t) in enumerate(items):
        prev = [s for _, s, _, _ in inserted.get(ns, [])]
        got = tree.insert(np.array(seq, dtype=np.uint32), ns, request_index=i, tenant=tenant, time=t)
        assert got == oracle_match(prev, seq)
        inserted.setdefault(ns, []).append((i, seq, tenant, t))
    assert tree.n_sequences == len(items)

    for ns in ("a", "b", "never"):
        seqs = [s for _, s, _, _ in inserted.get(ns, [])]
        for q in queries + seqs:
            assert tree.match(q, ns) == oracle_match(seqs, q)

    views = list(tree.nodes())
    assert len(views) == tree.n_nodes
    by_id = {v.id: v for v in views}
    seen_paths: set[tuple[str, tuple[int, ...]]] = set()
    tree_prefixes: set[tuple[str, tuple[int, ...]]] = set()
    edge_total = 0
    for v in views:
        path = tuple(int(x) for x in tree.path_tokens(v.id))
        assert len(path) == v.depth
        assert (v.namespace, path) not in seen_paths
        seen_paths.add((v.namespace, path))
        recs = [r for r in inserted[v.namespace] if r[1][: v.depth] == path]
        # hits = sequences having the node's full path as a prefix
        assert v.hits == len(recs)
        assert v.ends == sum(1 for r in recs if r[1] == path)
        assert v.request_index == recs[0][0]  # the first request that reached it
        tenants = {r[2] for r in recs if r[2] is not None}
        assert v.tenants == len(tenants) and not v.tenants_capped
        assert tree.tenants_of(v.id) == frozenset(tenants)
        times = [r[3] for r in recs if r[3] is not None]
        assert v.first_seen == (min(times) if times else None)
        assert v.last_seen == (max(times) if times else None)
        if v.parent is None:
            assert v.depth == 0 and tree.root(v.namespace) == v.id
        else:
            parent = by_id[v.parent]
            assert parent.namespace == v.namespace
            assert v.depth_start == parent.depth < v.depth
            # compressed: every non-root node is a branch point or an end point
            assert len(v.children) >= 2 or v.ends >= 1
            edge_total += v.edge_length
            for d in range(v.depth_start + 1, v.depth + 1):
                tree_prefixes.add((v.namespace, path[:d]))
                # any prefix ending on this edge has the node's hit count
                assert sum(1 for r in recs if r[1][:d] == path[:d]) == v.hits
    oracle_prefixes = {
        (ns, s[:d]) for ns, recs in inserted.items() for _, s, _, _ in recs for d in range(1, len(s) + 1)
    }
    assert tree_prefixes == oracle_prefixes
    # edges are disjoint arena slices covering the used arena
    assert edge_total == tree.arena_tokens == len(oracle_prefixes)


@given(match_len=st.integers(0, 300), prompt_len=st.integers(0, 300), block=st.integers(1, 64))
def test_reusable_prefix_is_largest_full_block_prefix_before_last_token(match_len, prompt_len, block) -> None:
    r = reusable_prefix(match_len, prompt_len, block)
    assert r % block == 0 and r >= 0
    assert r <= match_len and (r <= prompt_len - 1 or r == 0)
    best = max(k * block for k in range(301) if k * block <= max(0, min(match_len, prompt_len - 1)))
    assert r == best


def test_aligned_and_bad_block() -> None:
    assert aligned(31, 16) == 16 and aligned(32, 16) == 32 and aligned(5, 1) == 5
    with pytest.raises(UsageError):
        aligned(10, 0)
    with pytest.raises(UsageError):
        RadixTree(tenant_cap=0)


def test_edge_cases() -> None:
    tree = RadixTree()
    assert tree.insert([], "m", request_index=0) == 0
    assert tree.insert([], "m", request_index=1) == 0
    assert tree.node(tree.root("m")).ends == 2
    assert tree.insert([5, 6, 7, 8], "m", request_index=2) == 0
    # prefix of an existing sequence: split inside the edge, endpoint becomes a node
    assert tree.insert([5, 6], "m", request_index=3) == 2
    assert tree.insert([5, 6, 7, 8], "m", request_index=4) == 4  # duplicate
    assert tree.insert([5, 6, 7, 8, 9], "m", request_index=5) == 4  # extends a leaf
    assert tree.insert([5, 9], "m", request_index=6) == 1  # split inside the first edge
    views = {tuple(int(x) for x in tree.path_tokens(v.id)): v for v in tree.nodes()}
    assert set(views) == {(), (5,), (5, 6), (5, 6, 7, 8), (5, 6, 7, 8, 9), (5, 9)}
    assert views[()].hits == 7
    assert views[(5,)].hits == 5 and views[(5,)].ends == 0 and views[(5,)].request_index == 2
    assert views[(5, 6)].hits == 4 and views[(5, 6)].ends == 1
    assert views[(5, 6, 7, 8)].hits == 3 and views[(5, 6, 7, 8)].ends == 2
    assert tree.match([5, 6, 7, 8, 9, 10], "m") == 5
    assert tree.match([5, 6, 7], "m") == 3
    assert tree.arena_tokens == 5 + 1  # 5,6,7,8 + 9, and the 9 after 5


def test_namespaces_never_share_nodes() -> None:
    tree = RadixTree()
    seq = np.arange(100, dtype=np.uint32)
    assert tree.insert(seq, "m", request_index=0) == 0
    assert tree.insert(seq, "m|lora=x", request_index=1) == 0
    assert tree.match(seq, "m") == 100 and tree.match(seq, "m|lora=x") == 100
    assert tree.match(seq, "other") == 0
    assert tree.namespaces == ("m", "m|lora=x")
    assert tree.arena_tokens == 200
    ns_of = {v.id: v.namespace for v in tree.nodes()}
    for v in tree.nodes():
        if v.parent is not None:
            assert ns_of[v.parent] == v.namespace


def test_tenant_cap_reports_at_least() -> None:
    tree = RadixTree(tenant_cap=3)
    for i, t in enumerate(["a", "b", "a", "c", "d", "e"]):
        tree.insert([1, 2, 3, i + 10], "m", request_index=i, tenant=t)
    shared = next(v for v in tree.nodes() if v.depth == 3)
    assert shared.hits == 6 and shared.tenants == 3 and shared.tenants_capped
    leaf = next(v for v in tree.nodes() if v.depth == 4)
    assert leaf.tenants == 1 and not leaf.tenants_capped


def test_long_shared_prefix_is_fast_and_compact() -> None:
    rng = np.random.default_rng(0)
    shared = rng.integers(0, 150_000, 6000, dtype=np.uint32)
    tree = RadixTree(initial_arena=16)
    t0 = _time.perf_counter()
    for i in range(200):
        tail = rng.integers(0, 150_000, 2000, dtype=np.uint32)
        got = tree.insert(np.concatenate([shared, tail]), "m", request_index=i)
        assert got >= (6000 if i else 0)
    elapsed = _time.perf_counter() - t0
    # one edge per branch, tokens stored once: 6000 shared + 200 tails (a tail may share its
    # first token with an earlier one by chance, so allow a little slack)
    assert 6000 + 200 * 1990 <= tree.arena_tokens <= 6000 + 200 * 2000
    assert tree.n_nodes <= 1 + 1 + 200 * 2
    assert tree.arena_bytes >= tree.arena_tokens * 4
    before = tree.match(np.concatenate([shared, tail]), "m")
    tree.trim()
    assert tree.arena_bytes == tree.arena_tokens * 4
    assert tree.match(np.concatenate([shared, tail]), "m") == before == 8000
    assert tree.insert(tail, "m", request_index=999) == 0  # grows again after a trim
    assert elapsed < 5.0  # 1.6M tokens; ~0.05 s in practice
