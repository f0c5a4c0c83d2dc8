"""One batch of consecutive arrivals against a block-key index (:func:`scan`), the step both
passes of :func:`~prefixplan.trace.blockids.assign_ids` repeat, and :class:`ArrivalPass`: that
pass fed batch by batch as the rows come in (:class:`~prefixplan.trace.blocks.TraceBuilder`
while workers render), for a log read in arrival order whose keys fit one index part."""

from __future__ import annotations

import math

import numpy as np

from prefixplan.trace.storage.twice import TwiceFilter
from prefixplan.trace.storage.u64index import U64Index, table_bytes


class ArrivalPass:
    """The one-part pass of :func:`~prefixplan.trace.blockids.assign_ids` over arrivals fed in
    order: every key indexed (no seen-twice filter), each row's known count and deepest known
    key kept. :meth:`feed` stops (and :attr:`live` turns False, the index dropped) once the
    index would outgrow ``budget`` bytes: the finishing pass then does the work."""

    def __init__(self, budget: int, capacity: int = 1 << 16) -> None:
        self.budget = budget
        self.capacity = capacity
        self.latest = -math.inf  # the last arrival time fed
        self._on = True
        self.index: U64Index | None = None  # made by the first batch (a builder fed row by row never needs it)
        self.known: list[np.ndarray] = []
        self.before: list[np.ndarray] = []
        self.rows = 0
        self.keys = 0

    @property
    def live(self) -> bool:
        return self._on

    def stop(self) -> None:
        self._on = False
        self.index = None
        self.known, self.before = [], []

    def take(self, times: np.ndarray, timed: np.ndarray, keys: np.ndarray, lengths: np.ndarray) -> None:
        """The next rows as they come in (``times``, ``timed``: their arrival times and whether
        the log gave them): fed while every row so far is timed and no earlier than the one
        before (then the finishing sort keeps the input order), else the pass stops."""
        if not self._on or not times.shape[0]:
            return
        if not bool(np.all(timed)) or float(times[0]) < self.latest or bool(np.any(times[1:] < times[:-1])):
            self.stop()
            return
        self.latest = float(times[-1])
        self.feed(keys, lengths)

    def feed(self, keys: np.ndarray, lengths: np.ndarray) -> None:
        """The next arrivals: ``lengths`` keys each, ``keys`` theirs in order."""
        if not self._on:
            return
        if self.index is None:  # ids are key positions in arrival order: 4 bytes while they fit
            self.index = U64Index(capacity=self.capacity, id_dtype=np.int32)
        lengths = np.asarray(lengths, dtype=np.int64)
        n = int(lengths.shape[0])
        if self.keys + int(keys.shape[0]) >= 2**31:
            self.stop()
            return
        known = lengths.copy()
        before = np.zeros(n, dtype=np.uint64)
        has = np.flatnonzero(lengths > 0)
        before[has] = keys[np.cumsum(lengths)[has] - 1]  # until a new key is found, a row's last key
        scan(lengths, 0, n, self.keys, keys, None, self.index, None, known, (keys, before))
        self.known.append(known)
        self.before.append(before)
        self.rows += n
        self.keys += int(keys.shape[0])
        if table_bytes(len(self.index), 4) > self.budget:
            self.stop()

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """Per row: known keys, deepest known key."""
        cat = np.concatenate
        return (
            cat(self.known) if self.known else np.zeros(0, np.int64),
            cat(self.before) if self.before else np.zeros(0, np.uint64),
        )


def scan(
    all_lengths: np.ndarray,
    lo: int,
    hi: int,
    offset: int,
    keys: np.ndarray,
    at: np.ndarray | None,
    index: U64Index,
    twice: TwiceFilter | None,
    known: np.ndarray,
    track: tuple[np.ndarray, np.ndarray] | None,
) -> None:
    """One batch of arrivals ``lo`` to ``hi`` (its first key is the ``offset``-th in arrival
    order) in a part's pass: ``keys`` are the batch's keys of the part, in arrival order, at
    positions ``at`` in the batch (None: every key of the batch). Index the part's new keys
    (those before a row's first single one, by ``twice``) with their occurrence and lower
    ``known`` of the rows where a new or single one is found; with ``track`` (the batch's
    keys, and the per-row array of each row's deepest known key) note that key too.

    A row's keys already in the index are a prefix of its keys here (chained keys: whoever
    brought a key brought the ones before it, and each pass indexes a prefix of a row's keys
    of its part), so that prefix is found by bisection, a few lookups per row, and only the
    keys after it are looked at one by one."""
    if not keys.shape[0]:
        return
    lengths = all_lengths[lo:hi]
    starts = np.cumsum(lengths) - lengths
    if at is None:
        seg_start, seg_len = starts, lengths
    else:  # each row's keys of the part: a run of ``keys`` (row-major)
        seg_start = np.searchsorted(at, starts, side="left")
        seg_len = np.searchsorted(at, starts + lengths, side="left") - seg_start
    indexed = _indexed_prefix(index, keys, seg_start, seg_len)
    count = seg_len - indexed
    total = int(count.sum())
    if not total:
        return
    rows = np.repeat(np.arange(hi - lo), count)
    idx = np.arange(total) + np.repeat(seg_start + indexed - (np.cumsum(count) - count), count)
    tail = keys[idx]
    if at is not None:
        idx = at[idx]  # positions in the batch
    pos = idx - starts[rows]
    if twice is not None:
        # a request's keys from its first single one on are single (chained): not indexed
        single = np.flatnonzero(~twice.maybe_twice(tail))
        if single.shape[0]:
            first = _first_per_row(lengths, rows, pos, single)
            _lower(lo, first, starts, known, track)
            keep = pos < first[rows]
            tail, idx, rows, pos = tail[keep], idx[keep], rows[keep], pos[keep]
            if not tail.shape[0]:
                return
    # a key not in the index is new where it first occurs in the batch (positions are
    # row-major: arrival order), known wherever it occurs again
    _, first_of = np.unique(tail, return_index=True)
    new_at = np.sort(first_of)
    index.insert(tail[new_at], offset + idx[new_at])
    _lower(lo, _first_per_row(lengths, rows, pos, new_at), starts, known, track)


def _indexed_prefix(index: U64Index, keys: np.ndarray, seg_start: np.ndarray, seg_len: np.ndarray) -> np.ndarray:
    """Per row (its keys: ``keys[seg_start:seg_start + seg_len]``, those in ``index`` a
    prefix of them), how many of its keys are in the index: a bisection, all rows a step at a
    time."""
    low = np.zeros(seg_len.shape[0], dtype=np.int64)
    high = seg_len.astype(np.int64, copy=True)
    live = np.flatnonzero(high > 0)
    while live.shape[0]:
        mid = (low[live] + high[live]) >> 1
        present = index.lookup(keys[seg_start[live] + mid]) >= 0
        low[live] = np.where(present, mid + 1, low[live])
        high[live] = np.where(present, high[live], mid)
        live = live[low[live] < high[live]]
    return low


def _first_per_row(lengths: np.ndarray, owner: np.ndarray, pos: np.ndarray, picked: np.ndarray) -> np.ndarray:
    """Per row of a batch, the position of its first key among ``picked`` (ascending indices
    into ``owner``/``pos``, which are row-major), or its length where it has none."""
    first = lengths.copy()
    if picked.shape[0]:
        rows = owner[picked]
        runs = np.flatnonzero(np.concatenate(([True], rows[1:] != rows[:-1])))
        first[rows[runs]] = pos[picked[runs]]
    return first


def _lower(
    lo: int, found: np.ndarray, starts: np.ndarray, known: np.ndarray, track: tuple[np.ndarray, np.ndarray] | None
) -> None:
    """Rows ``lo + i`` whose ``found[i]`` is below their ``known``: lower it, and with ``track``
    (the batch's keys, whose rows start at ``starts``, and the per-row deepest known keys) note
    the key before that position."""
    rows = np.flatnonzero(found < known[lo : lo + found.shape[0]])
    if not rows.shape[0]:
        return
    k = found[rows]
    known[lo + rows] = k
    if track is not None:
        batch, before = track
        deeper = k > 0
        before[lo + rows[deeper]] = batch[starts[rows[deeper]] + k[deeper] - 1]
