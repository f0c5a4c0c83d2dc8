"""Stack distances found at once (``prefixplan.simulation.stackdist``) equal the Fenwick loop's."""

from __future__ import annotations

import math
from unittest import mock

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import prefixplan.simulation.lru as lru
from prefixplan.simulation.lru import LRUStack
from prefixplan.simulation.stackdist import _dominance
from prefixplan.trace.requests import SimRequest
from tests.test_simulate_models import SETTINGS, _stack_arrays, _stack_inputs, traces


@SETTINGS
@given(traces(), st.integers(1, 2), st.booleans(), st.data())
def test_stack_distances_found_at_once_equal_the_loops(reqs, block, pin, data):  # type: ignore[no-untyped-def]
    """Without a TTL: the same touches, distances, per-request blocks and resident blocks as the
    Fenwick loop, with and without a pin, the requests twice over (nodes come back after others),
    and the same hits and evictions at every capacity."""
    end = max(r.time for r in reqs)
    reqs = [
        SimRequest(time=r.time + k * (end + 1.0), namespace=r.namespace, tokens=r.tokens, index=k * len(reqs) + r.index)
        for k in range(2)
        for r in reqs
    ]
    trace, tree, pinned, _ = _stack_inputs(reqs, block, pin, data)
    at_once = LRUStack(trace, tree, pinned)
    with mock.patch.object(lru, "OFFLINE_TOUCHES", -1):
        looped = LRUStack(trace, tree, pinned)
    assert _stack_arrays(at_once) == _stack_arrays(looped)
    for cap in (0.0, 1.0, 3.0, 10.0, math.inf):
        a, b = at_once.evaluate(cap), looped.evaluate(cap)
        assert a[0].tolist() == b[0].tolist() and a[2] == b[2]


@given(
    st.lists(st.tuples(st.integers(0, 40), st.integers(0, 9)), min_size=1, max_size=40),
    st.lists(st.tuples(st.integers(0, 40), st.integers(0, 41)), min_size=1, max_size=20),
)
def test_dominance_sums_equal_counting_by_hand(points, queries):  # type: ignore[no-untyped-def]
    """The merge-sort tree's sums: for each query, w over j < count with nxt[j] >= floor."""
    nxt = np.array([p[0] for p in points], dtype=np.int64)
    w = np.array([p[1] for p in points], dtype=np.int64)
    n = len(points)
    count = np.array([min(q[0], n) for q in queries], dtype=np.int64)
    floor = np.array([min(q[1], n) for q in queries], dtype=np.int64)
    nxt = np.minimum(nxt, n)
    want = [int(sum(w[j] for j in range(c) if nxt[j] >= f)) for c, f in zip(count, floor, strict=True)]
    assert _dominance(nxt, w, count, floor).tolist() == want


@SETTINGS
@given(traces(), st.integers(1, 2), st.data())
def test_in_batch_hits_found_at_once_equal_the_replay(reqs, block, data):  # type: ignore[no-untyped-def]
    """In-flight sharing found for every request at once (a running maximum of finishes per
    node) equals the request-by-request replay, with drawn service times."""
    from prefixplan.simulation import batch
    from prefixplan.trace.nodes import build_tree
    from tests.test_simulate_models import _rows, _trace, services

    trace = _trace(reqs, block)
    rows = _rows(trace, services(len(reqs), data))
    tree = build_tree(trace)
    at_once = batch.in_batch_hits(trace, tree, rows)
    with mock.patch.object(batch, "AT_ONCE_TOUCHES", -1):
        replayed = batch.in_batch_hits(trace, tree, rows)
    assert at_once.tolist() == replayed.tolist()
