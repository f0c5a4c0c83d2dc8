"""Dense block ids for a block trace: which of a request's block keys an earlier arrival
brought, and ids for the rest, in arrival order (:func:`assign_ids`, for
:meth:`~prefixplan.trace.blocks.TraceBuilder.finish`).

Ids come from a :class:`~prefixplan.core.u64index.U64Index` (17 bytes per indexed block; past
:data:`INDEX_BUDGET` built in parts by the keys' top bits, one pass over the keys each) and the
keys wait for the sort in a :class:`~prefixplan.core.spill.RaggedU64`, on disk past a memory
budget.

Blocks seen once. Most distinct blocks of a real log occur in one request only (the unique tail
of each prompt: 64% of them on the 100k benchmark log). Such a block is never reused, so with
``filtered`` the pass counts the keys of each index part in a
:class:`~prefixplan.core.twice.TwiceFilter` of that part's own (one more pass over the keys per
part, so the filter, like the table, is a part's size: 2 x 8 MiB instead of 2 x 32 MiB for each
of the 1M-request benchmark log's 4 parts) and leaves a request's keys from its first
certainly-single one onwards out of the index (chained keys: every later one is single too).
They still get their ids, in the same order, so every result is the same; only lookups then
find blocks that occur in at least two requests (what pins and hot prefixes are), and some seen
once (a filter's false positives).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from prefixplan.core.mapped import drop_resident, mapped_copy, mapped_empty
from prefixplan.core.spill import RaggedU64
from prefixplan.core.twice import TwiceFilter
from prefixplan.core.u64index import SplitIndex, U64Index, key_parts, table_bytes

COUNT_CHUNK = 1 << 20
"""Keys per step of the passes that count keys before ids are given (8 MiB each, and a few
times that in temporaries)."""
ASSIGN_WINDOW = 1 << 16
"""Rows whose key counts the id-assigning pass turns into Python values at a time."""
INDEX_BUDGET = 64 * 2**20
"""Bytes of key index table in memory while ids are assigned: a larger index is built in parts
(ranges of the keys' top bits), one pass over the keys each (:func:`assign_ids`)."""
MAX_INDEX_BITS = 10


def index_bits(keys: int, id_bytes: int = 4) -> int:
    """Top bits of a key that choose its index part: the fewest whose parts' tables, each for
    ``keys / 2**bits`` keys, fit in :data:`INDEX_BUDGET`."""
    bits = 0
    while bits < MAX_INDEX_BITS and table_bytes(part_capacity(keys, bits), id_bytes) > INDEX_BUDGET:
        bits += 1
    return bits


def part_capacity(keys: int, bits: int) -> int:
    """Keys to size each of ``2**bits`` index parts for, ``keys`` in all (the top bits of hashed
    keys split them evenly: a few percent to spare)."""
    return (keys >> bits) + (keys >> (bits + 5)) + 1024


@dataclass(slots=True)
class BlockIds:
    """What :func:`assign_ids` finds, per row in arrival order (file-backed arrays): ``end`` (its
    deepest block id, -1 when it has no full block), ``known`` (its leading blocks an earlier
    arrival brought), ``start`` (the first id it brings) and ``attach`` (that id's parent, -1
    when none); and the key index (key -> id) with the number of distinct ids."""

    end: np.ndarray
    known: np.ndarray
    start: np.ndarray
    attach: np.ndarray
    index: SplitIndex
    distinct: int


def assign_ids(keys: RaggedU64, order: np.ndarray, lengths: np.ndarray, expected: int, filtered: int) -> BlockIds:
    """Block ids as if the rows (arrivals; ``lengths`` keys each) were added one by one: a key
    is known to a request when an earlier arrival brought it, and the keys after a request's
    known ones are new (chained keys: a prefix of an unseen one is unseen), so a row brings a
    run of consecutive ids, each the child of the one before. Returns per row ``end`` (its
    deepest id), ``known``, ``start`` (the first id it brings) and ``attach`` (that id's
    parent).

    The index is built in ``2**bits`` parts by the keys' top bits, one pass over the keys
    each, so that one part's table at most is in memory (:data:`INDEX_BUDGET`; about
    ``expected`` keys in all). A pass records where each row's first key new to its part is;
    a row's known keys end at the first such place over all parts (or at its first key seen
    once). Each part maps a key to where it first occurred (its position among all keys in
    arrival order), which becomes its id once every row's known count is known.

    With ``filtered`` (about that many distinct keys in all) each part first counts its own
    keys in a :class:`TwiceFilter`, and its pass indexes a row's keys of the part only up to
    the first the filter calls single: a key after it is single too (chained), and lowers the
    row's known count there. A repeated key is never called single, so every known count is
    the same as with one filter over all keys (or none)."""
    n = int(order.shape[0])
    total = int(lengths.sum())
    occ_dtype = np.int32 if total < 2**31 else np.int64
    bits = index_bits(expected, np.dtype(occ_dtype).itemsize)
    # per row (file-backed: core.mapped), the first position found new so far and the key
    # just before it (its deepest known one)
    known = mapped_copy(lengths, np.int64)
    before = mapped_empty(n, np.uint64)
    parts: list[U64Index] = []
    for part in range(1 << bits):
        twice = None
        if filtered:
            chunks = keys.iter_chunks(COUNT_CHUNK)
            mine = chunks if not bits else (c[key_parts(c, bits) == part] for c in chunks)
            twice = TwiceFilter.of(mine, filtered >> bits)
        index = U64Index(capacity=part_capacity(expected, bits), id_dtype=occ_dtype)
        for lo, hi, offset in _batches(lengths):
            _scan(keys, order, lo, hi, offset, part, bits, index, twice, lengths, known, before)
        del twice
        index.freeze(spill_budget=keys.budget >> bits)  # from disk for resolve(): a few keys
        parts.append(index)
        drop_resident(known, before, lengths)
    # the per-row results go straight to file-backed arrays, one at a time
    brought = lengths - known
    start = np.cumsum(brought, out=mapped_empty(n, np.int64))
    start -= brought
    distinct = int(brought.sum())
    del brought
    # an occurrence's id: the new keys before it, i.e. its position less the known keys of
    # its row and the rows before it
    row_first = np.cumsum(lengths)
    row_first -= lengths
    known_through = np.cumsum(known)

    to_id = functools.partial(_ids_of, row_first=row_first, known_through=known_through)
    for index in parts:
        index.map_ids(to_id)
    del to_id, row_first, known_through
    split = SplitIndex(bits, parts)
    end = mapped_empty(n, np.int64)
    attach = mapped_empty(n, np.int64)
    end.fill(-1)
    attach.fill(-1)
    rows = np.flatnonzero(known > 0)
    last_known = split.lookup(before[rows])
    del before
    brings = known[rows] < lengths[rows]
    attach[rows[brings]] = last_known[brings]
    end[rows[~brings]] = last_known[~brings]
    del rows, last_known, brings
    new = np.flatnonzero(known < lengths)
    end[new] = start[new] + lengths[new] - 1 - known[new]
    return BlockIds(end, known, start, attach, split, distinct)


def _batches(lengths: np.ndarray) -> Iterator[tuple[int, int, int]]:
    """Consecutive arrivals ``(lo, hi, keys before lo)`` of rows with ``lengths`` keys: at
    most 512 rows, or until 2**18 keys; the key counts become Python values a window at a
    time (no list over every request)."""
    n = int(lengths.shape[0])
    batch_lo = batch_keys = before = 0
    for lo in range(0, n, ASSIGN_WINDOW):
        for row, count in enumerate(lengths[lo : lo + ASSIGN_WINDOW].tolist(), start=lo):
            batch_keys += count
            if row + 1 - batch_lo >= 512 or batch_keys >= 1 << 18:
                yield batch_lo, row + 1, before
                before += batch_keys
                batch_lo, batch_keys = row + 1, 0
    if batch_lo < n:
        yield batch_lo, n, before


def _scan(
    all_keys: RaggedU64,
    order: np.ndarray,
    lo: int,
    hi: int,
    offset: int,
    part: int,
    bits: int,
    index: U64Index,
    twice: TwiceFilter | None,
    all_lengths: np.ndarray,
    known: np.ndarray,
    before: np.ndarray,
) -> None:
    """One batch of arrivals ``lo`` to ``hi`` (its first key is the ``offset``-th in arrival
    order) in the pass over ``part``: index the part's new keys (those before a row's first
    single one, by ``twice``) with their occurrence and lower ``known`` (and ``before``) of
    the rows where a new or single one is found (:func:`assign_ids`)."""
    lengths = all_lengths[lo:hi]
    total = int(lengths.sum())
    if total == 0:
        return
    keys = all_keys.gather(order[lo:hi])
    starts = np.cumsum(lengths) - lengths
    owner = np.repeat(np.arange(hi - lo), lengths)
    pos = np.arange(total) - starts[owner]
    has = np.flatnonzero(lengths > 0)
    if part == 0:  # before any new key is found, a row's deepest known key is its last
        before[lo + has] = keys[starts[has] + lengths[has] - 1]
    mine = key_parts(keys, bits) == part if bits else np.ones(total, dtype=bool)
    if twice is not None:
        # a request's keys from its first single one on are single (chained): not indexed
        single_at = lengths[owner]
        ours = np.flatnonzero(mine)
        single = ours[~twice.maybe_twice(keys[ours])]
        single_at[single] = pos[single]
        first = lengths.copy()
        first[has] = np.minimum.reduceat(single_at, starts[has])
        _lower(lo, first, keys, starts, known, before)
        mine &= pos < first[owner]
    at = np.flatnonzero(mine)
    if not at.shape[0]:
        return
    absent = at[index.lookup(keys[at]) < 0]
    if not absent.shape[0]:
        return
    # a key absent from the index is new where it first occurs in the batch (positions are
    # row-major: arrival order), known wherever it occurs again
    _, first = np.unique(keys[absent], return_index=True)
    new_at = absent[first]
    index.insert(keys[new_at], offset + new_at)
    first_new = lengths.copy()
    np.minimum.at(first_new, owner[new_at], pos[new_at])
    _lower(lo, first_new, keys, starts, known, before)


def _ids_of(occ: np.ndarray, row_first: np.ndarray, known_through: np.ndarray) -> np.ndarray:
    """Block ids of key occurrences (positions among all keys in arrival order) that brought a
    new block: the new keys before each, i.e. its position less the known keys of its row
    (``row_first``: each row's first position) and of the rows before it (``known_through``:
    cumulative known counts)."""
    o = occ.astype(np.int64)
    return o - known_through[np.searchsorted(row_first, o, side="right") - 1]


def _lower(
    lo: int, found: np.ndarray, keys: np.ndarray, starts: np.ndarray, known: np.ndarray, before: np.ndarray
) -> None:
    """Rows ``lo + i`` whose ``found[i]`` is below their ``known``: lower it, and note the key
    before that position (``keys`` and ``starts``: the batch's)."""
    rows = np.flatnonzero(found < known[lo : lo + found.shape[0]])
    if not rows.shape[0]:
        return
    k = found[rows]
    known[lo + rows] = k
    deeper = k > 0
    before[lo + rows[deeper]] = keys[starts[rows[deeper]] + k[deeper] - 1]
