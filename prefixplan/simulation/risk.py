"""Eviction risk of hot prefixes: how often a prefix that was computed before had to be
prefilled again because the cache had dropped it (the "hot prefix pushed out by a burst").

For each hot prefix (its full blocks in the trace) and each cache model: ``uses`` is the
number of requests containing the prefix, ``reprefills`` the uses after the first one that
did not reuse all of it (up to the request's reusable blocks), ``reprefill_tokens`` the
prefix tokens they recomputed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from prefixplan.trace.blocks import BlockTrace
from prefixplan.trace.nodes import NodeTree


@dataclass(frozen=True, slots=True)
class PrefixRisk:
    """Re-prefill counts of one hot prefix under several cache models."""

    label: str
    tokens: int
    uses: int
    by_model: dict[str, tuple[int, int]] = field(default_factory=dict)  # model -> (reprefills, tokens)


def prefix_users(
    trace: BlockTrace, tree: NodeTree, last_block: int, intervals: tuple[np.ndarray, np.ndarray] | None = None
) -> np.ndarray:
    """Boolean mask of requests whose path contains ``last_block``."""
    tin, tout = intervals if intervals is not None else tree.dfs_intervals()
    u = int(tree.nodes_of(np.array([last_block]))[0])
    ends = tree.req_node
    valid = ends >= 0
    t = np.where(valid, tin[np.where(valid, ends, 0)], -1)
    return valid & (t >= tin[u]) & (t < tout[u])


def eviction_risk(
    trace: BlockTrace,
    tree: NodeTree,
    hot: list[tuple[str, str, np.ndarray]],
    models: dict[str, np.ndarray],
) -> list[PrefixRisk]:
    """Risk table for ``hot`` prefixes ``(label, namespace, tokens)`` under ``models`` (hit blocks)."""
    intervals = tree.dfs_intervals()
    out = []
    for label, namespace, tokens in hot:
        ids = trace.resolve(np.asarray(tokens, dtype=np.uint32), namespace)
        if not ids:
            continue
        users = prefix_users(trace, tree, ids[-1], intervals)
        idx = np.flatnonzero(users)
        k = len(ids)
        need = np.minimum(k, trace.cap_blocks[idx])
        later = np.arange(idx.shape[0]) > 0
        bt = trace.block_tokens[idx]
        by_model = {}
        for name, hits in models.items():
            short = np.maximum(need - hits[idx], 0)
            miss = later & (short > 0)
            by_model[name] = (int(miss.sum()), int((short * bt)[miss].sum()))
        tokens_real = int(k * (trace.block_tokens[idx[0]] if idx.size else trace.granularity.block_size))
        out.append(PrefixRisk(label, tokens_real, int(idx.shape[0]), by_model))
    return out
