"""A compact map from 64-bit keys to dense ids (0, 1, 2, ... in insertion order).

Open addressing with linear probing in two numpy arrays (keys ``uint64``, ids ``int32`` or
``int64``) sized for the keys expected and kept at most :data:`MAX_LOAD` full: 17 bytes per key
with 32-bit ids (up to twice that after the table grows), with no Python object per key (a
``dict`` of ints costs ~100 bytes per key, which is what made block traces of large logs run
out of memory). Lookups and inserts take whole arrays
of keys at once. Key 0 is reserved for empty slots; block keys
(:mod:`prefixplan.trace.blockhash`) are odd, so it never occurs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import IO

import numpy as np

from prefixplan.trace.storage.spill import pread_all, pwrite_all

_MUL = np.uint64(0x9E3779B97F4A7C15)
_HIGH = np.uint64(32)
MAX_LOAD = 0.7
"""Most keys per slot before the table doubles (linear probing: about 2 probes per hit, 6 per
miss at this load)."""


SPILL_PAGE = 512
"""Keys per page of a spilled index (4 KiB): one key in memory per page."""
SORT_PART = 1 << 18
"""About how many keys :meth:`U64Index.freeze` sorts at a time when it writes them to a file (and
how many table slots it scans at a time)."""


def _table_size(keys: int) -> int:
    """Slots that hold ``keys`` keys at most :data:`MAX_LOAD` full (a multiple of 64, not a power
    of two: a slot is found by scaling a 32-bit hash to the table, so no size doubles the memory
    of the one below it)."""
    need = int(keys / MAX_LOAD) + 1
    size = max(64, -(-need // 64) * 64)
    if size > 1 << 32:
        raise ValueError(f"U64Index: {keys} keys need more than 2**32 slots")
    return size


class U64Index:
    """Key -> dense id (module docstring). :meth:`freeze` ends inserting and keeps the keys in
    sorted order (12 bytes per key, lookups by binary search)."""

    def __init__(self, capacity: int = 1 << 12, id_dtype: type = np.int32) -> None:
        size = _table_size(max(capacity, 8))
        self._id_dtype = np.dtype(id_dtype)
        self._keys = np.zeros(size, dtype=np.uint64)
        self._ids = np.zeros(size, dtype=self._id_dtype)
        self._table_n = size  # the table's size; -1 once frozen
        self.size = 0
        self._file: IO[bytes] | None = None  # where spilled keys and ids are read from
        self._fence = np.zeros(0, dtype=np.uint64)  # of a spilled index: its first key of each page
        self._spilled_n = 0

    def __len__(self) -> int:
        return self.size

    @property
    def nbytes(self) -> int:
        """Bytes in memory (of a spilled index: its page fence)."""
        if self._file is not None:
            return int(self._fence.nbytes)
        return int(self._keys.nbytes + self._ids.nbytes)

    def _slots(self, keys: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore"):
            return ((((keys * _MUL) >> _HIGH) * np.uint64(self._keys.shape[0])) >> _HIGH).astype(np.int64)

    def freeze(self, spill_budget: int | None = None) -> None:
        """No more inserts: keep the keys sorted (half the memory or less of the table).

        With ``spill_budget``, sorted keys and ids that would take more bytes than that go
        straight from the table to a temporary file (as :meth:`spill` puts them), a range of
        keys (their top bits) of about :data:`SORT_PART` keys at a time: no sorted copy of every
        key is ever in memory beside the table."""
        if spill_budget is not None and (8 + self._id_dtype.itemsize) * self.size > spill_budget:
            self._freeze_to_file()
            return
        used = self._keys != 0
        keys = self._keys[used]
        self._keys = np.zeros(0, dtype=np.uint64)
        ids = self._ids[used]
        self._ids = np.zeros(0, dtype=self._id_dtype)
        del used
        order = np.argsort(keys)
        self._keys = keys[order]
        del keys
        self._ids = ids[order]
        self._table_n = -1

    def _freeze_to_file(self) -> None:
        import tempfile

        n = self.size
        table, table_ids = self._keys, self._ids
        size = table.shape[0]
        bits = max(1, (-(-n // SORT_PART) - 1).bit_length())  # 2**bits ranges of keys
        dtype = np.uint8 if bits < 8 else np.uint16
        empty = np.iinfo(dtype).max
        shift = np.uint64(64 - bits)
        bucket = np.empty(size, dtype=dtype)  # each slot's range (empty: none)
        for lo in range(0, size, SORT_PART):
            part = table[lo : lo + SORT_PART]
            bucket[lo : lo + SORT_PART] = np.where(part != 0, part >> shift, empty)
        file = tempfile.TemporaryFile(prefix="prefixplan-index-")  # noqa: SIM115 - lives with the index
        fd = file.fileno()
        fences: list[np.ndarray] = []
        done = 0
        for b in range(1 << bits):
            slots = np.concatenate(
                [np.flatnonzero(bucket[lo : lo + SORT_PART] == b) + lo for lo in range(0, size, SORT_PART)]
            )
            keys = table[slots]
            order = np.argsort(keys)
            keys = keys[order]
            ids = table_ids[slots[order]]
            pwrite_all(fd, keys, 8 * done)
            pwrite_all(fd, ids, 8 * n + ids.itemsize * done)
            fences.append(keys[(-done) % SPILL_PAGE :: SPILL_PAGE].copy())  # not a view: the range goes
            done += int(keys.shape[0])
        if done != n:
            raise RuntimeError(f"U64Index: {done} keys in the table, {n} inserted")
        del bucket
        self._use_file(file, n, np.concatenate(fences) if fences else np.zeros(0, dtype=np.uint64))

    def _use_file(self, file: IO[bytes], n: int, fence: np.ndarray) -> None:
        """From now on the ``n`` sorted keys and ids are in ``file`` (keys, then ids), found by
        their page ``fence``; nothing else stays in memory."""
        self._file = file
        self._fence = fence
        self._spilled_n = n
        self._keys = np.zeros(0, dtype=np.uint64)
        self._ids = np.zeros(0, dtype=self._id_dtype)
        self._table_n = -1

    def map_ids(self, fn: Callable[[np.ndarray], np.ndarray], step: int = SORT_PART) -> None:
        """After :meth:`freeze`, replace every id by ``fn(ids)`` (elementwise, same dtype), in
        memory or in the index's file, ``step`` ids at a time."""
        if self._table_n >= 0:
            raise RuntimeError("U64Index.map_ids before freeze")
        if self._file is None:
            for lo in range(0, self._ids.shape[0], step):
                self._ids[lo : lo + step] = fn(self._ids[lo : lo + step])
            return
        fd, n, size = self._file.fileno(), self._spilled_n, self._id_dtype.itemsize
        for lo in range(0, n, step):
            hi = min(n, lo + step)
            ids = np.frombuffer(pread_all(fd, size * (hi - lo), 8 * n + size * lo), dtype=self._id_dtype)
            pwrite_all(fd, np.ascontiguousarray(fn(ids), dtype=self._id_dtype), 8 * n + size * lo)

    def spill(self, budget_bytes: int) -> bool:
        """After :meth:`freeze`, move the sorted keys and ids to an unlinked temporary file when
        they take more than ``budget_bytes``. Only every :data:`SPILL_PAGE`-th key stays in
        memory; a lookup finds a key's page there and reads that page of keys (and an id) with
        positioned reads, so the index costs next to no memory while a later stage runs (the
        analysis's per-block counts of a large log) and lookups leave no mapped pages behind.
        Returns whether it did."""
        if self._table_n >= 0:
            raise RuntimeError("U64Index.spill before freeze")
        if self.nbytes <= budget_bytes or self._file is not None:
            return False
        import tempfile

        file = tempfile.TemporaryFile(prefix="prefixplan-index-")  # noqa: SIM115 - lives with the index
        file.write(self._keys.data)  # no copy of the arrays
        file.write(self._ids.data)
        file.flush()
        self._use_file(file, int(self._keys.shape[0]), self._keys[::SPILL_PAGE].copy())
        return True

    def _lookup_spilled(self, keys: np.ndarray, out: np.ndarray) -> np.ndarray:
        """:meth:`lookup` on a spilled index: one read of a page of keys per page the keys fall in."""
        assert self._file is not None
        fd, n = self._file.fileno(), self._spilled_n
        page = np.searchsorted(self._fence, keys, side="right") - 1  # -1: below every key
        for p in np.unique(page[page >= 0]).tolist():
            lo = p * SPILL_PAGE
            hi = min(n, lo + SPILL_PAGE)
            stored = np.frombuffer(pread_all(fd, 8 * (hi - lo), 8 * lo), dtype=np.uint64)
            mine = np.flatnonzero(page == p)
            at = np.minimum(np.searchsorted(stored, keys[mine]), stored.shape[0] - 1)
            hit = stored[at] == keys[mine]
            if hit.any():
                size = self._id_dtype.itemsize
                ids = np.frombuffer(pread_all(fd, size * (hi - lo), 8 * n + size * lo), dtype=self._id_dtype)
                out[mine[hit]] = ids[at[hit]]
        return out

    def lookup(self, keys: np.ndarray) -> np.ndarray:
        """Ids of ``keys`` (-1 where absent)."""
        keys = np.asarray(keys, dtype=np.uint64)
        out = np.full(keys.shape[0], -1, dtype=np.int64)
        if not keys.shape[0]:
            return out
        if self._file is not None:
            return self._lookup_spilled(keys, out)
        if self._table_n < 0:  # frozen: sorted keys
            if not self._keys.shape[0]:
                return out
            at = np.minimum(np.searchsorted(self._keys, keys), self._keys.shape[0] - 1)
            hit = self._keys[at] == keys
            out[hit] = self._ids[at[hit]]
            return out
        slots = self._slots(keys)
        pending = np.arange(keys.shape[0])
        table, ids, size = self._keys, self._ids, self._table_n
        while pending.shape[0]:
            s = slots[pending]
            at = table[s]
            hit = at == keys[pending]
            out[pending[hit]] = ids[s[hit]]
            go_on = ~hit & (at != 0)
            pending = pending[go_on]
            slots[pending] = _next_slot(slots[pending], size)
        return out

    def insert_new(self, keys: np.ndarray, first_id: int | None = None) -> np.ndarray:
        """Insert ``keys`` (distinct, none present yet: callers look up first) with consecutive
        ids from ``first_id`` (default: the current size); returns their ids."""
        keys = np.asarray(keys, dtype=np.uint64)
        start = self.size if first_id is None else int(first_id)
        new_ids = np.arange(start, start + int(keys.shape[0]), dtype=np.int64)
        self.insert(keys, new_ids)
        return new_ids

    def insert(self, keys: np.ndarray, ids: np.ndarray) -> None:
        """Insert ``keys`` (distinct, none present yet) with the given ids."""
        keys = np.asarray(keys, dtype=np.uint64)
        n = int(keys.shape[0])
        if not n:
            return
        if self._table_n < 0:
            raise RuntimeError("U64Index.insert after freeze")
        if self.size + n > MAX_LOAD * self._keys.shape[0]:
            self._grow(max(self.size + n, 2 * self.size))  # geometric: inserts stay linear
        self._place(keys, np.asarray(ids).astype(self._id_dtype))
        self.size += n

    def _place(self, keys: np.ndarray, ids: np.ndarray) -> None:
        table, size = self._keys, self._table_n
        slots = self._slots(keys)
        pending = np.arange(keys.shape[0])
        while pending.shape[0]:
            s = slots[pending]
            free = table[s] == 0
            # among keys aiming at the same free slot, the first takes it
            cand = pending[free]
            taken_slots, first = np.unique(s[free], return_index=True)
            winners = cand[first]
            table[taken_slots] = keys[winners]
            self._ids[taken_slots] = ids[winners]
            placed = np.zeros(keys.shape[0], dtype=bool)
            placed[winners] = True
            pending = pending[~placed[pending]]
            # losers of a contest retry the same slot (now taken) and move on; occupied ones move on
            slots[pending] = _next_slot(slots[pending], size)

    def _grow(self, need: int) -> None:
        old_keys, old_ids = self._keys, self._ids
        used = old_keys != 0
        size = _table_size(need)
        self._keys = np.zeros(size, dtype=np.uint64)
        self._ids = np.zeros(size, dtype=self._id_dtype)
        self._table_n = size
        self._place(old_keys[used], old_ids[used])


def _next_slot(slots: np.ndarray, size: int) -> np.ndarray:
    """The slot after each of ``slots`` (linear probing, wrapping at ``size``)."""
    nxt = slots + 1
    nxt[nxt == size] = 0
    return nxt


def table_bytes(keys: int, id_bytes: int = 4) -> int:
    """Bytes of a :class:`U64Index` table sized for ``keys`` keys."""
    return _table_size(max(keys, 8)) * (8 + id_bytes)


def key_parts(keys: np.ndarray, bits: int) -> np.ndarray:
    """The part of each key among ``2**bits``: its top ``bits`` bits (keys are hashes, so the
    parts are even)."""
    if bits == 0:
        return np.zeros(keys.shape[0], dtype=np.int64)
    return (np.asarray(keys, dtype=np.uint64) >> np.uint64(64 - bits)).astype(np.int64)


def sorted_lookup(sorted_keys: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where each of ``values`` is in ``sorted_keys`` (ascending, not empty), and whether it is
    there: ``(index, found)``; ``index`` is only meaningful where ``found``."""
    at = np.minimum(np.searchsorted(sorted_keys, values), sorted_keys.shape[0] - 1)
    return at, sorted_keys[at] == values


class SplitIndex:
    """Frozen :class:`U64Index` parts over the ``2**bits`` ranges of keys' top bits: a lookup asks
    each key's part. What a large index becomes when its parts were built one pass at a time
    (the block trace's id assignment), so that only one part's table is ever in memory."""

    def __init__(self, bits: int, parts: list[U64Index]) -> None:
        if len(parts) != 1 << bits:
            raise ValueError(f"SplitIndex: {len(parts)} parts for {bits} bits")
        self.bits = bits
        self.parts = parts

    def __len__(self) -> int:
        return sum(len(p) for p in self.parts)

    @property
    def nbytes(self) -> int:
        return sum(p.nbytes for p in self.parts)

    def lookup(self, keys: np.ndarray) -> np.ndarray:
        """Ids of ``keys`` (-1 where absent)."""
        keys = np.asarray(keys, dtype=np.uint64)
        if self.bits == 0:
            return self.parts[0].lookup(keys)
        out = np.full(keys.shape[0], -1, dtype=np.int64)
        part = key_parts(keys, self.bits)
        for p in np.unique(part).tolist():
            mine = np.flatnonzero(part == p)
            out[mine] = self.parts[p].lookup(keys[mine])
        return out
