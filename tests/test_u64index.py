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


@pytest.mark.parametrize("part", [1 << 20, 4096, 300])
def test_freezing_straight_to_a_file_keeps_every_answer(part: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the budget, freeze writes the sorted keys and ids from the table to a file a range of
    keys at a time (one range, or many when ``SORT_PART`` is small): the file holds the same
    sorted keys and ids as an in-memory freeze, with the same page fence, and lookups agree."""
    import prefixplan.core.u64index as u64

    monkeypatch.setattr(u64, "SORT_PART", part)
    rng = np.random.default_rng(part)
    keys = _odd_keys(rng, 30_000)
    absent = _odd_keys(rng, 3_000)
    absent = absent[~np.isin(absent, keys)]
    in_memory, on_disk = U64Index(1000), U64Index(1000)
    for part_keys in np.array_split(keys, 5):
        in_memory.insert_new(part_keys)
        on_disk.insert_new(part_keys)
    in_memory.freeze(spill_budget=12 * keys.shape[0])  # exactly within the budget: in memory
    on_disk.freeze(spill_budget=12 * keys.shape[0] - 1)
    assert in_memory._file is None and on_disk._file is not None
    n = keys.shape[0]
    on_disk._file.seek(0)
    raw = on_disk._file.read()
    assert len(raw) == 12 * n
    assert np.array_equal(np.frombuffer(raw[: 8 * n], dtype=np.uint64), in_memory._keys)
    assert np.array_equal(np.frombuffer(raw[8 * n :], dtype=np.int32), in_memory._ids)
    assert np.array_equal(on_disk._fence, in_memory._keys[:: u64.SPILL_PAGE])
    probe = np.concatenate([keys, absent])
    want = np.concatenate([np.arange(n), np.full(absent.shape[0], -1)])
    assert np.array_equal(on_disk.lookup(probe), want)
    assert np.array_equal(in_memory.lookup(probe), want)
    with pytest.raises(RuntimeError):
        on_disk.insert_new(np.array([7], dtype=np.uint64))
