"""A batch of trace rows added as columns gives what adding each row gives: the row store's
columns, segments and chunks, and the block trace, whatever the batch edges."""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path

import numpy as np
import pytest
from oracles.prompts import iter_prompts

from prefixplan.analysis.rowstore import RowStore
from prefixplan.core.granularity import engine_granularity
from prefixplan.errors import InputError, UsageError
from prefixplan.logs import LineErrors
from prefixplan.render.stream import SourceOptions
from prefixplan.trace.blocks import TraceBuilder
from prefixplan.trace.columns import RowColumns
from prefixplan.trace.parquet import TraceFile
from prefixplan.trace.requests import request_of_row
from prefixplan.trace.rows import RowMaker, TraceRow
from prefixplan.trace.storage.spill import RaggedU64
from prefixplan.trace.writer import TraceWriter, base_meta

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "agent_log.jsonl.gz"
pytestmark = pytest.mark.skipif(not EXAMPLE.is_file(), reason="example log not generated")


@pytest.fixture(scope="module")
def rows_and_file(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[TraceRow], Path]:
    """The example log's rows with what a log may lack mixed in (no time, no tenant, no model,
    a logged cached count, a second namespace, a prompt shorter than its keys), and their trace
    file."""
    src = SourceOptions(paths=(str(EXAMPLE),))
    maker = RowMaker(16)
    rows = [maker.row(p, i) for i, p in enumerate(iter_prompts(src, LineErrors(), src.renderers()))]
    rows = rows[:300]
    rng = np.random.default_rng(11)
    varied = []
    for row in rows:
        change: dict[str, object] = {}
        if rng.random() < 0.2:
            change["time"] = None
        if rng.random() < 0.3:
            change["tenant"] = None
        if rng.random() < 0.2:
            change["model"] = None
        if rng.random() < 0.3:
            change["logged_cached_tokens"] = int(rng.integers(0, 500))
        if rng.random() < 0.25:
            change["namespace"] = "other-model"
        if rng.random() < 0.15:  # fewer real tokens than the keys cover (a Mooncake input_length)
            change["prompt_tokens"] = max(0, row.prompt_tokens - int(rng.integers(1, 60)))
        varied.append(dataclasses.replace(row, **change) if change else row)
    path = tmp_path_factory.mktemp("columns") / "trace.parquet"
    with TraceWriter(path, base_meta(16, {})) as writer:
        for row in varied:
            writer.write(row)
    return varied, path


def _batches(rows: list[TraceRow], size: int) -> list[RowColumns]:
    return [RowColumns.of_rows(rows[i : i + size]) for i in range(0, len(rows), size)]


def _store_state(store: RowStore) -> tuple:
    cols = {k: v.tolist() for k, v in store.columns().items()}
    n = len(store)
    return (
        cols,
        [store.segments(i) for i in range(n)],
        [store.chunks(i) for i in range(n)],
        [(name, store.ragged(name, 0, store.ragged_size(name)).tolist()) for name in ("seg_kind", "chunk_hash")],
        (store.namespaces.names, store.models.names, store.formats.names, store.sources.names, store.names.names),
    )


@pytest.mark.parametrize("budget", [0, 4096, None])
def test_row_store_columns_equal_rows(rows_and_file: tuple[list[TraceRow], Path], budget: int | None) -> None:
    rows, path = rows_and_file
    by_row = RowStore(ragged_budget=budget)
    for row in rows:
        by_row.add(row)
    want = _store_state(by_row)
    assert any(s for s in want[1]) and any(c for c in want[2])  # segments and chunks to compare
    assert None in [r.time for r in rows] and len(set(want[4][0])) == 2
    for batches in (_batches(rows, 1), _batches(rows, 37), _batches(rows, len(rows)), TraceFile(path).columns(41)):
        store = RowStore(ragged_budget=budget)
        for cols in batches:
            store.add_columns(cols)
        assert _store_state(store) == want


def _trace_state(builder: TraceBuilder) -> tuple:
    trace = builder.finish()
    return (
        [c.tolist() for c in trace.columns()],
        trace.namespaces,
        trace.distinct_blocks,
        dict(builder._ns_scale),
    )


@pytest.mark.parametrize("engine,block", [("vllm", None), ("vllm", 32), ("lmcache", None)])
def test_block_trace_of_columns_equals_rows(
    rows_and_file: tuple[list[TraceRow], Path], engine: str, block: int | None
) -> None:
    """Block sizes that take every key, every second one, and every 16th (256-token chunks)."""
    rows, path = rows_and_file
    gran = engine_granularity(engine, block)
    for singletons in (True, False):
        by_row = TraceBuilder(gran, index_singletons=singletons)
        for row in rows:
            by_row.add(request_of_row(row))
        want = _trace_state(by_row)
        assert want[2] > 0
        every_key = np.concatenate([r.block_keys for r in rows])
        ids = by_row._index.lookup(every_key).tolist()
        assert max(ids) >= 0
        for batches in (_batches(rows, 1), _batches(rows, 53), TraceFile(path).columns(64)):
            builder = TraceBuilder(gran, index_singletons=singletons)
            for cols in batches:
                builder.add_columns(cols)
            assert _trace_state(builder) == want
            assert builder._index.lookup(every_key).tolist() == ids


def test_columns_refuse_what_rows_refuse(rows_and_file: tuple[list[TraceRow], Path], tmp_path: Path) -> None:
    rows, _ = rows_and_file
    fine = TraceBuilder(engine_granularity("vllm", 8))  # finer than the trace's 16-token keys
    with pytest.raises(UsageError, match="every 16 tokens"):
        fine.add_columns(RowColumns.of_rows(rows[:3]))
    observed = TraceBuilder(engine_granularity("vllm"), observer=lambda req, at: None)
    with pytest.raises(RuntimeError, match="observer"):
        observed.add_columns(RowColumns.of_rows(rows[:3]))
    damaged = tmp_path / "even.parquet"
    with TraceWriter(damaged, base_meta(16, {})) as writer:
        for k, row in enumerate(rows[:6]):
            keys = row.block_keys.copy()
            if k == 5 and keys.size:
                keys[-1] = 2
            writer.write(dataclasses.replace(row, block_keys=keys))
    with pytest.raises(InputError, match=r"even\.parquet: block_keys holds an even value"):
        list(TraceFile(damaged).columns())


@pytest.mark.parametrize("budget", [0, 200, 1 << 20])
def test_ragged_extend_equals_append(budget: int) -> None:
    rng = np.random.default_rng(3)
    arrays = [rng.integers(1, 2**63, size=int(rng.integers(0, 9)), dtype=np.uint64) for _ in range(60)]
    one, many = RaggedU64(budget), RaggedU64(budget)
    for a in arrays:
        one.append(a)
    for lo, hi in itertools.pairwise([0, 1, 10, 11, 40, 60]):
        part = arrays[lo:hi]
        many.extend(np.concatenate(part), np.array([a.shape[0] for a in part]))
    assert many.lengths().tolist() == one.lengths().tolist()
    for i in range(len(arrays)):
        assert many.get(i).tolist() == arrays[i].tolist()
    rows = np.array([5, 6, 7, 0, 59, 12, 13])
    assert many.gather(rows).tolist() == one.gather(rows).tolist()
    assert np.concatenate(list(many.iter_chunks(7))).tolist() == np.concatenate(arrays).tolist()
    with pytest.raises(ValueError, match="lengths"):
        many.extend(np.zeros(3, dtype=np.uint64), np.array([1, 1]))


def test_a_workers_packed_rows_give_the_same_columns(rows_and_file: tuple[list[TraceRow], Path]) -> None:
    """What a render worker sends (pickled, its rows packed) becomes the columns of its rows
    without row objects; taken as rows instead, the same rows."""
    import pickle

    from prefixplan.trace.shards import ShardResult

    rows, _ = rows_and_file
    want = RowColumns.of_rows(rows[:70])

    def same(a: RowColumns, b: RowColumns) -> bool:
        return all(
            repr(getattr(a, f.name)) == repr(getattr(b, f.name))
            if not isinstance(getattr(a, f.name), np.ndarray)
            else np.array_equal(getattr(a, f.name), getattr(b, f.name))
            and getattr(a, f.name).dtype == getattr(b, f.name).dtype
            for f in dataclasses.fields(RowColumns)
        )

    sent = pickle.loads(pickle.dumps(ShardResult(0, rows=list(rows[:70]))))
    assert same(sent.take_columns(), want) and sent.take_rows() == []
    again = pickle.loads(pickle.dumps(ShardResult(0, rows=list(rows[:70]))))
    back = again.take_rows()
    assert [r.index for r in back] == [r.index for r in rows[:70]]
    assert [r.block_keys.tolist() for r in back] == [r.block_keys.tolist() for r in rows[:70]]
    local = ShardResult(0, rows=list(rows[:70]))  # rendered in this process: never pickled
    assert same(local.take_columns(), want)
    assert not same(RowColumns.of_rows(rows[1:71]), want)


@pytest.mark.parametrize("block", [None, 32])
def test_block_ids_found_as_timed_rows_arrive_equal_those_found_at_the_end(
    rows_and_file: tuple[list[TraceRow], Path], block: int | None
) -> None:
    """Batches of rows in arrival order are given their block ids' pass as they come in (an
    index of every key, while it stays in budget); the trace and every lookup are those of
    rows added one by one. Rows out of order, or a pass that outgrows its budget, leave the
    pass to finish(): the same trace again."""
    from unittest import mock

    import prefixplan.trace.blocks as blocks_mod

    rows, _ = rows_and_file
    timed = [dataclasses.replace(r, time=1000.0 + i // 3) for i, r in enumerate(rows)]  # ties too
    gran = engine_granularity("vllm", block)
    every_key = np.concatenate([r.block_keys for r in rows])
    for singletons in (True, False):
        by_row = TraceBuilder(gran, index_singletons=singletons)
        for row in timed:
            by_row.add(request_of_row(row))
        want = _trace_state(by_row)
        ids = by_row._index.lookup(every_key).tolist()
        live = TraceBuilder(gran, index_singletons=singletons)
        for cols in _batches(timed, 29):
            live.add_columns(cols)
        assert live._arrivals.live and live._arrivals.rows == len(rows)
        assert _trace_state(live) == want
        assert live._index.lookup(every_key).tolist() == ids
        swapped = timed[:40] + timed[41:60] + [timed[40]] + timed[60:]  # one row arrives late
        late = TraceBuilder(gran, index_singletons=singletons)
        for cols in _batches(swapped, 29):
            late.add_columns(cols)
        assert not late._arrivals.live
        by_row_late = TraceBuilder(gran, index_singletons=singletons)
        for row in swapped:
            by_row_late.add(request_of_row(row))
        assert _trace_state(late) == _trace_state(by_row_late)
        with mock.patch.object(blocks_mod, "INDEX_BUDGET", 4096):
            small = TraceBuilder(gran, index_singletons=singletons)
        for cols in _batches(timed, 29):
            small.add_columns(cols)
        assert not small._arrivals.live  # outgrew its budget: finish() made the pass
        assert _trace_state(small) == want
