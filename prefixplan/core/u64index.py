"""A compact map from 64-bit keys to dense ids (0, 1, 2, ... in insertion order).

Open addressing with linear probing in two numpy arrays (keys ``uint64``, ids ``int32``) of a
power-of-two size, kept at most :data:`MAX_LOAD` full: 17 to 35 bytes per key (24 to 48 at most
half full), with no Python object per key (a ``dict`` of ints costs ~100 bytes per key, which is
what made block traces of large logs run out of memory). Lookups and inserts take whole arrays
of keys at once. Key 0 is reserved for empty slots; block keys
(:mod:`prefixplan.core.blockhash`) are odd, so it never occurs.
"""

from __future__ import annotations

from typing import IO

import numpy as np

from prefixplan.core.spill import pread_all, pwrite_all

_MUL = np.uint64(0x9E3779B97F4A7C15)
MAX_LOAD = 0.7
"""Most keys per slot before the table doubles (linear probing: about 2 probes per hit, 6 per
miss at this load)."""


SPILL_PAGE = 512
"""Keys per page of a spilled index (4 KiB): one key in memory per page."""
SORT_PART = 1 << 18
"""About how many keys :meth:`U64Index.freeze` sorts at a time when it writes them to a file (and
how many table slots it scans at a time)."""


def _table_size(keys: int) -> int:
    """The power of two that holds ``keys`` keys at most :data:`MAX_LOAD` full."""
    need = int(keys / MAX_LOAD) + 1
    return 1 << max(4, (need - 1).bit_length())


class U64Index:
    """Key -> dense id (module docstring). :meth:`freeze` ends inserting and keeps the keys in
    sorted order (12 bytes per key, lookups by binary search)."""

    def __init__(self, capacity: int = 1 << 12) -> None:
        size = _table_size(max(capacity, 8))
        self._keys = np.zeros(size, dtype=np.uint64)
        self._ids = np.zeros(size, dtype=np.int32)
        self._shift = np.uint64(64 - (size.bit_length() - 1))
        self._mask = size - 1
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
            return ((keys * _MUL) >> self._shift).astype(np.int64)

    def freeze(self, spill_budget: int | None = None) -> None:
        """No more inserts: keep the keys sorted (half the memory or less of the table).

        With ``spill_budget``, sorted keys and ids that would take more bytes than that go
        straight from the table to a temporary file (as :meth:`spill` puts them), a range of
        keys (their top bits) of about :data:`SORT_PART` keys at a time: no sorted copy of every
        key is ever in memory beside the table."""
        if spill_budget is not None and 12 * self.size > spill_budget:
            self._freeze_to_file()
            return
        used = self._keys != 0
        keys = self._keys[used]
        self._keys = np.zeros(0, dtype=np.uint64)
        ids = self._ids[used]
        self._ids = np.zeros(0, dtype=np.int32)
        del used
        order = np.argsort(keys)
        self._keys = keys[order]
        del keys
        self._ids = ids[order]
        self._mask = -1

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
            pwrite_all(fd, ids, 8 * n + 4 * done)
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
        self._ids = np.zeros(0, dtype=np.int32)
        self._mask = -1

    def spill(self, budget_bytes: int) -> bool:
        """After :meth:`freeze`, move the sorted keys and ids to an unlinked temporary file when
        they take more than ``budget_bytes``. Only every :data:`SPILL_PAGE`-th key stays in
        memory; a lookup finds a key's page there and reads that page of keys (and an id) with
        positioned reads, so the index costs next to no memory while a later stage runs (the
        analysis's per-block counts of a large log) and lookups leave no mapped pages behind.
        Returns whether it did."""
        if self._mask >= 0:
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
                ids = np.frombuffer(pread_all(fd, 4 * (hi - lo), 8 * n + 4 * lo), dtype=np.int32)
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
        if self._mask < 0:  # frozen: sorted keys
            if not self._keys.shape[0]:
                return out
            at = np.minimum(np.searchsorted(self._keys, keys), self._keys.shape[0] - 1)
            hit = self._keys[at] == keys
            out[hit] = self._ids[at[hit]]
            return out
        slots = self._slots(keys)
        pending = np.arange(keys.shape[0])
        table, ids, mask = self._keys, self._ids, self._mask
        while pending.shape[0]:
            s = slots[pending]
            at = table[s]
            hit = at == keys[pending]
            out[pending[hit]] = ids[s[hit]]
            go_on = ~hit & (at != 0)
            pending = pending[go_on]
            slots[pending] = (slots[pending] + 1) & mask
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
        if self._mask < 0:
            raise RuntimeError("U64Index.insert after freeze")
        if self.size + n > MAX_LOAD * self._keys.shape[0]:
            self._grow(self.size + n)
        self._place(keys, np.asarray(ids).astype(np.int32))
        self.size += n

    def _place(self, keys: np.ndarray, ids: np.ndarray) -> None:
        table, mask = self._keys, self._mask
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
            slots[pending] = (slots[pending] + 1) & mask

    def _grow(self, need: int) -> None:
        old_keys, old_ids = self._keys, self._ids
        used = old_keys != 0
        size = _table_size(need)
        self._keys = np.zeros(size, dtype=np.uint64)
        self._ids = np.zeros(size, dtype=np.int32)
        self._shift = np.uint64(64 - (size.bit_length() - 1))
        self._mask = size - 1
        self._place(old_keys[used], old_ids[used])
