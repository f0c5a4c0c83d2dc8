"""Columns that move to disk past a budget read back exactly what was appended."""

from __future__ import annotations

import numpy as np
import pytest

from prefixplan.trace.storage.spill import RaggedU64, SpillColumn


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.uint64])
@pytest.mark.parametrize(("budget", "buffer"), [(1 << 20, 1 << 20), (0, 8), (64, 24), (100, 1 << 20)])
def test_a_spill_column_reads_back_any_range(dtype: type, budget: int, buffer: int) -> None:
    rng = np.random.default_rng(7)
    col = SpillColumn(dtype, budget, buffer_bytes=buffer)
    parts = []
    for _ in range(60):
        part = rng.integers(0, 100, size=int(rng.integers(0, 9))).astype(dtype)
        col.append(part)
        parts.append(part)
        whole = np.concatenate(parts)
        assert len(col) == whole.shape[0]
        for _ in range(3):  # read while it grows: the file part, the buffer, and both
            a, b = sorted(rng.integers(0, whole.shape[0] + 1, size=2).tolist())
            got = col.read(a, b)
            assert got.dtype == np.dtype(dtype)
            assert np.array_equal(got, whole[a:b])
    assert col.spilled == (whole.nbytes > budget)
    assert np.array_equal(col.read(0, len(col)), whole)
    assert col.read(5, 2).shape == (0,)
    assert col.nbytes <= max(budget, buffer) + 8 * np.dtype(dtype).itemsize
    col.close()
    assert len(col) == 0


def test_ragged_arrays_read_back_by_position_in_memory_and_on_disk() -> None:
    rng = np.random.default_rng(3)
    arrays = [rng.integers(0, 2**63, size=int(rng.integers(0, 6)), dtype=np.uint64) for _ in range(50)]
    for budget in (1 << 20, 0, 80):
        ragged = RaggedU64(budget)
        for a in arrays:
            ragged.append(a)
        assert ragged.spilled == (budget < sum(a.nbytes for a in arrays))
        assert [ragged.get(i).tolist() for i in range(len(arrays))] == [a.tolist() for a in arrays]
        assert np.concatenate(list(ragged.iter_chunks(max_keys=7))).tolist() == np.concatenate(arrays).tolist()
        assert ragged.lengths().tolist() == [a.shape[0] for a in arrays]
        # gathered in any order (runs of consecutive rows on disk read at once, others one by one)
        for rows in (np.arange(50), np.arange(50)[::-1], rng.permutation(50), np.array([3, 4, 5, 9, 10, 2]), []):
            rows = np.asarray(rows, dtype=np.int64)
            want = [x for i in rows.tolist() for x in arrays[i].tolist()]
            assert ragged.gather(rows).tolist() == want
        ragged.close()
        assert len(ragged) == 0 and not ragged.spilled and ragged.lengths().shape == (0,)
