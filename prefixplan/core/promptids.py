"""Token ids a log gave for a request, held as 4 bytes an id.

An engine server log carries each request's token ids (millions for a long prompt). A tuple of
Python ints costs 36 bytes an id; :class:`PromptIds` keeps a read-only ``uint32`` array and still
behaves like the tuple of ints it stands for: it compares equal to that tuple (and to a list of the
same ids), hashes like it, iterates and indexes to ints, and ``numpy.asarray(ids, numpy.uint32)``
takes its array without a copy.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, overload

import numpy as np


class PromptIds(Sequence[int]):
    """A read-only sequence of token ids in ``[0, 2**32)`` (module docstring)."""

    __slots__ = ("array",)

    def __init__(self, ids: Any) -> None:
        arr = np.array(ids, dtype=np.uint32) if not isinstance(ids, np.ndarray) else ids.astype(np.uint32)
        arr = arr.reshape(-1)
        arr.flags.writeable = False
        self.array: np.ndarray = arr

    def __len__(self) -> int:
        return int(self.array.shape[0])

    @overload
    def __getitem__(self, i: int) -> int: ...

    @overload
    def __getitem__(self, i: slice) -> PromptIds: ...

    def __getitem__(self, i: int | slice) -> int | PromptIds:
        if isinstance(i, slice):
            return PromptIds(self.array[i])
        return int(self.array[i])

    def __iter__(self) -> Iterator[int]:
        return iter(self.array.tolist())

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        if dtype is None or np.dtype(dtype) == self.array.dtype:
            return self.array.copy() if copy else self.array
        return self.array.astype(dtype)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PromptIds):
            return bool(np.array_equal(self.array, other.array))
        if isinstance(other, (tuple, list)):
            if len(other) != len(self):
                return False
            return all(type(a) is int and a == b for a, b in zip(other, self.array.tolist(), strict=True))
        return NotImplemented

    def __ne__(self, other: object) -> bool:
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    def __hash__(self) -> int:
        return hash(tuple(self.array.tolist()))

    def __repr__(self) -> str:
        head = ", ".join(str(int(t)) for t in self.array[:8])
        return f"PromptIds([{head}{', ...' if len(self) > 8 else ''}], {len(self)} ids)"

    def __reduce__(self) -> tuple[type, tuple[np.ndarray]]:
        return (PromptIds, (self.array,))
