"""Ragged arrays of 64-bit keys (one per request), in memory up to a budget, then on disk.

:class:`RaggedU64` keeps what a streaming pass produces per request (its block keys) so a later
pass can read them again in another order (arrival time instead of file order) without holding
them all in memory: past ``budget_bytes`` the arrays go to a temporary file and only their
offsets stay in memory (16 bytes per request).
"""

from __future__ import annotations

import os
import tempfile
from array import array
from collections.abc import Iterator
from typing import IO

import numpy as np

DEFAULT_BUDGET = 16 * 2**20


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
        fd = self._file.fileno()
        data = os.pread(fd, 8 * n, 8 * self._offsets[i])
        return np.frombuffer(data, dtype=np.uint64)

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
            yield np.frombuffer(os.pread(fd, 8 * n, 8 * start), dtype=np.uint64)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        self._mem.clear()
