"""LRU stack distances without a Python loop (no TTL): each touch's distance as a difference of
two sums that sorting and binary search find for every touch at once.

Touches are numbered in replay order (request after request, each request's path deepest node
first); ``prev[g]`` is the touch before ``g`` of the same node, ``next[g]`` the one after it.
Before the request whose first touch is ``s``, the stack holds one entry per node touched
before: its last touch ``j < s``, the one with ``next[j] >= s``. The regular blocks above a node
last touched at ``p`` are those of the entries after ``p``:

    above = R(s) - Q(p, s),   R(s) = sum w[j] over j < s, next[j] >= s
                              Q(p, s) = sum w[j] over j <= p, next[j] >= s

``R`` is a running sum of the first touches' weights; ``Q`` is a dominance sum over the points
``(j, next[j])``, answered for every query by a merge-sort tree: at each level ``L`` the touches
sit in blocks of ``2**L`` consecutive numbers, sorted by ``next`` inside each block, with running
weights; the prefix ``[0, p]`` is at most one block per level (the set bits of ``p + 1``), and
in each block a binary search finds where ``next >= s`` begins. Every level is one stable sort
(of runs already sorted: a merge) and one ``searchsorted`` over the queries: ``O(n log n)``
numpy work, where the loop of :class:`~prefixplan.simulation.lru.LRUStack` does ``O(n log n)``
Python steps. The results are the same (tested against it).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

KEY_LIMIT = 2**62
"""Largest sort key (``block * (touches + 2) + next``) the int64 keys hold."""


@dataclass(frozen=True, slots=True)
class Distances:
    """What :func:`stack_distances` finds: per touch the regular blocks above its node before
    its request (``above``; ``none_mark`` when not in the stack, ``pin_mark`` for a pinned
    node touched before), per request the regular blocks it touches (``m_reg``), and the
    regular blocks in the stack at the end (``resident``)."""

    above: np.ndarray
    m_reg: np.ndarray
    resident: int


def fits(touches: int) -> bool:
    """Whether :func:`stack_distances` can key ``touches`` touches in int64."""
    return (touches + 2) * (touches + 2) < KEY_LIMIT


def stack_distances(
    t_node: np.ndarray,
    touch_end: np.ndarray,
    weight: np.ndarray,
    pinned: np.ndarray,
    dtype: type,
) -> Distances:
    """Stack distances (module docstring) of the touches ``t_node`` (node per touch, in replay
    order; ``touch_end``: cumulative touches at each request's end) with ``weight`` blocks per
    node and ``pinned`` nodes out of the stack. ``dtype``: the unsigned type of ``above``,
    whose maximum and maximum less one mark "not in the stack" and "pinned, touched before"."""
    n = int(t_node.shape[0])
    nreq = int(touch_end.shape[0])
    none_mark = int(np.iinfo(dtype).max)
    pin_mark = none_mark - 1
    lengths = np.diff(touch_end, prepend=0)
    req = np.repeat(np.arange(nreq, dtype=np.int64), lengths)
    start = (touch_end - lengths)[req]  # each touch's request's first touch
    prev, nxt = _neighbours(t_node)
    is_pin = pinned[t_node]
    w = np.where(is_pin, 0, weight[t_node]).astype(np.int64)
    m_reg = np.bincount(req, weights=w, minlength=nreq).astype(np.int64)
    first = prev < 0
    # R(s) for every request start s: first touches (regular) before s
    new_w = np.where(first, w, 0)
    before = np.concatenate(([0], np.cumsum(new_w)))  # before[g]: first-touch weight of touches < g
    above: np.ndarray = np.full(n, none_mark, dtype=dtype)
    above[is_pin & ~first] = pin_mark
    ask = np.flatnonzero(~is_pin & ~first)
    if ask.shape[0]:
        q = _dominance(nxt, w, prev[ask] + 1, start[ask])
        above[ask] = (before[start[ask]] - q).astype(dtype)
    return Distances(above, m_reg, int(new_w.sum()))


def _neighbours(t_node: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per touch, the previous and next touch of the same node (-1 and ``n`` where none)."""
    n = int(t_node.shape[0])
    order = np.argsort(t_node, kind="stable")
    same = t_node[order[1:]] == t_node[order[:-1]]
    prev = np.full(n, -1, dtype=np.int64)
    nxt = np.full(n, n, dtype=np.int64)
    prev[order[1:][same]] = order[:-1][same]
    nxt[order[:-1][same]] = order[1:][same]
    return prev, nxt


def _dominance(nxt: np.ndarray, w: np.ndarray, count: np.ndarray, floor: np.ndarray) -> np.ndarray:
    """Per query ``k``: the sum of ``w[j]`` over ``j < count[k]`` with ``nxt[j] >= floor[k]``."""
    n = int(nxt.shape[0])
    span = n + 2  # nxt and floor lie in [0, n]
    out = np.zeros(count.shape[0], dtype=np.int64)
    order = np.arange(n, dtype=np.int64)  # touches sorted by (block at this level, nxt)
    level = 0
    while (1 << level) <= n:
        if level:
            keys = (order >> level) * span + nxt[order]
            order = order[np.argsort(keys, kind="stable")]  # runs of 2**(level-1): merged
        keys = (order >> level) * span + nxt[order]
        cum = np.concatenate(([0], np.cumsum(w[order])))
        take = np.flatnonzero((count >> level) & 1)
        if take.shape[0]:
            block = (count[take] >> level) - 1
            lo = np.searchsorted(keys, block * span + floor[take], side="left")
            end = np.minimum((block + 1) << level, n)  # blocks are contiguous in the order
            out[take] += cum[end] - cum[lo]
        level += 1
    return out
