"""Trace files: rows round-trip exactly, and simulating a trace gives what simulating its log gives
(every policy, tiers, TTL, pins, hosted caches, fleets); the file order of a log does not matter."""

from __future__ import annotations

import dataclasses
import gzip
import itertools
import json
import random
from pathlib import Path

import numpy as np
import pytest
from oracles.prompts import iter_prompts

from prefixplan.cli.app import main
from prefixplan.core.types import SEGMENT_KINDS
from prefixplan.errors import InputError, UsageError
from prefixplan.logs import LineErrors
from prefixplan.render.stream import SourceOptions
from prefixplan.simulation import CacheModel, SimConfig
from prefixplan.simulation.config import Workload
from prefixplan.simulation.fleet import FleetModel
from prefixplan.simulation.result import to_json
from prefixplan.simulation.simulator import Simulation
from prefixplan.simulation.spec import Tier
from prefixplan.trace.parquet import TraceFile
from prefixplan.trace.rows import RowMaker, TraceRow
from prefixplan.trace.writer import TraceWriter, base_meta

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "agent_log.jsonl.gz"
pytestmark = pytest.mark.skipif(not EXAMPLE.is_file(), reason="example log not generated")


@pytest.fixture(scope="module")
def rows_and_file(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[TraceRow], Path]:
    """The example log rendered once (block 16, with routing units), and its trace file."""
    src = SourceOptions(paths=(str(EXAMPLE),))
    maker = RowMaker(16, routing=True)
    rows = [maker.row(p, i) for i, p in enumerate(iter_prompts(src, LineErrors(), src.renderers()))]
    path = tmp_path_factory.mktemp("trace") / "example.parquet"
    with TraceWriter(path, base_meta(16, {})) as writer:
        for row in rows:
            writer.write(row)
    return rows, path


def _same(a: object, b: object) -> bool:
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    return a == b


def test_rows_round_trip_exactly(rows_and_file: tuple[list[TraceRow], Path]) -> None:
    rows, path = rows_and_file
    back = list(TraceFile(path).rows(batch_rows=97))  # batch edges inside the file's row groups
    assert len(back) == len(rows) == TraceFile(path).meta["requests"]
    for a, b in zip(rows, back, strict=True):
        diff = [f.name for f in dataclasses.fields(a) if not _same(getattr(a, f.name), getattr(b, f.name))]
        assert not diff, (a.index, diff)
    assert any(r.route_units for r in back) and any(len(r.seg_kind) for r in back)


CONFIGS = {
    "policies": SimConfig(cache=CacheModel(policies=("lru", "lfu", "fifo", "priority"), capacities=(2e4, 2e5))),
    "ttl": SimConfig(cache=CacheModel(policies=("lru", "lfu"), capacities=(5e4,), ttl="30s")),
    "tiers": SimConfig(
        cache=CacheModel(
            policies=("lru",), capacities=(2e4,), tiers=(Tier("cpu", 4e4, 25.0, 0.5), Tier("disk", 1e5, 3.0, 2.0))
        )
    ),
    "pinned": SimConfig(
        cache=CacheModel(policies=("lru", "lfu"), capacities=(1e5,), pinned_fraction=0.2, running_fraction=0.1)
    ),
    "openai": SimConfig(cache=CacheModel(provider="openai", model="gpt-4o")),
    "anthropic": SimConfig(
        cache=CacheModel(provider="anthropic", model="claude-sonnet-4", anthropic_breakpoints="auto")
    ),
    "fleet": SimConfig(fleet=FleetModel(replicas=3, routers=("round-robin", "prefix-hash", "cache-aware"))),
    "batch": SimConfig(workload=Workload(batch_window=2.0)),
}


def _sim(rows: list[TraceRow], config: SimConfig) -> dict:
    sim = Simulation(config)
    for row in rows:
        sim.add_row(row)
    return to_json(sim.result())


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_a_trace_simulates_exactly_as_its_log(rows_and_file: tuple[list[TraceRow], Path], name: str) -> None:
    rows, path = rows_and_file
    config = CONFIGS[name]
    from_log = _sim(rows, config)
    from_trace = _sim(list(TraceFile(path).rows()), config)
    assert from_trace == from_log
    with pytest.MonkeyPatch.context() as patch:  # every per-request column in a mapped file
        from prefixplan.trace.storage import mapped

        patch.setattr(mapped, "CHUNK", 4)
        patch.setattr(mapped, "MIN_MAPPED", 0)
        assert _sim(list(TraceFile(path).rows()), config) == from_log
    assert from_log["runs"] and sum(r["hit_tokens"] + (r.get("cache_write_tokens") or 0) for r in from_log["runs"]) > 0


@pytest.mark.heavy
def test_pins_from_an_analysis_apply_to_a_trace_as_to_its_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record = tmp_path / "a.json"
    assert main(["analyze", str(EXAMPLE), "--no-store", "--json", str(record), "-q"]) == 0
    trace = tmp_path / "t.parquet"
    args = ["--capacity", "1e5", "--pinned-fraction", "0.2", "--analysis", str(record), "--top", "3", "-q"]
    assert main(["simulate", str(EXAMPLE), *args, "--json", str(tmp_path / "log.json"), "--trace-out", str(trace)]) == 0
    assert main(["simulate", str(trace), *args, "--json", str(tmp_path / "trace.json")]) == 0
    log_doc, trace_doc = (json.loads((tmp_path / f).read_text()) for f in ("log.json", "trace.json"))
    assert log_doc == trace_doc and any("pinned 3 prefixes" in n for n in log_doc["notes"])
    assert log_doc["line_errors"] == 4  # the example's planted malformed lines, recorded in the trace


def test_a_trace_refuses_a_finer_block_size_and_other_inputs(rows_and_file: tuple[list[TraceRow], Path]) -> None:
    _, path = rows_and_file
    from prefixplan.simulation.source import simulate_source

    with pytest.raises(UsageError, match="every 16 tokens"):
        simulate_source(SourceOptions(paths=(str(path),)), SimConfig(cache=CacheModel(engine="sglang")))
    with pytest.raises(UsageError, match="on its own"):
        simulate_source(SourceOptions(paths=(str(path), str(EXAMPLE))), SimConfig())
    # a coarser multiple is cut from the same keys
    result, _ = simulate_source(SourceOptions(paths=(str(path),)), SimConfig(cache=CacheModel(engine="lmcache")))
    assert result.runs


def test_not_a_trace(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    other = tmp_path / "other.parquet"
    pq.write_table(pa.table({"a": [1]}), other)
    with pytest.raises(InputError, match="without prefixplan trace metadata"):
        TraceFile(other)
    broken = tmp_path / "broken.parquet"
    broken.write_bytes(b"PAR1 not really")
    with pytest.raises(InputError, match="not a readable Parquet file"):
        TraceFile(broken)


def _chat_log(path: Path, n: int, seed: int, *, shuffle: bool) -> Path:
    """Agent-like traffic: a few system prompts, conversations that grow; distinct timestamps (ties
    replay in file order, so only a log without ties has one time-sorted order)."""
    rng = random.Random(seed)
    systems = [f"You are agent {k}. " + "Follow the runbook carefully. " * 60 for k in range(3)]
    convs: list[list[dict]] = []
    rows = []
    t = 1_700_000_000.0
    for i in range(n):
        t += rng.choice([0.25, 0.5, 1.0, 7.0])
        if convs and rng.random() < 0.4:
            msgs = convs[rng.randrange(len(convs))]
            msgs += [{"role": "assistant", "content": f"step {i}"}, {"role": "user", "content": f"next {i} " * 5}]
        else:
            msgs = [{"role": "system", "content": rng.choice(systems)}, {"role": "user", "content": f"task {i} " * 8}]
            convs.append(msgs)
        rows.append({"timestamp": t, "request": {"model": "m", "user": f"u{i % 5}", "messages": list(msgs)}})
    if shuffle:
        rng.shuffle(rows)
    with gzip.open(path, "wt") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in rows)
    return path


def test_file_order_does_not_matter(tmp_path: Path) -> None:
    from prefixplan.simulation.source import simulate_source

    config = SimConfig(
        cache=CacheModel(policies=("lru", "lfu", "fifo"), capacities=(3e3, 1e4), ttl="20s"),
        fleet=FleetModel(replicas=2, routers=("round-robin", "cache-aware")),
    )
    sorted_log = _chat_log(tmp_path / "sorted.jsonl.gz", 120, 5, shuffle=False)
    shuffled = _chat_log(tmp_path / "shuffled.jsonl.gz", 120, 5, shuffle=True)
    a, _ = simulate_source(SourceOptions(paths=(str(sorted_log),)), config)
    b, _ = simulate_source(SourceOptions(paths=(str(shuffled),)), config)
    ja, jb = to_json(a), to_json(b)
    assert ja["runs"] == jb["runs"] and ja["fleet"] == jb["fleet"]
    assert any(r["hit_tokens"] for r in ja["runs"])


def _record_without_clock(path: Path) -> dict:
    doc = json.loads(path.read_text())
    doc.pop("created")
    doc["summary"].pop("elapsed_s")
    return doc


def test_analyze_of_a_trace_equals_analyze_of_its_log(tmp_path: Path) -> None:
    trace = tmp_path / "t.parquet"
    a, b = tmp_path / "log.json", tmp_path / "trace.json"
    assert main(["analyze", str(EXAMPLE), "--no-store", "-q", "--json", str(a), "--trace-out", str(trace)]) == 0
    assert main(["analyze", str(trace), "--no-store", "-q", "--json", str(b)]) == 0
    from_log, from_trace = _record_without_clock(a), _record_without_clock(b)
    assert from_trace == from_log
    top = from_log["candidates"][0]
    assert top["token_ids"] and top["preview"] and from_log["breakers"] and from_log["rag"]["whatif"]
    # without the log the trace still gives every count, but no token ids (they need a re-render)
    moved = tmp_path / "moved.parquet"
    moved.write_bytes(trace.read_bytes())
    meta_log = TraceFile(moved).meta["inputs"]["source"]["paths"]
    assert meta_log == [str(EXAMPLE)]


def test_a_request_without_a_time_arrives_with_the_one_before_it(tmp_path: Path) -> None:
    """One untimed line among epoch-timed ones must not replay first (as "time 3"): it arrives
    with the request before it in the file, in simulation and in a Mooncake export."""
    from prefixplan.simulation.source import simulate_source
    from prefixplan.trace.export import export_mooncake

    rows = [json.loads(line) for line in gzip.open(_chat_log(tmp_path / "a.jsonl.gz", 60, 3, shuffle=False), "rt")]
    untimed = [dict(r) for r in rows]
    del untimed[20]["timestamp"]
    same = [dict(r) for r in rows]
    same[20]["timestamp"] = same[19]["timestamp"]
    paths = []
    for name, data in (("untimed", untimed), ("same", same)):
        path = tmp_path / f"{name}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in data))
        paths.append(path)
    config = SimConfig(cache=CacheModel(policies=("lru",), capacities=(3e3,), ttl="20s"))
    a, _ = simulate_source(SourceOptions(paths=(str(paths[0]),)), config)
    b, _ = simulate_source(SourceOptions(paths=(str(paths[1]),)), config)
    assert to_json(a)["runs"] == to_json(b)["runs"]
    src = SourceOptions(paths=(str(paths[0]),))
    maker = RowMaker(16)
    trace_rows = [maker.row(p, i) for i, p in enumerate(iter_prompts(src, LineErrors(), src.renderers()))]
    out = tmp_path / "mc.jsonl"
    export_mooncake(trace_rows, out, block_size=16, salt=b"s")
    stamps = [json.loads(line)["timestamp"] for line in out.read_text().splitlines()]
    span_ms = (rows[-1]["timestamp"] - rows[0]["timestamp"]) * 1000
    assert stamps[0] == 0 and max(stamps) <= span_ms + 1 and stamps == sorted(stamps)


def test_a_trace_that_cannot_be_finished_leaves_no_file(tmp_path: Path, rows_and_file) -> None:
    rows, _ = rows_and_file
    writer = TraceWriter(tmp_path / "t.parquet", base_meta(16, {}))
    for row in rows[:5]:
        writer.write(row)
    real = writer._writer

    class DiskFull:
        def __getattr__(self, name: str) -> object:
            return getattr(real, name)

        def close(self) -> None:
            real.close()
            raise OSError(28, "No space left on device")

    writer._writer = DiskFull()
    with pytest.raises(UsageError, match="No space left on device"):
        writer.close()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("version", [True, 1.0, "1", 2])
def test_only_an_integer_version_1_is_read(tmp_path: Path, rows_and_file, version) -> None:
    import pyarrow.parquet as pq

    from prefixplan.trace.schema import META_KEY

    _, path = rows_and_file
    source = pq.ParquetFile(path)
    key = META_KEY.encode() if isinstance(META_KEY, str) else META_KEY
    doc = json.loads(source.metadata.metadata[key])
    doc["version"] = version
    table = source.read()
    other = tmp_path / "v.parquet"
    with pq.ParquetWriter(other, table.schema) as out:
        out.write_table(table)
        out.add_key_value_metadata({key: json.dumps(doc).encode()})
    with pytest.raises(InputError, match="trace version"):
        TraceFile(other)


def test_a_trace_with_an_even_block_key_is_refused_as_damaged(tmp_path: Path, rows_and_file) -> None:
    rows, _ = rows_and_file
    path = tmp_path / "even.parquet"
    with TraceWriter(path, base_meta(16, {})) as writer:
        for k, row in enumerate(rows[:6]):
            keys = row.block_keys.copy()
            if k == 5 and keys.size:
                keys[0] = 0  # the index's empty-slot marker: it would alias another request's block
            writer.write(dataclasses.replace(row, block_keys=keys))
    with pytest.raises(InputError, match=r"even\.parquet: block_keys holds an even value"):
        list(TraceFile(path).rows())


def test_the_row_store_reads_the_same_from_disk_and_in_steps(rows_and_file: tuple[list[TraceRow], Path]) -> None:
    """Segments and chunks wait on disk past a budget and the passes over them go a slice of
    requests at a time: every answer is the one of a store held in memory in one step."""
    from unittest import mock

    import prefixplan.analysis.rag as rag_mod
    from prefixplan.analysis.accounting import kind_accounting
    from prefixplan.analysis.rag import chunk_request_counts, rag_report
    from prefixplan.analysis.rowstore import RowStore

    rows, _ = rows_and_file
    memory, disk = RowStore(), RowStore(ragged_budget=0)
    for row in rows:
        memory.add(row)
        disk.add(row)
    assert disk.nbytes() < memory.nbytes()
    for i in range(len(rows)):
        assert disk.segments(i) == memory.segments(i)
        assert disk.chunks(i) == memory.chunks(i)
        assert [s.kind for s in memory.segments(i)] == [SEGMENT_KINDS[k] for k in rows[i].seg_kind.tolist()]
        assert [c.start for c in memory.chunks(i)] == rows[i].chunk_start.tolist()
    rng = np.random.default_rng(5)
    prompt = memory.columns()["prompt"]
    reused = (rng.random(prompt.shape[0]) * (prompt + 1)).astype(np.int64)
    base_counts = [a.tolist() for a in chunk_request_counts(memory, rows_per_step=1 << 20)]
    base_report, base_recurring = rag_report(memory, reused, rows_per_step=1 << 20)
    base_kinds = kind_accounting(memory, reused, base_recurring, rows_per_step=1 << 20)
    assert base_report["recurring_chunks"] > 0 and base_report["top"] and "rag" in base_kinds
    starts: dict[int, set[int]] = {}  # each chunk's distinct offsets, straight from the rows
    for row in rows:
        for h, at in zip(row.chunk_hash.tolist(), row.chunk_start.tolist(), strict=True):
            starts.setdefault(h, set()).add(at)
    assert [t["positions"] for t in base_report["top"]] == [len(starts[int(t["hash"], 16)]) for t in base_report["top"]]
    with pytest.raises(ValueError, match="rows_per_step"):
        rag_report(memory, reused, rows_per_step=0)
    hashes, requests, _ = chunk_request_counts(memory, rows_per_step=1 << 20)
    assert hashes.tolist() == sorted(starts) and requests.min() == 1 and requests.max() > 1
    assert base_recurring.tolist() == hashes[requests >= 2].tolist()
    for store in (memory, disk):
        for step, part in itertools.product((1, 7, 1 << 20), (1 << 20, 3)):
            # counted in parts of about `part` chunks by the hashes' top bits: the same counts
            with mock.patch.object(rag_mod, "CHUNKS_PER_PART", part):
                assert [a.tolist() for a in chunk_request_counts(store, rows_per_step=step)] == base_counts
                report, recurring = rag_report(store, reused, rows_per_step=step)
            assert report == base_report and recurring.tolist() == base_recurring.tolist()
            assert kind_accounting(store, reused, recurring, rows_per_step=step) == base_kinds
    # released once the record has what it needs: columns (even a held dict) and files go
    held = disk.columns()
    assert held["prompt"].shape[0] == len(rows)
    disk.release()
    assert held == {} and disk.nbytes() == 0
    with pytest.raises(RuntimeError, match="release"):
        disk.columns()
    with pytest.raises(RuntimeError, match="release"):
        disk.add(rows[0])


def test_analyze_is_the_same_with_the_row_store_on_disk(
    tmp_path: Path, rows_and_file: tuple[list[TraceRow], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Segments and chunks on disk, and every per-request column (the row store's, the block
    trace's, the LRU stack's touches) in a mapped file dropped between passes: the same record."""
    import prefixplan.analysis.rowstore as rowstore
    from prefixplan.trace.storage import mapped

    _, trace = rows_and_file
    a, b = tmp_path / "memory.json", tmp_path / "disk.json"
    assert main(["analyze", str(trace), "--no-store", "-q", "--json", str(a)]) == 0
    monkeypatch.setattr(rowstore, "RAGGED_BUDGET", 0)
    monkeypatch.setattr(mapped, "CHUNK", 3)
    monkeypatch.setattr(mapped, "MIN_MAPPED", 0)
    monkeypatch.setattr(mapped, "GATHER_WINDOW", 5)
    dropped: list[int] = []
    real_drop = mapped.drop_resident

    def counting_drop(*arrays: object) -> int:
        n = real_drop(*arrays)
        dropped.append(n)
        return n

    import prefixplan.simulation.lru as lru
    import prefixplan.trace.blocks as blocks

    for module in (rowstore, blocks, lru):
        monkeypatch.setattr(module, "drop_resident", counting_drop)
    assert main(["analyze", str(trace), "--no-store", "-q", "--json", str(b)]) == 0
    assert _record_without_clock(a) == _record_without_clock(b)
    assert sum(dropped) > 0  # the columns were mapped files, and were handed back


@pytest.mark.parametrize("seed", range(6))
def test_a_rows_keys_are_the_prefix_keys_at_its_block_ends_and_boundaries(seed: int) -> None:
    """A row's block keys and boundary keys are the chained prefix keys of its tokens at the
    last token of each full block and of each boundary (made only where they are read)."""
    from prefixplan.core.types import Prompt, Request, Segment
    from prefixplan.trace.blockhash import BlockHasher, namespace_seed

    rng = random.Random(seed)
    n = rng.choice([0, 1, 15, 16, 17, 100, 1000])
    tokens = np.array([rng.randrange(200_000) for _ in range(n)], dtype=np.uint32)
    cuts = sorted(rng.sample(range(1, n + 1), min(n, rng.randrange(4)))) if n else []
    segments, start = [], 0
    for end in cuts:
        segments.append(Segment("user", start, end, f"{end:016x}"))
        start = end
    block = rng.choice([1, 4, 16, 64])
    row = RowMaker(block).row(
        Prompt(
            Request("log", 1, "r1", "openai", messages=({"role": "user", "content": "x"},)), tokens, tuple(segments), ()
        ),
        0,
    )
    keys = BlockHasher().prefix_keys(tokens, namespace_seed(row.namespace, 1))
    assert row.block_keys.tolist() == keys[block - 1 : (n // block) * block : block].tolist()
    assert list(row.boundaries) == sorted({*cuts, n} - {0})
    assert list(row.boundary_keys) == [int(keys[b - 1]) for b in row.boundaries]


@pytest.mark.parametrize("seed", range(4))
def test_rows_of_prompts_that_share_prefixes_have_the_keys_of_their_own_tokens(seed: int) -> None:
    """One row maker over prompts that begin alike (a shared system prompt, a conversation that
    grows, one that diverges, a shorter one, a repeat): each row's keys are those of its own
    tokens, whatever earlier prompt lent it the sums of their common prefix."""
    from prefixplan.core.types import Prompt, Request
    from prefixplan.trace.blockhash import BlockHasher, namespace_seed

    rng = np.random.default_rng(seed)
    system = rng.integers(0, 200_000, int(rng.integers(16, 300))).astype(np.uint32)
    prompts = [system.copy()]
    for _ in range(40):
        base = prompts[int(rng.integers(len(prompts)))]
        cut = int(rng.integers(0, base.shape[0] + 1))
        tail = rng.integers(0, 200_000, int(rng.integers(0, 120))).astype(np.uint32)
        prompts.append(np.concatenate((base[:cut], tail)))
    prompts.append(prompts[5].copy())
    maker = RowMaker(16)
    hasher = BlockHasher()
    request = Request("log", 1, "r1", "openai", messages=({"role": "user", "content": "x"},))
    for i, tokens in enumerate(prompts):
        row = maker.row(Prompt(request, tokens, (), ()), i)
        keys = hasher.prefix_keys(tokens, namespace_seed(row.namespace, 1))
        n = tokens.shape[0]
        assert row.block_keys.tolist() == keys[15 : (n // 16) * 16 : 16].tolist()
        assert list(row.boundary_keys) == ([int(keys[-1])] if n else [])


def test_shared_prefix_sums_equal_the_sums_of_each_array_and_forget_the_least_recent() -> None:
    """Sums lent from an earlier array are the array's own; a changed input array does not
    change what was remembered; past ``entries`` heads, the least recently used is dropped."""
    from prefixplan.trace.blockhash import BlockHasher, SharedPrefixSums

    hasher = BlockHasher()
    shared = SharedPrefixSums(hasher, entries=2)
    rng = np.random.default_rng(7)
    a = rng.integers(0, 200_000, 100).astype(np.uint32)
    b = a.copy()
    b[60:] = rng.integers(0, 200_000, 40)
    for tokens in (a, b, a[:50], a, np.concatenate((a, b))):
        assert shared(tokens).tolist() == hasher.prefix_sums(tokens).tolist()
    assert shared.reused_tokens == 60 + 50 + 50 + 100  # each from the latest array of its head
    a[:] = 0  # the caller's array changes: the remembered copy does not
    c = rng.integers(0, 200_000, 100).astype(np.uint32)
    c[:16] = b[:16]
    assert shared(c).tolist() == hasher.prefix_sums(c).tolist()
    d, e = (rng.integers(0, 200_000, 30).astype(np.uint32) for _ in range(2))
    shared(d)
    shared(e)  # two heads remembered: d and e; the head of a, b and c is gone
    before = shared.reused_tokens
    assert shared(b).tolist() == hasher.prefix_sums(b).tolist()
    assert shared.reused_tokens == before
    assert shared(np.zeros(3, dtype=np.uint32)).tolist() == hasher.prefix_sums(np.zeros(3, dtype=np.uint32)).tolist()


def test_hashes_u64_equals_hash_u64_of_each_and_takes_other_forms_one_by_one() -> None:
    from prefixplan.core.hashes import segment_hash
    from prefixplan.trace.rows import hash_u64, hashes_u64

    hashes = [segment_hash(str(i)) for i in range(50)] + ["ffffffffffffffff", "0000000000000000"]
    assert hashes_u64(hashes).tolist() == [hash_u64(h) for h in hashes]
    odd = ["abc", "0x1f", " 1234567890abcde", "1234_5678_90abcd"]  # not 16 hex digits each
    assert hashes_u64(odd).tolist() == [hash_u64(h) for h in odd]
    assert hashes_u64([]).tolist() == []
    with pytest.raises(ValueError):
        hashes_u64(["not a hash at all"])
