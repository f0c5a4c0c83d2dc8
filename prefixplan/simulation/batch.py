"""Generation (a): prefix sharing among requests in flight together, nothing persists.

A request is in flight from its arrival until ``arrival + service`` seconds. When it
arrives it reuses the longest prefix held by any request still in flight (same full-block
granularity and last-token rule as the persistent cache). Once no in-flight request holds
a block, the block is gone.

Service time is either a fixed ``batch_window`` (seconds every request stays in flight) or
estimated as ``prompt_tokens / prefill_tps + output_tokens / decode_tps`` with
:data:`DEFAULT_PREFILL_TPS`, :data:`DEFAULT_DECODE_TPS` and, when the log has no output
length, :data:`DEFAULT_OUTPUT_TOKENS` (assumptions; queueing is not modelled).
"""

from __future__ import annotations

import heapq
from array import array

import numpy as np

from prefixplan.simulation.spec import finish_times, request_values
from prefixplan.trace.blocks import BlockTrace
from prefixplan.trace.nodes import NodeTree

DEFAULT_PREFILL_TPS = 8000.0  # prompt tokens per second for one request (assumption)
DEFAULT_DECODE_TPS = 40.0  # output tokens per second for one request (assumption)
DEFAULT_OUTPUT_TOKENS = 200  # when the log has no output length (assumption)


def service_times(
    trace: BlockTrace,
    batch_window: float | None = None,
    prefill_tps: float = DEFAULT_PREFILL_TPS,
    decode_tps: float = DEFAULT_DECODE_TPS,
    default_output: int = DEFAULT_OUTPUT_TOKENS,
) -> np.ndarray:
    """Seconds each request stays in flight."""
    if batch_window is not None:
        return np.full(trace.n_requests, float(batch_window))
    out = np.where(trace.output_tokens > 0, trace.output_tokens, default_output).astype(np.float64)
    return trace.prompt_tokens / prefill_tps + out / decode_tps


AT_ONCE_TOUCHES = 1 << 21
"""Up to this many (request, node) touches :func:`in_batch_hits` finds the hits of every request
at once (numpy, about 100 bytes a touch while it runs: 200 MB at the limit); more are replayed one
request at a time (8 bytes a node), so memory stays flat on bigger logs."""


def in_batch_hits(trace: BlockTrace, tree: NodeTree, service_s: np.ndarray) -> np.ndarray:
    """Reused blocks per request when only in-flight requests share prefixes (rows are arrivals,
    replayed in order)."""
    finish = finish_times(trace, service_s)
    lengths = tree.path_lengths()
    if int(lengths.sum()) <= AT_ONCE_TOUCHES:
        return _hits_at_once(trace, tree, finish, lengths)
    return _hits_replayed(trace, tree, finish)


def _hits_at_once(trace: BlockTrace, tree: NodeTree, finish: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """:func:`in_batch_hits` for every request at once. A node is held at a request's arrival
    while an earlier request through it is in flight: the latest finish among the earlier
    requests through the node (a running maximum per node over the touches sorted by node, then
    arrival) lies after the arrival. Whoever holds a node holds its ancestors, so the held nodes
    of a request's path are the ones nearest the root, and its hits are their blocks."""
    n = trace.n_requests
    t_node = tree.paths(tree.req_node, lengths).astype(np.int64)
    req = np.repeat(np.arange(n, dtype=np.int64), lengths)
    order = np.lexsort((req, t_node))  # by node, then arrival
    node_sorted = t_node[order]
    # finishes as ranks, offset per node so that one running maximum never crosses nodes
    ranked = np.argsort(finish, kind="stable")
    rank = np.empty(n, dtype=np.int64)
    rank[ranked] = np.arange(n, dtype=np.int64)
    value = node_sorted * n + rank[req[order]]
    running = np.maximum.accumulate(value) if value.shape[0] else value
    latest = np.full(order.shape[0], -1, dtype=np.int64)  # rank of the latest finish before, per touch
    if order.shape[0] > 1:
        same = node_sorted[1:] == node_sorted[:-1]
        latest[1:][same] = running[:-1][same] - node_sorted[1:][same] * n
    held_sorted = np.zeros(order.shape[0], dtype=bool)
    some = latest >= 0
    held_sorted[some] = finish[ranked[latest[some]]] > trace.times[req[order][some]]
    held = np.empty_like(held_sorted)
    held[order] = held_sorted
    shared = np.bincount(req, weights=np.where(held, tree.weight[t_node], 0), minlength=n).astype(np.int64)
    return np.minimum(shared, trace.cap_blocks).astype(np.int64)


def _hits_replayed(trace: BlockTrace, tree: NodeTree, finish_all: np.ndarray) -> np.ndarray:
    """:func:`in_batch_hits` one request at a time. The per-node state is in ``array("q")``s,
    8 bytes a node: lists of Python ints took about 100 MB on the 1.1M nodes of the 1M-request
    benchmark trace."""
    node_parent = array("q", tree.node_parent.astype(np.int64, copy=False).tobytes())
    weight = array("q", tree.weight.astype(np.int64, copy=False).tobytes())
    refs = array("q", bytes(8 * tree.n_nodes))  # requests in flight through each node
    running: list[tuple[float, int]] = []
    hits = np.zeros(trace.n_requests, dtype=np.int64)

    def path_of(v: int) -> list[int]:
        out = []
        while v >= 0:
            out.append(v)
            v = node_parent[v]
        return out

    columns = (trace.times, finish_all, tree.req_node, trace.cap_blocks)
    for r, now, finish, end, cap in request_values(*columns):
        while running and running[0][0] <= now:
            _, q = heapq.heappop(running)
            for v in path_of(int(tree.req_node[q])):
                refs[v] -= 1
        path = path_of(end)
        shared = 0
        for v in reversed(path):  # root first
            if refs[v] <= 0:
                break
            shared += weight[v]
        hits[r] = min(shared, cap)
        for v in path:
            refs[v] += 1
        heapq.heappush(running, (finish, r))
    return hits
