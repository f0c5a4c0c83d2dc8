"""Prefix candidates: hand-built scenarios with exact figures, and properties vs an oracle."""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from oracles.candidates import find_candidates
from oracles.radix import RadixTree

from prefixplan.analysis.candidates import UNLABELLED, clip_segments, label_for
from prefixplan.core.granularity import aligned, reusable_prefix
from prefixplan.core.types import Segment
from prefixplan.errors import UsageError


def toks(start: int, n: int) -> list[int]:
    return list(range(start, start + n))


SYS = toks(1000, 70)  # 70 tokens: aligns to 64 at block 16
T1 = toks(2000, 32)
T2 = toks(3000, 48)


def user(i: int) -> list[int]:
    return toks(10_000 + 100 * i, 20)


def scenario() -> tuple[RadixTree, list[list[int]], list[tuple[Segment, ...]], list[int]]:
    """Shared system prompt, two tool sets, unique users."""
    layout = [T1, T1, T2, T1, T2, None]  # request 5 has no tools
    tree = RadixTree()
    seqs, segs, returns = [], [], []
    for i, tools in enumerate(layout):
        seq = SYS + (tools or []) + user(i)
        s = [Segment("template", 0, 3, "h"), Segment("system", 3, 70, "s")]
        pos = 70
        if tools is not None:
            s.append(Segment("tool", pos, pos + len(tools), "t", name="t1" if tools is T1 else "t2"))
            pos += len(tools)
        s.append(Segment("user", pos, pos + 20, f"u{i}"))
        seqs.append(seq)
        segs.append(tuple(s))
        returns.append(tree.insert(seq, "m", request_index=i, tenant=f"u{i % 4}", time=100.0 + i))
    return tree, seqs, segs, returns


def test_scenario_exact_figures() -> None:
    tree, _, segs, returns = scenario()
    assert returns == [0, 102, 70, 102, 118, 70]
    cands = find_candidates(tree, block_size=16, min_tokens=32, segments_of=lambda i: segs[i])
    got = [(c.id, c.length, c.raw_length, c.hits, c.reusable_tokens, c.marginal_tokens, c.parent) for c in cands]
    assert got == [
        (0, 64, 70, 6, 320, 320, None),  # system prompt: 5 reuses x 64
        (1, 96, 102, 3, 192, 64, 0),  # + tools t1: 2 reuses x (96 - 64)
        (2, 112, 118, 2, 112, 48, 0),  # + tools t2: 1 reuse x (112 - 64)
    ]
    sys_c, t1_c, t2_c = cands
    assert sys_c.label == "system" and sys_c.kinds == ("template", "system")
    assert sys_c.segments == (("template", 0, 3, None), ("system", 3, 64, None))
    assert t1_c.label == "system+tools" and t1_c.kinds == ("template", "system", "tool")
    assert t1_c.segments[-1] == ("tool", 70, 96, "t1")  # clipped to L
    assert t2_c.segments[-1] == ("tool", 70, 112, "t2")
    assert sys_c.tenants == 4 and not sys_c.tenants_capped
    assert (sys_c.first_seen, sys_c.last_seen) == (100.0, 105.0)
    assert (t2_c.first_seen, t2_c.request_index) == (102.0, 2)
    # the marginals add up to what an infinite block-16 cache reuses
    assert sum(c.marginal_tokens for c in cands) == sum(aligned(r, 16) for r in returns) == 432


def test_scenario_thresholds_and_top() -> None:
    tree, _, _, _ = scenario()
    # L < min_tokens drops the system prompt and t1: t2 has no candidate ancestor left
    only = find_candidates(tree, block_size=16, min_tokens=100)
    assert [(c.length, c.parent, c.marginal_tokens, c.label) for c in only] == [(112, None, 112, UNLABELLED)]
    # min_hits=3 drops t2; block 1 uses raw depths
    cands = find_candidates(tree, block_size=1, min_tokens=1, min_hits=3)
    assert [(c.length, c.hits, c.marginal_tokens) for c in cands] == [(70, 6, 350), (102, 3, 64)]
    top1 = find_candidates(tree, block_size=16, top=1)
    assert [c.length for c in top1] == [64]
    assert find_candidates(tree, block_size=16, top=0) == []


def test_same_aligned_length_keeps_shallow_node() -> None:
    p = toks(500, 40)
    tree = RadixTree()
    tree.insert(p + [1] * 5 + toks(900, 10), "m", request_index=0)
    tree.insert(p + [1] * 5 + toks(950, 10), "m", request_index=1)
    tree.insert(p + [2] + toks(990, 10), "m", request_index=2)
    # nodes: depth 40 (hits 3) and depth 45 (hits 2); both align to 32 at block 16
    c16 = find_candidates(tree, block_size=16, min_tokens=16)
    assert [(c.length, c.raw_length, c.hits, c.marginal_tokens) for c in c16] == [(32, 40, 3, 64)]
    c5 = find_candidates(tree, block_size=5, min_tokens=16)
    assert [(c.length, c.raw_length, c.hits, c.marginal_tokens, c.parent) for c in c5] == [
        (40, 40, 3, 80, None),
        (45, 45, 2, 5, 0),
    ]


def test_namespaces_are_separate_candidates() -> None:
    tree = RadixTree()
    for i, ns in enumerate(["a", "b", "a", "b", "b"]):
        tree.insert(SYS + user(i), ns, request_index=i)
    cands = find_candidates(tree, block_size=16)
    assert [(c.namespace, c.hits, c.marginal_tokens) for c in cands] == [("b", 3, 128), ("a", 2, 64)]


def test_ties_rank_by_length_then_first_seen() -> None:
    tree = RadixTree()
    a, b = toks(100, 32), toks(200, 32)
    tree.insert(b + [1], "m", request_index=0, time=5.0)
    tree.insert(a + [1], "m", request_index=1, time=1.0)
    tree.insert(b + [2], "m", request_index=2, time=6.0)
    tree.insert(a + [2], "m", request_index=3, time=2.0)
    cands = find_candidates(tree, block_size=16)
    assert [(c.marginal_tokens, c.first_seen) for c in cands] == [(32, 1.0), (32, 5.0)]


@pytest.mark.parametrize(
    ("kinds", "label"),
    [
        (["template", "system", "tool", "doc"], "rag"),
        (["system", "user"], "history"),
        (["system", "tool_result"], "history"),
        (["template", "system", "tool"], "system+tools"),
        (["tool"], "tools"),
        (["template", "system"], "system"),
        (["raw"], "raw"),
        (["block"], "trace"),
        (["template"], "template"),
        ([], "template"),
    ],
)
def test_label_rule(kinds, label) -> None:
    assert label_for(kinds) == label


def test_clip_segments_overlap_rule() -> None:
    segs = [Segment("system", 0, 10, "a"), Segment("tool", 10, 20, "b", name="x"), Segment("user", 20, 30, "c")]
    assert clip_segments(segs, 20) == (("system", 0, 10, None), ("tool", 10, 20, "x"))
    assert clip_segments(segs, 11) == (("system", 0, 10, None), ("tool", 10, 11, "x"))
    assert clip_segments([Segment("user", 5, 5, "e")], 10) == ()


def test_bad_parameters() -> None:
    tree = RadixTree()
    for kwargs in (
        {"block_size": 0},
        {"block_size": 16, "min_tokens": 0},
        {"block_size": 16, "min_hits": 0},
        {"block_size": 16, "top": -1},
    ):
        with pytest.raises(UsageError):
            find_candidates(tree, **kwargs)


# ---------------------------------------------------------------- properties
seqs_st = st.lists(st.lists(st.integers(0, 2), max_size=12), max_size=25)


def build(seqs: list[list[int]]) -> tuple[RadixTree, list[int]]:
    tree = RadixTree()
    returns = [tree.insert(np.array(s, dtype=np.uint32), "m", request_index=i) for i, s in enumerate(seqs)]
    return tree, returns


@settings(max_examples=200, deadline=None)
@given(seqs=seqs_st, block=st.integers(1, 4), min_hits=st.integers(2, 4))
def test_marginals_equal_oracle_block_prefix_reuse(seqs, block, min_hits) -> None:
    """Sum of marginals == sum over aligned prefixes p with count(p) >= min_hits of block*(count-1).

    With min_hits=2 this is exactly the infinite-cache reuse at this block size without the
    last-token rule: sum_i aligned(LCP_i, block), LCP_i = insert()'s return value.
    """
    tree, returns = build(seqs)
    cands = find_candidates(tree, block_size=block, min_tokens=1, min_hits=min_hits)
    counts = Counter(tuple(s[:d]) for s in seqs for d in range(block, len(s) + 1, block))
    oracle = sum(block * (c - 1) for c in counts.values() if c >= min_hits)
    assert sum(c.marginal_tokens for c in cands) == oracle
    if min_hits == 2:
        assert oracle == sum(aligned(r, block) for r in returns)
    lengths = {}
    for c in cands:
        path = tuple(int(x) for x in tree.path_tokens(c.node_id))
        assert len(path) == c.raw_length and c.length == aligned(c.raw_length, block)
        assert c.hits == counts[path[: c.length]] >= min_hits  # exact sharing count of L tokens
        assert c.reusable_tokens == (c.hits - 1) * c.length
        lengths[c.id] = (path[: c.length], c.length)
    # one candidate per distinct aligned prefix
    assert len({p for p, _ in lengths.values()}) == len(cands)
    for c in cands:
        prefix, _ = lengths[c.id]
        if c.parent is not None:
            ppath, plen = lengths[c.parent]
            assert plen < c.length and prefix[:plen] == ppath
            assert c.marginal_tokens == (c.hits - 1) * (c.length - plen)
    assert [c.id for c in cands] == list(range(len(cands)))
    assert all(a.marginal_tokens >= b.marginal_tokens for a, b in itertools.pairwise(cands))


@settings(max_examples=150, deadline=None)
@given(seqs=seqs_st, block=st.integers(1, 4))
def test_last_token_rule(seqs, block) -> None:
    """The engine's reusable tokens (last prompt token never reused) never exceed the marginals;
    they are equal when no prompt is a prefix of an earlier one (here: a unique end token)."""
    tree, returns = build(seqs)
    cands = find_candidates(tree, block_size=block, min_tokens=1)
    engine = sum(reusable_prefix(r, len(s), block) for r, s in zip(returns, seqs, strict=False))
    assert engine <= sum(c.marginal_tokens for c in cands)

    unique = [s + [100 + i] for i, s in enumerate(seqs)]
    tree, returns = build(unique)
    cands = find_candidates(tree, block_size=block, min_tokens=1)
    engine = sum(reusable_prefix(r, len(s), block) for r, s in zip(returns, unique, strict=False))
    assert engine == sum(c.marginal_tokens for c in cands)


@settings(max_examples=200, deadline=None)
@given(
    seqs=seqs_st,
    block=st.integers(1, 3),
    min_tokens=st.integers(1, 6),
    min_hits=st.integers(1, 3),
)
def test_candidate_set_matches_prefix_oracle(seqs, block, min_tokens, min_hits) -> None:
    """Brute force: a candidate is an aligned prefix p (len >= min_tokens, count >= min_hits)
    none of whose one-block extensions is shared by all of p's requests (else the deeper
    aligned prefix on the same node is the maximal one). Its parent is its longest proper
    prefix that is itself a candidate."""
    tree, _ = build(seqs)
    counts = Counter(tuple(s[:d]) for s in seqs for d in range(block, len(s) + 1, block))
    oracle = {}
    for p, n in counts.items():
        if len(p) < min_tokens or n < min_hits:
            continue
        if any(len(q) == len(p) + block and q[: len(p)] == p and m == n for q, m in counts.items()):
            continue
        oracle[p] = n
    cands = find_candidates(tree, block_size=block, min_tokens=min_tokens, min_hits=min_hits)
    by_id = {c.id: c for c in cands}
    got = {}
    for c in cands:
        p = tuple(int(x) for x in tree.path_tokens(c.node_id))[: c.length]
        got[p] = c.hits
        parents = [q for q in oracle if len(q) < len(p) and p[: len(q)] == q]
        l_parent = max((len(q) for q in parents), default=0)
        assert c.marginal_tokens == (c.hits - 1) * (c.length - l_parent)
        if c.parent is None:
            assert not parents
        else:
            assert by_id[c.parent].length == l_parent
    assert got == oracle
