"""Counting shared prefixes on block ids gives the candidates of the token radix tree (the
reference): same lengths, hits, tenants, marginal tokens, ranks and labels."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from prefixplan.analysis.blocktree import BlockTree, count_tenants, find_block_candidates
from prefixplan.analysis.candidates import find_candidates
from prefixplan.analysis.radix import RadixTree
from prefixplan.core.granularity import engine_granularity
from prefixplan.trace.blocks import SimRequest, TraceBuilder


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
@given(streams(), st.integers(1, 4), st.integers(1, 8), st.integers(1, 3))
def test_block_candidates_equal_token_radix_candidates(stream, block, min_tokens, min_hits) -> None:  # type: ignore[no-untyped-def]
    tree = RadixTree()
    builder = TraceBuilder(engine_granularity("custom", block))
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
    tenants = count_tenants(
        blocks, got, lambda row: stream[int(trace.order[row])][3] or f"anon:{int(trace.order[row])}"
    )
    assert [tenants[c.node_id][0] for c in got] == [c.tenants for c in want]
    # the representative is the first request through the prefix, as in the radix tree
    assert [int(trace.order[c.request_index]) for c in got] == [c.request_index for c in want]
