"""Dense block ids for a block trace: which of a request's block keys an earlier arrival
brought, and ids for the rest, in arrival order (:func:`assign_ids`, for
:meth:`~prefixplan.trace.blocks.TraceBuilder.finish`).

Ids come from a :class:`~prefixplan.trace.storage.u64index.U64Index` (17 bytes per indexed block; past
:data:`INDEX_BUDGET` built in parts by the keys' top bits, after one pass writes the keys grouped by part to a
temporary file) and the keys wait for the sort in a
:class:`~prefixplan.trace.storage.spill.RaggedU64`, on disk past a memory budget.

Lookups. The keys of a request that an index part already holds are a prefix of its keys in
that part (chained keys: whoever brought a key brought the ones before it, and a pass indexes a
request's keys of its part up to its first single one), so a pass finds that prefix by
bisection, a few lookups per request, and looks at the keys after it one by one: most
occurrences of a log's keys are in its shared prefixes (91% on the 100k benchmark log), and
they are never looked up one at a time. Keys must chain (each covers its parent's key and its
own tokens), as the trace's own hashing makes them: keys that do not chain (a hand-made trace
file) would be taken as known past their first difference.

Blocks seen once. Most distinct blocks of a real log occur in one request only (the unique tail
of each prompt: 64% of them on the 100k benchmark log). Such a block is never reused, so with
``filtered`` the pass counts the keys of each index part in a
:class:`~prefixplan.trace.storage.twice.TwiceFilter` of that part's own (filled from that part's keys
alone, so the filter, like the table, is a part's size: 2 x 8 MiB instead of 2 x 32 MiB for each
of the 1M-request benchmark log's 4 parts) and leaves a request's keys from its first
certainly-single one onwards out of the index (chained keys: every later one is single too).
They still get their ids, in the same order, so every result is the same; only lookups then
find blocks that occur in at least two requests (what pins and hot prefixes are), and some seen
once (a filter's false positives).
"""

from __future__ import annotations

import functools
from array import array
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from prefixplan.errors import UsageError
from prefixplan.trace.idscan import ArrivalPass, scan
from prefixplan.trace.storage.mapped import drop_resident, mapped_copy, mapped_empty
from prefixplan.trace.storage.spill import RaggedU64, SpillColumn
from prefixplan.trace.storage.twice import TwiceFilter, estimate_keys
from prefixplan.trace.storage.u64index import SplitIndex, U64Index, key_parts, table_bytes

COUNT_CHUNK = 1 << 20
"""Keys per step of the passes that count keys before ids are given (8 MiB each, and a few
times that in temporaries)."""
ASSIGN_WINDOW = 1 << 16
"""Rows whose key counts the id-assigning pass turns into Python values at a time."""
INDEX_BUDGET = 64 * 2**20
"""Bytes of key index table in memory while ids are assigned: a larger index is built in parts
(ranges of the keys' top bits), each part reading its share of the keys grouped by
part (:func:`assign_ids`)."""
MAX_INDEX_BITS = 10
"""At most ``2**10`` index parts (1024 x 64 MiB of table: about 5 billion indexed keys)."""
BATCH_ROWS = 512
BATCH_KEYS = 1 << 18
"""A pass over the keys takes consecutive arrivals a batch at a time: this many rows at most, or
until this many keys."""


def index_bits(keys: int, id_bytes: int = 4) -> int:
    """Top bits of a key that choose its index part: the fewest whose parts' tables, each for
    ``keys / 2**bits`` keys, fit in :data:`INDEX_BUDGET`."""
    bits = 0
    while bits < MAX_INDEX_BITS and table_bytes(part_capacity(keys, bits), id_bytes) > INDEX_BUDGET:
        bits += 1
    return bits


def index_sizes(keys: RaggedU64, index_singletons: bool) -> tuple[int, int]:
    """``(expected, filtered)`` for :func:`assign_ids`: the keys the index will hold and, where
    the keys seen once stay out of it, about how many distinct keys the filter sees (else 0).

    Both come from distinct keys (a sample pass, :func:`estimate_keys`), not occurrences: a log
    whose requests share long prefixes has many more occurrences than distinct keys. Where
    every key's entry fits in one index part, the keys seen once are indexed too: that costs
    less than the filter's pass over every occurrence (1.95 s against 2.79 s on the 100k
    benchmark trace), and the ids are the same. (Each part's filter also lets through some keys
    seen once, about 1 in 8: the table grows past its size when they are many, results do not
    change.)"""
    distinct, repeated = estimate_keys(keys.iter_chunks(COUNT_CHUNK))
    every = int(1.05 * distinct) + 1024
    if index_singletons or not index_bits(every):
        return every, 0
    return int(1.05 * repeated) + 1024, distinct + 1024


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


def assign_ids(
    keys: RaggedU64,
    order: np.ndarray,
    lengths: np.ndarray,
    expected: int,
    filtered: int,
    passed: ArrivalPass | None = None,
) -> BlockIds:
    """Block ids as if the rows (arrivals; ``lengths`` keys each) were added one by one: a key
    is known to a request when an earlier arrival brought it, and the keys after a request's
    known ones are new (chained keys: a prefix of an unseen one is unseen), so a row brings a
    run of consecutive ids, each the child of the one before. Returns per row ``end`` (its
    deepest id), ``known``, ``start`` (the first id it brings) and ``attach`` (that id's
    parent).

    The index is built in ``2**bits`` parts by the keys' top bits, so that one part's table at
    most is in memory (:data:`INDEX_BUDGET`; about ``expected`` keys in all). With one part, a
    pass over the keys in arrival order builds it; with more, one pass first writes each part's
    keys (with where they occur) to a file of its own (:class:`_PartKeys`), and each part's
    pass reads only those. A pass records where each row's first key new to the part is; a
    row's known keys end at the first such place over all parts (or at its first key seen
    once). Each part maps a key to where it first occurred (its position among all keys in
    arrival order), which becomes its id once every row's known count is known.

    With ``filtered`` (about that many distinct keys in all) each part first counts its own
    keys in a :class:`TwiceFilter`, and its pass indexes a row's keys of the part only up to
    the first the filter calls single: a key after it is single too (chained), and lowers the
    row's known count there. A repeated key is never called single, so every known count is
    the same as with one filter over all keys (or none).

    ``passed``: the one-part pass already made as the rows came in, in this order
    (:class:`~prefixplan.trace.idscan.ArrivalPass`); only the ids are left to give."""
    n = int(order.shape[0])
    total = int(lengths.sum())
    occ_dtype = np.int32 if total < 2**31 else np.int64
    bits = index_bits(expected, np.dtype(occ_dtype).itemsize)
    parts: list[U64Index] = []
    if passed is not None and passed.index is not None and passed.rows == n:
        known_in, before_in = passed.arrays()
        known, before = mapped_copy(known_in), mapped_copy(before_in)
        del known_in, before_in
        passed.index.freeze(spill_budget=keys.budget)
        parts.append(passed.index)
        passed.stop()
        bits = 0
    elif not bits:
        known = mapped_copy(lengths, np.int64)  # per row (file-backed: trace.storage.mapped), lowered by each part
        # one part: the pass reads every key of each row, so it notes the key before each
        # row's known ones as it lowers them (its deepest known key)
        before = mapped_empty(n, np.uint64)
        twice = TwiceFilter.of(keys.iter_chunks(COUNT_CHUNK), filtered) if filtered else None
        index = U64Index(capacity=part_capacity(expected, 0), id_dtype=occ_dtype)
        for lo, hi, offset in _batches(lengths):
            batch = keys.gather(order[lo:hi])
            has = np.flatnonzero(lengths[lo:hi] > 0)
            ends = np.cumsum(lengths[lo:hi])[has] - 1
            before[lo + has] = batch[ends]  # until a new key is found, a row's last key
            scan(lengths, lo, hi, offset, batch, None, index, twice, known, (batch, before))
        del twice
        index.freeze(spill_budget=keys.budget)  # from disk for resolve(): a few keys
        parts.append(index)
    else:
        known = mapped_copy(lengths, np.int64)
        by_part = _PartKeys.of(keys, order, lengths, bits)
        for part in range(1 << bits):
            twice = TwiceFilter.of(by_part.chunks(part), filtered >> bits) if filtered else None
            index = U64Index(capacity=part_capacity(expected, bits), id_dtype=occ_dtype)
            for lo, hi, offset, at, part_keys in by_part.batches(part):
                scan(lengths, lo, hi, offset, part_keys, at, index, twice, known, None)
            del twice
            index.freeze(spill_budget=keys.budget >> bits)
            parts.append(index)
            drop_resident(known, lengths)
        by_part.close()
        before = _keys_before(keys, order, lengths, known)
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
    most :data:`BATCH_ROWS` rows, or until :data:`BATCH_KEYS` keys; the key counts become
    Python values a window at a time (no list over every request)."""
    n = int(lengths.shape[0])
    batch_lo = batch_keys = before = 0
    for lo in range(0, n, ASSIGN_WINDOW):
        for row, count in enumerate(lengths[lo : lo + ASSIGN_WINDOW].tolist(), start=lo):
            batch_keys += count
            if row + 1 - batch_lo >= BATCH_ROWS or batch_keys >= BATCH_KEYS:
                yield batch_lo, row + 1, before
                before += batch_keys
                batch_lo, batch_keys = row + 1, 0
    if batch_lo < n:
        yield batch_lo, n, before


class _PartKeys:
    """Every key in arrival order, each batch of rows (:func:`_batches`) with its keys grouped
    by index part (in arrival order within a part) and their positions in the batch, in two
    temporary files whatever the number of parts (1 MiB write buffers; 12 bytes a key on disk,
    freed when the ids are given): written by one pass over the keys, after which a part's
    passes read only that part's share of each batch, one positioned read a batch."""

    def __init__(self, parts: int) -> None:
        self.parts = parts
        self.keys = SpillColumn(np.uint64, budget_bytes=0, buffer_bytes=1 << 20)
        self.at = SpillColumn(np.int32, budget_bytes=0, buffer_bytes=1 << 20)
        self.spans: list[tuple[int, int, int]] = []
        self._bounds = array("q")  # per batch: where each part's keys start, and where the batch ends

    @classmethod
    def of(cls, keys: RaggedU64, order: np.ndarray, lengths: np.ndarray, bits: int) -> _PartKeys:
        out = cls(1 << bits)
        edges = np.arange((1 << bits) + 1)
        for lo, hi, offset in _batches(lengths):
            batch = keys.gather(order[lo:hi])
            part = key_parts(batch, bits).astype(np.uint16)  # a radix sort: MAX_INDEX_BITS <= 16
            by = np.argsort(part, kind="stable")  # each part's keys, in arrival order
            bounds = np.searchsorted(part[by], edges).astype(np.int64) + len(out.keys)
            out.spans.append((lo, hi, offset))
            out._bounds.frombytes(bounds.tobytes())
            out.keys.append(batch[by])
            out.at.append(by)
        return out

    def _ranges(self, part: int) -> Iterator[tuple[tuple[int, int, int], int, int]]:
        """Each batch's span, and where its keys of ``part`` start and end in the files."""
        bounds = np.frombuffer(self._bounds, dtype=np.int64).reshape(-1, self.parts + 1)
        starts, ends = bounds[:, part].tolist(), bounds[:, part + 1].tolist()
        return zip(self.spans, starts, ends, strict=True)

    def chunks(self, part: int) -> Iterator[np.ndarray]:
        """The part's keys, about :data:`COUNT_CHUNK` at a time."""
        pieces: list[np.ndarray] = []
        held = 0
        for _, start, stop in self._ranges(part):
            if stop > start:
                pieces.append(self.keys.read(start, stop))
                held += stop - start
            if held >= COUNT_CHUNK:
                yield np.concatenate(pieces)
                pieces, held = [], 0
        if pieces:
            yield np.concatenate(pieces)

    def batches(self, part: int) -> Iterator[tuple[int, int, int, np.ndarray, np.ndarray]]:
        """``(lo, hi, offset, at, keys)`` of each batch with keys of the part."""
        for (lo, hi, offset), start, stop in self._ranges(part):
            if stop > start:
                yield lo, hi, offset, self.at.read(start, stop).astype(np.int64), self.keys.read(start, stop)

    def close(self) -> None:
        self.keys.close()
        self.at.close()


def _keys_before(keys: RaggedU64, order: np.ndarray, lengths: np.ndarray, known: np.ndarray) -> np.ndarray:
    """Per row, its deepest known key (the one before position ``known``; unset where none is
    known): one pass over the rows that know one."""
    before = mapped_empty(int(order.shape[0]), np.uint64)
    for lo, hi, _ in _batches(lengths):
        k = known[lo:hi]
        rows = np.flatnonzero(k > 0)
        if not rows.shape[0]:
            continue
        sizes = lengths[lo:hi][rows]
        batch = keys.gather(order[lo:hi][rows])
        before[lo + rows] = batch[np.cumsum(sizes) - sizes + k[rows] - 1]
    return before


def _ids_of(occ: np.ndarray, row_first: np.ndarray, known_through: np.ndarray) -> np.ndarray:
    """Block ids of key occurrences (positions among all keys in arrival order) that brought a
    new block: the new keys before each, i.e. its position less the known keys of its row
    (``row_first``: each row's first position) and of the rows before it (``known_through``:
    cumulative known counts)."""
    o = occ.astype(np.int64)
    return o - known_through[np.searchsorted(row_first, o, side="right") - 1]


def runs_of(starts: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Which run each of ``ids`` falls in, for consecutive runs of ids beginning at ``starts``
    (non-decreasing; an empty run shares its start with the next one, which wins)."""
    out = np.searchsorted(starts, np.asarray(ids, dtype=np.int64), side="right")
    out -= 1  # in place: one array of len(ids), not two
    return out


def coarser_keys_error(key_tokens: int, block_tokens: int) -> UsageError:
    """The error for trace keys every ``key_tokens`` tokens, which blocks of ``block_tokens``
    cannot be cut from."""
    return UsageError(
        f"the trace has block keys every {key_tokens} tokens; blocks of {block_tokens} tokens cannot be cut from them",
        hint=f"simulate with a block size that is a multiple of {key_tokens}, or write the trace at the "
        "finer granularity (--granularity / --block-size when writing it)",
    )
