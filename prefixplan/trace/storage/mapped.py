"""Per-request columns kept in temporary files and mapped, resident only while a pass reads them.

An analysis keeps a few numbers per request from its first pass to its last (arrival, lengths,
block ids, tenant, source line, ...): about 200 bytes, which on a log of millions of requests
is most of what grows with the log. :class:`ColumnWriter` collects such a column one value at
a time in a small buffer and writes it to a temporary file as it grows; :meth:`ColumnWriter.finish`
maps the file as a numpy array. Pages of a mapped array become resident as a pass reads them and
:func:`drop_resident` hands them back between passes: they stay in the page cache, which the
system writes back and reclaims under pressure, and a later read maps them in again. A column
under one buffer (a small log) stays an ordinary array in memory and never touches the disk.

The files are unlinked as soon as they are mapped, so nothing is left behind whatever way the
process ends; the mapping lives as long as an array that views it.
"""

from __future__ import annotations

import mmap
import tempfile
from array import array
from collections.abc import Callable
from typing import Any

import numpy as np

CHUNK = 1 << 16
"""Values a :class:`ColumnWriter` buffers before writing them to its file."""
SPILL_EVERY = 1 << 12
"""Rows between an owner's calls of :meth:`ColumnWriter.spill` on its columns."""
MIN_MAPPED = 1 << 20
"""Bytes from which :func:`mapped_empty` maps a file rather than allocating memory."""
GATHER_WINDOW = 1 << 18
"""Values :func:`mapped_gather` moves at a time."""

_TYPECODES = {
    np.dtype(np.float64): "d",
    np.dtype(np.int64): "q",
    np.dtype(np.uint64): "Q",
    np.dtype(np.int32): "i",
    np.dtype(np.uint32): "I",
    np.dtype(np.int8): "b",
}


def _map_file(nbytes: int, content: Any = None) -> mmap.mmap:
    """A shared read/write mapping of a new, already unlinked temporary file of ``nbytes`` bytes
    (``content``, if given, written to it first)."""
    with tempfile.TemporaryFile(prefix="prefixplan-column-") as fh:
        if content is not None:
            fh.write(content)
            fh.flush()
        fh.truncate(nbytes)
        return mmap.mmap(fh.fileno(), nbytes)


def mapped_empty(n: int, dtype: Any) -> np.ndarray:
    """A writable array of ``n`` zeros of ``dtype``, file-backed past :data:`MIN_MAPPED` bytes."""
    dt = np.dtype(dtype)
    nbytes = int(n) * dt.itemsize
    if nbytes < MIN_MAPPED or not nbytes:
        return np.zeros(int(n), dtype=dt)
    return np.frombuffer(_map_file(nbytes), dtype=dt, count=int(n))


def mapped_copy(values: np.ndarray, dtype: Any = None) -> np.ndarray:
    """``values`` (one-dimensional) as a file-backed array past :data:`MIN_MAPPED` bytes, converted
    to ``dtype`` a window at a time."""
    dt = np.dtype(dtype) if dtype is not None else values.dtype
    n = int(values.shape[0])
    out = mapped_empty(n, dt)
    for lo in range(0, n, GATHER_WINDOW):
        out[lo : lo + GATHER_WINDOW] = values[lo : lo + GATHER_WINDOW]
    return out


def mapped_gather(values: np.ndarray, index: np.ndarray, dtype: Any = None) -> np.ndarray:
    """``values[index]`` (as ``dtype``) into a file-backed array, a window of ``index`` at a time:
    no full-size temporary besides the result."""
    dt = np.dtype(dtype) if dtype is not None else values.dtype
    n = int(index.shape[0])
    out = mapped_empty(n, dt)
    for lo in range(0, n, GATHER_WINDOW):
        out[lo : lo + GATHER_WINDOW] = values[index[lo : lo + GATHER_WINDOW]]
    return out


def _mapping_of(values: Any) -> mmap.mmap | None:
    base = values
    while base is not None:
        if isinstance(base, mmap.mmap):
            return base
        base = getattr(base, "base", None) if not isinstance(base, memoryview) else base.obj
    return None


def is_mapped(values: np.ndarray) -> bool:
    """Whether ``values`` views a file mapping (see :func:`mapped_empty`)."""
    return _mapping_of(values) is not None


def drop_resident(*arrays: Any) -> int:
    """Hand back the resident pages of the file-backed ones among ``arrays`` (their whole
    mappings); the data stays in their files. Others are left as they are. Returns how many
    mappings were dropped (0 where the system cannot: no ``madvise``)."""
    advice = getattr(mmap, "MADV_DONTNEED", None)
    dropped = 0
    seen: set[int] = set()
    for values in arrays:
        mapping = _mapping_of(values)
        if mapping is None or id(mapping) in seen or advice is None or not hasattr(mapping, "madvise"):
            continue
        seen.add(id(mapping))
        try:
            mapping.madvise(advice)
        except (OSError, ValueError):  # a closed or empty mapping: nothing resident
            continue
        dropped += 1
    return dropped


class ColumnWriter:
    """One column of ``dtype``, appended a value (or an array) at a time; :meth:`finish` returns
    it as an array (module docstring)."""

    def __init__(self, dtype: Any, chunk: int | None = None) -> None:
        self.dtype = np.dtype(dtype)
        self._typecode = _TYPECODES[self.dtype]
        self._chunk = max(1, int(CHUNK if chunk is None else chunk))
        self._buf = array(self._typecode)
        self._file: Any = None
        self._on_disk = 0
        # the hot path: one value, no Python frame of our own
        self.append: Callable[[Any], None] = self._buf.append

    def __len__(self) -> int:
        return self._on_disk + len(self._buf)

    @property
    def nbytes(self) -> int:
        """Bytes held in memory (the buffer)."""
        return len(self._buf) * self.dtype.itemsize

    def extend(self, values: np.ndarray) -> None:
        """Append every value of ``values``."""
        self._buf.frombytes(np.ascontiguousarray(values, dtype=self.dtype).tobytes())
        self.spill()

    def spill(self) -> None:
        """Write the buffer to the file once it holds a chunk (:meth:`append` does not look:
        call this every :data:`SPILL_EVERY` values or so; :meth:`finish` writes the rest)."""
        if len(self._buf) >= self._chunk:
            self._write()

    def _write(self) -> None:
        if self._file is None:
            self._file = tempfile.TemporaryFile(prefix="prefixplan-column-")  # noqa: SIM115 - closed in finish()/close()
        self._file.write(self._buf.tobytes())
        self._on_disk += len(self._buf)
        self._buf = array(self._typecode)
        self.append = self._buf.append

    def finish(self) -> np.ndarray:
        """Every value as a writable array, file-backed when the column reached its file; the
        writer starts empty again."""
        self.spill()
        if self._file is None:
            out = np.frombuffer(self._buf, dtype=self.dtype).copy() if len(self._buf) else np.zeros(0, self.dtype)
        else:
            if len(self._buf):
                self._write()
            fh, self._file = self._file, None
            with fh:
                fh.flush()
                nbytes = self._on_disk * self.dtype.itemsize
                out = np.frombuffer(mmap.mmap(fh.fileno(), nbytes), dtype=self.dtype)
        self._buf = array(self._typecode)
        self.append = self._buf.append
        self._on_disk = 0
        return out

    def close(self) -> None:
        """Drop what was appended (the file too)."""
        if self._file is not None:
            self._file.close()
            self._file = None
        self._buf = array(self._typecode)
        self.append = self._buf.append
        self._on_disk = 0
