"""Ragged arrays of 64-bit keys (one per request), in memory up to a budget, then on disk.

:class:`RaggedU64` keeps what a streaming pass produces per request (its block keys) so a later
pass can read them again in another order (arrival time instead of file order) without holding
them all in memory: past ``budget_bytes`` the arrays go to a temporary file and only their
offsets stay in memory (16 bytes per request).

:class:`SpillColumn` is one flat column of fixed-size values (a request's segment offsets, its
chunks' hashes, ...) that the same way stays in memory up to a budget and then goes to a
temporary file; it is read back by element range, a few rows for a record or a slice of rows at
a time for a pass over all of them.

:class:`ArrayShelf` puts whole arrays aside in one temporary file (a capacity sweep's per-request
results, one array per capacity) and reads each back when it is asked for.
"""

from __future__ import annotations

import os
import tempfile
from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

import numpy as np

DEFAULT_BUDGET = 16 * 2**20


def pread_all(fd: int, nbytes: int, offset: int) -> bytes:
    """``nbytes`` bytes at ``offset`` of ``fd`` (one read returns at most about 2 GiB)."""
    parts: list[bytes] = []
    while nbytes > 0:
        part = os.pread(fd, nbytes, offset)
        if not part:
            raise OSError("a temporary file is shorter than what was written to it")
        parts.append(part)
        offset += len(part)
        nbytes -= len(part)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def pwrite_all(fd: int, values: np.ndarray, offset: int) -> None:
    """Write a contiguous array's bytes at ``offset`` of ``fd`` (no copy; one write takes at most
    about 2 GiB)."""
    view = np.ascontiguousarray(values).data.cast("B")
    while view.nbytes:
        wrote = os.pwrite(fd, view, offset)
        view = view[wrote:]
        offset += wrote


class RaggedU64:
    """Append arrays, read any of them back by position (module docstring)."""

    def __init__(self, budget_bytes: int = DEFAULT_BUDGET) -> None:
        self.budget = int(budget_bytes)
        self._mem: list[np.ndarray] = []
        self._mem_bytes = 0
        self._file: IO[bytes] | None = None
        self._offsets = array("q")  # entry offset (in keys) in the file, for spilled arrays
        self._lengths = array("q")
        self._spilled_from = -1  # arrays at positions >= this are in the file
        self._written = 0
        self._dirty = False

    def __len__(self) -> int:
        return len(self._lengths)

    @property
    def spilled(self) -> bool:
        return self._file is not None

    def append(self, keys: np.ndarray) -> None:
        keys = np.ascontiguousarray(keys, dtype=np.uint64)
        self._lengths.append(int(keys.shape[0]))
        if self._file is None and self._mem_bytes + keys.nbytes > self.budget:
            self._spill()
        if self._file is None:
            self._mem.append(keys)
            self._mem_bytes += keys.nbytes
            self._offsets.append(-1)
        else:
            self._offsets.append(self._written)
            self._file.write(keys.tobytes())
            self._written += int(keys.shape[0])
            self._dirty = True

    def extend(self, flat: np.ndarray, lengths: np.ndarray) -> None:
        """Append ``len(lengths)`` arrays at once: consecutive runs of ``flat`` of those lengths
        (what :meth:`append` of each would do; a batch that does not fit the budget goes to the
        file whole)."""
        flat = np.ascontiguousarray(flat, dtype=np.uint64)
        lengths = np.asarray(lengths, dtype=np.int64)
        if not lengths.shape[0]:
            return
        if int(lengths.sum()) != flat.shape[0]:
            raise ValueError(f"RaggedU64.extend: {flat.shape[0]} keys for lengths summing to {int(lengths.sum())}")
        if self._file is None and self._mem_bytes + flat.nbytes > self.budget:
            self._spill()
        self._lengths.frombytes(lengths.tobytes())
        if self._file is None:
            self._mem.extend(np.split(flat, np.cumsum(lengths[:-1])))
            self._mem_bytes += flat.nbytes
            self._offsets.frombytes(np.full(lengths.shape[0], -1, dtype=np.int64).tobytes())
            return
        offsets = np.cumsum(lengths)
        offsets -= lengths
        offsets += self._written
        self._offsets.frombytes(offsets.tobytes())
        self._file.write(flat.tobytes())
        self._written += int(flat.shape[0])
        self._dirty = True

    def _spill(self) -> None:
        self._file = tempfile.TemporaryFile(prefix="prefixplan-keys-")  # noqa: SIM115 - closed in close()
        self._spilled_from = len(self._mem)

    def lengths(self) -> np.ndarray:
        """Length of every array, in append order."""
        return np.frombuffer(self._lengths, dtype=np.int64).copy() if len(self._lengths) else np.zeros(0, np.int64)

    def get(self, i: int) -> np.ndarray:
        if self._file is None or i < self._spilled_from:
            return self._mem[i]
        n = self._lengths[i]
        if n == 0:
            return np.zeros(0, dtype=np.uint64)
        if self._dirty:
            self._file.flush()
            self._dirty = False
        return np.frombuffer(pread_all(self._file.fileno(), 8 * n, 8 * self._offsets[i]), dtype=np.uint64)

    def gather(self, rows: np.ndarray) -> np.ndarray:
        """The arrays at positions ``rows``, concatenated in that order. Arrays on disk that follow
        each other in the file (consecutive ``rows`` appended one after another) are read with
        one positioned read per run, not one per array."""
        rows = np.asarray(rows, dtype=np.int64)
        if not rows.shape[0]:
            return np.zeros(0, dtype=np.uint64)
        if self._file is None:
            return np.concatenate([self._mem[i] for i in rows.tolist()])
        if self._dirty:
            self._file.flush()
            self._dirty = False
        lengths = np.frombuffer(self._lengths, dtype=np.int64)[rows]
        offsets = np.frombuffer(self._offsets, dtype=np.int64)[rows]
        on_disk = rows >= self._spilled_from
        # a run goes on while the next array on disk starts where this one ends
        breaks = np.ones(rows.shape[0], dtype=bool)
        breaks[1:] = ~(on_disk[1:] & on_disk[:-1] & (offsets[1:] == offsets[:-1] + lengths[:-1]))
        firsts = np.flatnonzero(breaks)
        ends = np.append(firsts[1:], rows.shape[0])
        fd = self._file.fileno()
        parts = []
        for a, b in zip(firsts.tolist(), ends.tolist(), strict=True):
            if not on_disk[a]:
                parts.append(self._mem[int(rows[a])])
                continue
            n = int(lengths[a:b].sum())
            if n:
                parts.append(np.frombuffer(pread_all(fd, 8 * n, 8 * int(offsets[a])), dtype=np.uint64))
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint64)

    def iter_chunks(self, max_keys: int = 1 << 22) -> Iterator[np.ndarray]:
        """Every key, in storage order (not per array), in chunks of about ``max_keys``."""
        group: list[np.ndarray] = []
        size = 0
        for a in self._mem:
            group.append(a)
            size += int(a.shape[0])
            if size >= max_keys:
                yield np.concatenate(group)
                group, size = [], 0
        if group:
            yield np.concatenate(group)
        if self._file is None or not self._written:
            return
        if self._dirty:
            self._file.flush()
            self._dirty = False
        fd = self._file.fileno()
        for start in range(0, self._written, max_keys):
            n = min(max_keys, self._written - start)
            yield np.frombuffer(pread_all(fd, 8 * n, 8 * start), dtype=np.uint64)

    def close(self) -> None:
        """Drop every array (the file, and the offsets: 16 bytes per array)."""
        if self._file is not None:
            self._file.close()
            self._file = None
        self._mem.clear()
        self._mem_bytes = 0
        self._offsets = array("q")
        self._lengths = array("q")
        self._spilled_from = -1
        self._written = 0
        self._dirty = False


class SpillColumn:
    """A flat column of one dtype: append arrays, read ranges back (module docstring).

    Up to ``budget_bytes`` everything stays in memory; past it the column moves to a temporary
    file and only a write buffer of at most ``buffer_bytes`` stays in memory (default: 1 MiB,
    and never more than the budget).
    """

    def __init__(
        self, dtype: type | np.dtype, budget_bytes: int = DEFAULT_BUDGET, buffer_bytes: int | None = None
    ) -> None:
        self.dtype = np.dtype(dtype)
        self.budget = int(budget_bytes)
        if buffer_bytes is None:
            buffer_bytes = min(1 << 20, self.budget)
        self._buffer_bytes = max(int(buffer_bytes), self.dtype.itemsize)
        self._buf = bytearray()
        self._file: IO[bytes] | None = None
        self._on_disk = 0  # values in the file (they come before the buffer's)

    def __len__(self) -> int:
        return self._on_disk + len(self._buf) // self.dtype.itemsize

    @property
    def spilled(self) -> bool:
        return self._file is not None

    @property
    def nbytes(self) -> int:
        """Bytes held in memory."""
        return len(self._buf)

    def append(self, values: np.ndarray) -> None:
        values = np.asarray(values)
        if not values.shape[0]:
            return
        self._buf += np.ascontiguousarray(values, dtype=self.dtype).tobytes()
        if self._file is None and len(self._buf) > self.budget:
            self._file = tempfile.TemporaryFile(prefix="prefixplan-column-")  # noqa: SIM115 - closed in close()
        if self._file is not None and len(self._buf) >= self._buffer_bytes:
            self._write_buffer()

    def _write_buffer(self) -> None:
        assert self._file is not None
        self._file.write(self._buf)
        self._file.flush()
        self._on_disk += len(self._buf) // self.dtype.itemsize
        self._buf = bytearray()

    def read(self, start: int, stop: int) -> np.ndarray:
        """Values ``start`` up to ``stop`` (a copy: it does not change as the column grows)."""
        start, stop = max(0, int(start)), min(len(self), int(stop))
        if stop <= start:
            return np.zeros(0, dtype=self.dtype)
        size = self.dtype.itemsize
        parts: list[bytes | bytearray] = []
        if start < self._on_disk:
            assert self._file is not None
            upto = min(stop, self._on_disk)
            parts.append(pread_all(self._file.fileno(), (upto - start) * size, start * size))
        if stop > self._on_disk:
            lo = max(start, self._on_disk) - self._on_disk
            parts.append(self._buf[lo * size : (stop - self._on_disk) * size])  # a slice is a copy
        return np.frombuffer(parts[0] if len(parts) == 1 else b"".join(parts), dtype=self.dtype)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        self._buf = bytearray()
        self._on_disk = 0


class ArrayShelf:
    """Arrays put aside on disk, each read back whole (module docstring)."""

    def __init__(self) -> None:
        self._file: IO[bytes] | None = None
        self._size = 0

    def put(self, values: np.ndarray) -> ShelvedArray:
        """Write ``values`` (one-dimensional) to the shelf's file; the handle reads them back."""
        values = np.ascontiguousarray(values)
        if values.ndim != 1:
            raise ValueError("only one-dimensional arrays are shelved")
        if self._file is None:
            self._file = tempfile.TemporaryFile(prefix="prefixplan-shelf-")  # noqa: SIM115 - closed with the shelf
        self._file.write(values.tobytes())
        self._file.flush()
        at = self._size
        self._size += values.nbytes
        return ShelvedArray(self, at, values.dtype.str, int(values.shape[0]))

    def read(self, offset: int, nbytes: int) -> bytes:
        assert self._file is not None
        return pread_all(self._file.fileno(), nbytes, offset)


@dataclass(frozen=True, slots=True)
class ShelvedArray:
    """An array on an :class:`ArrayShelf`; :meth:`load` reads it back (a new array each time)."""

    shelf: ArrayShelf
    offset: int
    dtype: str
    length: int

    def load(self) -> np.ndarray:
        """The array (writable, a new one each time)."""
        dtype = np.dtype(self.dtype)
        if not self.length:
            return np.zeros(0, dtype=dtype)
        return np.frombuffer(bytearray(self.shelf.read(self.offset, self.length * dtype.itemsize)), dtype=dtype)

    def __reduce__(self) -> tuple[Any, tuple[np.ndarray]]:
        """Pickled (and deep-copied) as the array itself: the shelf's file stays in this process."""
        return (_same, (self.load(),))


def _same(values: np.ndarray) -> np.ndarray:
    return values
