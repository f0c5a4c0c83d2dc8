"""Rendering a log one file per worker (trace/shards.py) gives the record of one reader: the
partial results of each file (line errors, previews, breakers) merge into exactly what a single
pass over all files in turn finds, whatever the split."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prefixplan.analysis import previews as previews_mod
from prefixplan.analysis.breakers import BreakerFinder
from prefixplan.analysis.previews import Previews
from prefixplan.cli.app import main
from prefixplan.core.hashes import segment_hash
from prefixplan.core.types import Request, Segment, SegmentHash
from prefixplan.logs import LineErrors, expand_paths
from prefixplan.logs.lineerrors import MAX_SAMPLES
from prefixplan.render import RenderSet
from prefixplan.render.stream import SourceOptions
from prefixplan.trace.executors import Executor, Run
from prefixplan.trace.intake import Intake, IntakePlan
from prefixplan.trace.jobplan import shardable
from prefixplan.trace.shards import ShardJob, render_shard
from tests.shard_logs import EXAMPLE, clean, split_example

pytestmark = pytest.mark.skipif(not EXAMPLE.is_file(), reason="example log not generated")


# -- merges: a split stream merged in order equals the whole stream ----------------------------

ERRORS = st.lists(
    st.tuples(st.integers(0, 3), st.integers(1, 40), st.sampled_from(["bad JSON: x", "wrong type: y", "render: z"])),
    max_size=3 * MAX_SAMPLES,
)


def _feed(errors: LineErrors, events: list[tuple[int, int, str]]) -> None:
    for file, line, reason in events:
        errors.saw(f"f{file}", line, b"{}")
        errors.add(f"f{file}", line, reason)


@given(ERRORS, st.lists(st.integers(0, 3 * MAX_SAMPLES), max_size=4))
@settings(max_examples=60, deadline=None)
def test_line_errors_of_parts_merge_into_those_of_the_whole(events: list, cuts: list[int]) -> None:
    events = sorted(events, key=lambda e: e[0])  # files are read in turn
    whole = LineErrors()
    _feed(whole, events)
    merged = LineErrors()
    bounds = [0, *sorted(c for c in cuts if c <= len(events)), len(events)]
    for a, b in itertools.pairwise(bounds):
        part = LineErrors()
        _feed(part, events[a:b])
        merged.merge(part)
    assert merged.count == whole.count and merged.by_reason == whole.by_reason
    assert merged.samples == whole.samples
    assert merged.lines_read == whole.lines_read and merged.first_lines == whole.first_lines
    # and the samples are the first ones in input order, whatever order they were reported in
    key = {f"f{i}": i for i in range(4)}
    assert [(key[s.source], s.line_no) for s in whole.samples] == sorted(
        (key[s.source], s.line_no) for s in whole.samples
    )


def test_a_late_render_failure_takes_its_place_among_the_samples() -> None:
    errors = LineErrors()
    for line in range(1, MAX_SAMPLES + 11):
        errors.saw("b.jsonl", line, b"{}")
        errors.add("b.jsonl", line, "bad JSON: x")
    errors.add("b.jsonl", 3, "render: rejected")  # found after later lines were read
    assert errors.samples[3].reason == "render: rejected" and errors.samples[3].line_no == 3
    assert len(errors.samples) == MAX_SAMPLES and errors.samples[-1].line_no == MAX_SAMPLES - 1


def test_inputs_keep_the_order_they_were_opened_in_whatever_order_their_parts_merge() -> None:
    """Ray: a file read in ranges is noted when its jobs are made, a whole file when its result
    merges; noting each file as its jobs are made keeps the inputs and samples in listed order."""
    from prefixplan.logs.textlog import SourceInfo

    merged = LineErrors()
    for name in ("a.jsonl.gz", "b.jsonl", "c.jsonl.gz"):
        merged.opened(name)
    merged.sources["b.jsonl"] = SourceInfo("jsonl", "ranges")
    for name in ("b.jsonl", "c.jsonl.gz", "a.jsonl.gz"):  # results in another order
        part = LineErrors()
        part.sources[name] = SourceInfo("jsonl", "whole")
        part.saw(name, 1, b"{}")
        part.add(name, 1, "bad JSON: x")
        merged.merge(part)
    assert merged.in_order() == ["a.jsonl.gz", "b.jsonl", "c.jsonl.gz"]
    assert [s.source for s in merged.samples] == ["a.jsonl.gz", "b.jsonl", "c.jsonl.gz"]


def _request(i: int, system: str, tools: list[str], tenant: str | None) -> tuple[Request, list[Segment]]:
    tool_defs = tuple({"type": "function", "function": {"name": t, "parameters": {}}} for t in tools)
    req = Request(
        source="x",
        line_no=i,
        id=str(i),
        format="openai-chat",
        messages=({"role": "system", "content": system}, {"role": "user", "content": f"question {i}"}),
        tools=tool_defs or None,
        tenant=tenant,
    )
    segs = [Segment("system", 0, 40, SegmentHash(segment_hash(system)), 0)]
    for k, t in enumerate(tools):
        segs.append(Segment("tool", 40 + 10 * k, 50 + 10 * k, SegmentHash(segment_hash(t + str(k))), k, t))
    segs.append(Segment("user", 100, 120, SegmentHash(segment_hash(f"question {i}")), 1))
    return req, segs


REQUESTS = st.lists(
    st.tuples(
        st.sampled_from(
            [
                "Today is 2026-11-30. You are helpful.",
                "Today is 2026-12-01. You are helpful.",
                "Request id 3f2a6c1e-8b7d-4c2a-9e1f-0a1b2c3d4e5f. Be brief.",
                "Request id 0b2a6c1e-8b7d-4c2a-9e1f-0a1b2c3d4e5f. Be brief.",
                "You are a static assistant with a long prompt. " * 3,
            ]
        ),
        st.sampled_from([[], ["a", "b"], ["b", "a"], ["c"]]),
        st.sampled_from([None, "u1", "u2", "u3"]),
    ),
    max_size=40,
)


@given(REQUESTS, st.lists(st.integers(0, 40), max_size=4), st.integers(20, 400), st.booleans())
@settings(max_examples=60, deadline=None)
def test_previews_and_breakers_of_parts_merge_into_those_of_the_whole(
    reqs: list, cuts: list[int], budget: int, user_text: bool
) -> None:
    items = [_request(i, *r) for i, r in enumerate(reqs, start=1)]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(previews_mod, "PART_BYTES_BUDGET", budget)  # small: the budget runs out mid-stream
        whole_p, whole_b = Previews(user_text=user_text), BreakerFinder(min_tenants=2)
        for req, segs in items:
            whole_p.remember(req, segs)
            whole_b.add_request(req, segs, 120, 1)
        for workers in (0, 2):  # parts merged as they are; or sent by two workers taking turns,
            # each leaving out what it sent before (Previews.drop)
            known: list[set[str]] = [set(), set()]
            merged_p, merged_b = Previews(user_text=user_text), BreakerFinder(min_tenants=2)
            bounds = [0, *sorted(c for c in cuts if c <= len(items)), len(items)]
            for k, (a, b) in enumerate(itertools.pairwise(bounds)):
                part_p, part_b = Previews(user_text=user_text), BreakerFinder(min_tenants=2)
                for req, segs in items[a:b]:
                    part_p.remember(req, segs)
                    part_b.add_request(req, segs, 120, 1)
                if workers:
                    part_p.drop(known[k % workers])
                merged_p.merge(part_p)
                merged_b.merge(part_b)
            assert list(merged_p.previews.items()) == list(whole_p.previews.items())
            assert merged_p.heads == whole_p.heads
            assert list(merged_p.part_data.items()) == list(whole_p.part_data.items())
            assert merged_p.part_bytes == whole_p.part_bytes
            assert merged_b.results() == whole_b.results()
        if not user_text:  # only system texts and tool names are previewed
            assert {p[0] for p in whole_p.previews.values()} <= {"system", "tool"}


# -- the record of a log split into files ------------------------------------------------------


def _record(tmp: Path, inputs: list[str], *extra: str) -> dict:
    out = tmp / f"r{len(list(tmp.iterdir()))}.json"
    assert main(["analyze", *inputs, "--no-store", "-q", "--json", str(out), *extra]) == 0
    return clean(json.loads(out.read_text()))


@pytest.mark.heavy
def test_a_log_split_into_files_gives_one_record_in_process_and_by_file(tmp_path: Path) -> None:
    files = split_example(tmp_path / "log")
    one = _record(tmp_path, [str(tmp_path / "log")], "--workers", "1")  # one reader, in this process
    source = SourceOptions(paths=(str(tmp_path / "log"),))
    files = expand_paths(source.paths)
    assert shardable(source, Run(Executor(), RenderSet(), 2), files) == files  # 24 files, 2 workers
    by_file = _record(tmp_path, [str(tmp_path / "log")], "--workers", "2")
    assert by_file == one
    errors = one["errors"]
    assert errors["count"] >= 10 and "render" in errors["by_reason"]
    assert [s["source"] for s in errors["samples"]] == sorted(s["source"] for s in errors["samples"])
    assert any(s["source"] == str(files[5]) for s in errors["samples"])  # the unreadable file
    assert one["breakers"] and one["candidates"]


def test_a_worker_returns_compact_rows_and_its_files_errors(tmp_path: Path) -> None:
    files = split_example(tmp_path / "log")
    job = ShardJob(4, str(files[4]), SourceOptions(paths=(str(tmp_path / "log"),)), 16)
    result = render_shard(job)
    assert result.error is None and result.index == 4 and result.text is None
    assert [r.index for r in result.rows] == list(range(len(result.rows)))
    assert [f.line_no for f in result.failures] == [2]  # the rejected request, with its line
    assert result.errors.by_reason.get("render") == 1  # counted with the file's malformed lines
    assert {s.source for s in result.errors.samples} == {str(files[4])}
    assert result.size == files[4].stat().st_size


def test_strict_mode_raises_the_first_bad_line_of_a_worker(tmp_path: Path) -> None:
    split_example(tmp_path / "log")
    out = tmp_path / "r.json"
    rc = main(["analyze", str(tmp_path / "log"), "--no-store", "-q", "--strict", "--workers", "2", "--json", str(out)])
    assert rc == 2 and not out.exists()


def test_without_ray_the_executor_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import sys

    split_example(tmp_path / "log", files=3)
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray fails as when it is not installed
    assert main(["analyze", str(tmp_path / "log"), "--executor", "ray", "--no-store", "-q"]) == 2
    assert 'pip install "prefixplan[ray]"' in capsys.readouterr().err


def test_an_unknown_executor_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", str(EXAMPLE), "--executor", "dask", "--no-store", "-q"]) == 2
    assert "unknown executor 'dask'" in capsys.readouterr().err


def test_one_file_shared_by_two_workers_reads_like_one_reader(tmp_path: Path) -> None:
    """Lines parsed by the workers (long, blank, malformed, sampled out, rejected by the tokenizer)
    give the rows and line errors of one reader."""
    from prefixplan.logs import ReadOptions
    from tests.shard_logs import REJECTED

    good = {"model": "m", "messages": [{"role": "user", "content": "hello " * 40}]}
    lines = []
    for i in range(300):
        lines.append(json.dumps(REJECTED) if i % 11 == 3 else json.dumps({**good, "user": f"u{i % 5}"}))
        if i % 17 == 5:
            lines.append("{not json")
        if i % 23 == 7:
            lines.append("   ")
        if i % 29 == 9:
            lines.append(json.dumps({"model": "m", "messages": [{"role": "user", "content": "x" * 3000}]}))
    log = tmp_path / "one.jsonl"
    log.write_text("\n".join(lines) + "\n")
    outcomes = []
    for workers in (1, 2):
        for strict in (False, True):
            read = ReadOptions(max_line_bytes=2000, sample=0.9, strict=strict)
            source = SourceOptions(paths=(str(log),), read=read)
            intake = Intake(IntakePlan(source, Executor(workers=workers), 16))
            errors, failures = intake.errors, intake.failures
            try:
                rows = [(row.index, row.block_keys.tobytes()) for row in intake.rows()]
                outcome: object = (rows, errors.count, errors.by_reason, errors.samples, failures, errors.lines_read)
            except Exception as exc:  # strict: the first bad line, whoever parsed it
                outcome = (type(exc).__name__, str(exc))
            outcomes.append(outcome)
    assert outcomes[0] == outcomes[2] and outcomes[1] == outcomes[3]
    assert outcomes[0][2].keys() >= {"bad JSON", "line too long", "render"}  # type: ignore[index]


def test_a_worker_error_closes_the_pool_in_the_consumers_thread(tmp_path: Path) -> None:
    """The strict error of a worker ends the run with no render pool left suspended: closed by
    whoever met the error, not later by the garbage collector on some other thread (the pool's
    own manager thread cannot join itself: "cannot join current thread")."""
    import gc
    import types

    from prefixplan.trace import local_pool

    split_example(tmp_path / "log")
    gc.collect()
    rc = main(["analyze", str(tmp_path / "log"), "--no-store", "-q", "--strict", "--workers", "2"])
    assert rc == 2
    left = [
        o
        for o in gc.get_objects()
        # type(), not isinstance(): a lazy module proxy (openai's) would load itself
        if type(o) is types.GeneratorType and o.gi_code is local_pool.run_local.__code__ and o.gi_frame is not None
    ]
    assert left == []


@pytest.mark.parametrize("routing", [False, True])
def test_a_shard_result_crosses_processes_as_columns_with_every_row_intact(tmp_path: Path, routing: bool) -> None:
    """Rows travel as a few column buffers (pack_rows) and come back field for field: same
    values, same types, arrays with their dtypes."""
    import dataclasses
    import pickle

    import numpy as np

    from prefixplan.trace.rows import TraceRow, pack_rows, unpack_rows

    files = split_example(tmp_path / "log")
    result = render_shard(ShardJob(4, str(files[4]), SourceOptions(paths=(str(tmp_path / "log"),)), 16, routing))
    back = pickle.loads(pickle.dumps(result))
    back_rows = back.take_rows()  # unpacked when taken (take_columns: straight to columns)
    assert len(back_rows) == len(result.rows) > 10
    assert back.errors.count == result.errors.count and back.failures == result.failures
    for a, b in zip(result.rows, back_rows, strict=True):
        for f in dataclasses.fields(TraceRow):
            x, y = getattr(a, f.name), getattr(b, f.name)
            if isinstance(x, np.ndarray):
                assert isinstance(y, np.ndarray) and y.dtype == x.dtype and np.array_equal(x, y), f.name
            else:
                assert type(y) is type(x) and y == x, f.name
    assert (back_rows[0].route_units is not None) == routing
    # arrays of one field with different dtypes travel as they are; no rows, no columns
    rows = result.rows[:3]
    rows[1] = dataclasses.replace(rows[1], seg_start=rows[1].seg_start.astype(np.int64))
    again = unpack_rows(pickle.loads(pickle.dumps(pack_rows(rows))))
    assert [r.seg_start.dtype for r in again] == [rows[0].seg_start.dtype, np.int64, rows[2].seg_start.dtype]
    assert unpack_rows(pack_rows([])) == []
