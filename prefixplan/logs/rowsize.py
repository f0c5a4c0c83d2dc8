"""How many bytes each row of an Arrow record batch holds, from its buffers alone.

A Parquet request log has no line length: one row may hold a 150 MB message in a file of a few
kilobytes (zstd compresses repeated text that well). The table reader
(:mod:`prefixplan.logs.tables`) measures every row here, from the value lengths its columns' offsets
give, and refuses a row over the per-record limit before any of its cells becomes a Python string
(which costs the text again, and a tokenizer many times more).
"""

from __future__ import annotations

from typing import Any

import numpy as np


def row_bytes(columns: list[Any], n: int) -> np.ndarray:
    """Bytes of each of the ``n`` rows of ``columns`` (Arrow arrays of one batch), as int64: the
    values a row holds (string and binary lengths, list items, struct fields, fixed-width values)."""
    total = np.zeros(n, dtype=np.int64)
    for col in columns:
        total += _sizes(col)
    return total


def _sizes(arr: Any) -> np.ndarray:
    """Bytes of each element of the Arrow array ``arr`` (0 for a null)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    t = arr.type
    n = len(arr)
    if pa.types.is_null(t):
        return np.zeros(n, dtype=np.int64)
    if pa.types.is_dictionary(t):
        per_value = _sizes(arr.dictionary)
        indices = arr.indices
        valid = _valid(indices)
        idx = np.asarray(pc.fill_null(indices, 0).to_numpy(zero_copy_only=False), dtype=np.int64)
        out: np.ndarray = per_value.take(idx, mode="clip") if per_value.shape[0] else np.zeros(n, dtype=np.int64)
        return out * valid
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t):
        lengths = pc.fill_null(pc.binary_length(arr), 0)
        return np.asarray(lengths.to_numpy(zero_copy_only=False), dtype=np.int64)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_map(t):
        child = _sizes(arr.values)
        cum = np.zeros(child.shape[0] + 1, dtype=np.int64)
        np.cumsum(child, out=cum[1:])
        offsets = np.asarray(arr.offsets.to_numpy(zero_copy_only=False), dtype=np.int64)
        return (cum[offsets[1:]] - cum[offsets[:-1]]) * _valid(arr)
    if pa.types.is_fixed_size_list(t):
        child = _sizes(arr.flatten())
        width = t.list_size
        if width == 0 or child.shape[0] != n * width:
            return _by_slices(arr)
        return child.reshape(n, width).sum(axis=1) * _valid(arr)
    if pa.types.is_struct(t):
        out = np.zeros(n, dtype=np.int64)
        for field in arr.flatten():
            out += _sizes(field)
        return out * _valid(arr)
    try:
        width = max(1, t.bit_width // 8)
    except ValueError:  # a type with no fixed width this module does not know
        return _by_slices(arr)
    return np.full(n, width, dtype=np.int64) * _valid(arr)


def _valid(arr: Any) -> np.ndarray:
    if not arr.null_count:
        return np.ones(len(arr), dtype=np.int64)
    return np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), dtype=np.int64)


def _by_slices(arr: Any) -> np.ndarray:
    """Each element's referenced buffer bytes (slower: one slice per element)."""
    return np.fromiter((arr.slice(i, 1).nbytes for i in range(len(arr))), dtype=np.int64, count=len(arr))
