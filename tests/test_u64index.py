"""The key -> id index of the block trace: growing, freezing and spilling keep every answer."""

from __future__ import annotations

import numpy as np
import pytest

from prefixplan.core.u64index import MAX_LOAD, U64Index


def _odd_keys(rng: np.random.Generator, n: int) -> np.ndarray:
    keys = np.unique(rng.integers(1, 2**63, size=n, dtype=np.uint64) | np.uint64(1))
    return rng.permutation(keys)


@pytest.mark.parametrize("capacity", [8, 1000, 50_000])
def test_lookups_are_the_same_growing_frozen_and_spilled(capacity: int) -> None:
    rng = np.random.default_rng(capacity)
    keys = _odd_keys(rng, 40_000)
    absent = _odd_keys(rng, 5_000)
    absent = absent[~np.isin(absent, keys)]
    index = U64Index(capacity)
    for part in np.array_split(keys, 7):  # batches: the table grows between them
        index.insert_new(part)
        assert index.size <= MAX_LOAD * index._keys.shape[0]
    expected = np.arange(keys.shape[0])
    probe = np.concatenate([keys, absent])
    want = np.concatenate([expected, np.full(absent.shape[0], -1)])
    assert np.array_equal(index.lookup(probe), want)
    index.freeze()
    assert np.array_equal(index.lookup(probe), want)
    assert not index.spill(budget_bytes=index.nbytes)  # within the budget: stays in memory
    assert index.spill(budget_bytes=0)
    assert index.nbytes < 8 * keys.shape[0] // 100  # a key per page stays in memory
    assert np.array_equal(index.lookup(probe), want)
    assert not index.spill(budget_bytes=0)  # once


def test_spill_needs_a_frozen_index() -> None:
    index = U64Index()
    index.insert_new(np.array([3, 5], dtype=np.uint64))
    with pytest.raises(RuntimeError):
        index.spill(0)
