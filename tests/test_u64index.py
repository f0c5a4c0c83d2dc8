"""The key -> id index of the block trace: growing, freezing and spilling keep every answer."""

from __future__ import annotations

import numpy as np
import pytest

from prefixplan.trace.storage.u64index import MAX_LOAD, U64Index


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
    # sized for the keys asked for, not rounded up to a power of two
    assert capacity / MAX_LOAD <= index._keys.shape[0] <= max(64, capacity / MAX_LOAD + 65)
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
    import prefixplan.trace.storage.u64index as u64

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


@pytest.mark.parametrize("id_dtype", [np.int32, np.int64])
def test_ids_are_mapped_in_memory_and_in_the_file_alike(id_dtype: type) -> None:
    """map_ids rewrites every id, a step at a time, whether the frozen index is in memory or in
    its file; 64-bit ids keep values past 2**31."""
    rng = np.random.default_rng(11)
    keys = _odd_keys(rng, 5_000)
    base = 2**33 if id_dtype is np.int64 else 0
    in_memory, on_disk = U64Index(100, id_dtype=id_dtype), U64Index(100, id_dtype=id_dtype)
    for index in (in_memory, on_disk):
        index.insert(keys, np.arange(base, base + keys.shape[0]))
        with pytest.raises(RuntimeError):
            index.map_ids(lambda ids: ids)
    in_memory.freeze()
    on_disk.freeze(spill_budget=0)
    assert on_disk._file is not None
    for index in (in_memory, on_disk):
        index.map_ids(lambda ids: ids * 3 + 1, step=777)
        assert np.array_equal(index.lookup(keys), 3 * np.arange(base, base + keys.shape[0]) + 1)


def test_a_split_index_asks_each_key_s_part() -> None:
    from prefixplan.trace.storage.u64index import SplitIndex

    rng = np.random.default_rng(12)
    keys = rng.permutation(
        np.unique(rng.integers(0, 2**64, size=4_000, dtype=np.uint64, endpoint=False) | np.uint64(1))
    )
    bits = 2
    parts = [U64Index(10) for _ in range(1 << bits)]
    top = (keys >> np.uint64(64 - bits)).astype(np.int64)
    for p, index in enumerate(parts):
        mine = np.flatnonzero(top == p)
        assert mine.shape[0] > 0
        index.insert(keys[mine], mine)
        index.freeze(spill_budget=0 if p % 2 else None)
    split = SplitIndex(bits, parts)
    assert len(split) == keys.shape[0]
    absent = rng.integers(0, 2**64, size=100, dtype=np.uint64) | np.uint64(1)
    absent = absent[~np.isin(absent, keys)]
    got = split.lookup(np.concatenate([keys[::-1], absent]))
    assert np.array_equal(got, np.concatenate([np.arange(keys.shape[0])[::-1], np.full(absent.shape[0], -1)]))
    with pytest.raises(ValueError):
        SplitIndex(1, parts)
