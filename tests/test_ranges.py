"""One plain JSON-lines file read by several workers in byte ranges gives what one reader of the
whole file gives: every line once, with its own number, wherever the cuts fall."""

from __future__ import annotations

import gzip
import itertools
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from prefixplan.cli.app import main
from prefixplan.logs import LineErrors, ReadOptions, iter_requests
from prefixplan.logs.ranges import MIN_RANGE_BYTES, TAPER, line_ranges, read_range, splittable, tapered_cuts
from prefixplan.render.stream import SourceOptions
from prefixplan.trace.executors import Executor
from prefixplan.trace.intake import Intake, IntakePlan
from tests.shard_logs import EXAMPLE, REJECTED, clean

LINES = [
    json.dumps({"model": "m", "messages": [{"role": "user", "content": "hello " * (i % 9 + 1)}], "user": f"u{i % 4}"})
    for i in range(60)
]


def _file(tmp: Path) -> Path:
    body = []
    for i, line in enumerate(LINES):
        body.append(line)
        if i % 13 == 4:
            body.append("{not json")
        if i % 17 == 6:
            body.append("   ")  # blank: skipped, still counted as a line
        if i % 19 == 8:
            body.append(json.dumps(REJECTED))
        if i % 23 == 2:
            body.append('"x" * 400')
    path = tmp / "log.jsonl"
    path.write_bytes(("\r\n".join(body[:30]) + "\n" + "\n".join(body[30:])).encode())  # CRLF, then LF, no last newline
    return path


def _whole(path: Path, read: ReadOptions) -> tuple[list[tuple[int, str]], LineErrors]:
    errors = LineErrors()
    return [(r.line_no, r.id) for r in iter_requests([str(path)], read, errors)], errors


def assert_same_errors(errors: LineErrors, want: LineErrors) -> None:
    """The counts, categories, lines read and samples of ``errors`` are ``want``'s."""
    assert (errors.count, errors.by_reason, errors.lines_read) == (want.count, want.by_reason, want.lines_read)
    assert [(s.source, s.line_no, s.reason) for s in errors.samples] == [
        (s.source, s.line_no, s.reason) for s in want.samples
    ]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cuts=st.lists(st.integers(0, 20_000), max_size=12), sample=st.sampled_from([None, 0.6]))
def test_ranges_cut_anywhere_read_every_line_once(
    tmp_path_factory: pytest.TempPathFactory, cuts: list[int], sample: float | None
) -> None:
    path = _file(tmp_path_factory.mktemp("r"))
    read = ReadOptions(sample=sample, max_line_bytes=300)
    want, want_errors = _whole(path, read)
    ranges = list(line_ranges(str(path), cuts))
    assert ranges[0].start == 0 and ranges[-1].end == path.stat().st_size
    assert all(a.end == b.start for a, b in itertools.pairwise(ranges))
    got, errors = [], LineErrors()
    for rng in ranges:
        part = LineErrors()
        got += [(r.line_no, r.id) for r in read_range(rng, read, part, str(path))]
        errors.merge(part)
    assert got == want
    assert_same_errors(errors, want_errors)


@given(
    size=st.integers(0, 10**10),
    range_bytes=st.integers(MIN_RANGE_BYTES, 64 * 2**20),
    readers=st.integers(1, 64),
)
def test_tapered_ranges_cover_the_file_and_shrink_towards_its_end(size: int, range_bytes: int, readers: int) -> None:
    cuts = tapered_cuts(size, range_bytes, readers)
    if size == 0:
        assert cuts == []
        return
    bounds = [0, *cuts, size]
    sizes = [b - a for a, b in itertools.pairwise(bounds)]
    assert all(n > 0 for n in sizes) and sum(sizes) == size
    assert all(MIN_RANGE_BYTES <= n <= range_bytes for n in sizes[:-1])
    assert all(a >= b for a, b in itertools.pairwise(sizes[:-1]))  # the last is what is left
    for pos, n in zip(bounds, sizes[:-1], strict=False):  # near the end, a share of what is left
        assert n <= max(MIN_RANGE_BYTES, (size - pos) // (TAPER * readers))
    if size > 8 * TAPER * readers * MIN_RANGE_BYTES:
        assert sizes[-1] <= MIN_RANGE_BYTES  # the readers run out of work together


def test_only_local_plain_json_lines_files_split(tmp_path: Path) -> None:
    plain = _file(tmp_path)
    packed = tmp_path / "log.jsonl.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    server = tmp_path / "vllm.log"
    server.write_text("INFO 01-01 00:00:00 [logger.py:39] Received request x: prompt: 'hi', params: ...\n")
    read = ReadOptions()
    assert splittable(str(plain), read) == "auto-detected: JSON lines"
    assert splittable(str(packed), read) is None and splittable(str(server), read) is None
    assert splittable("s3://bucket/log.jsonl", read) is None and splittable("-", read) is None


@pytest.mark.skipif(not EXAMPLE.is_file(), reason="example log not generated")
def test_workers_reading_ranges_of_one_file_make_the_record_of_one_reader(tmp_path: Path) -> None:
    """The example log as one plain file (8 MB) in eight ranges of about 1 MB, four per worker."""
    log = tmp_path / "agent_log.jsonl"
    lines = gzip.open(EXAMPLE, "rt", encoding="utf-8").read().splitlines()
    lines.insert(7, "{broken")
    lines.insert(150, json.dumps(REJECTED))
    log.write_text("\n".join(lines) + "\n")
    source = SourceOptions(paths=(str(log),))
    two = Intake(IntakePlan(source, Executor(workers=2), 16))
    rows_two = [(r.line, r.block_keys.tobytes()) for r in two.rows()]
    one = Intake(IntakePlan(source, Executor(workers=1), 16))
    rows_one = [(r.line, r.block_keys.tobytes()) for r in one.rows()]
    assert rows_two == rows_one and len(rows_one) == len(lines) - one.errors.count
    assert log.stat().st_size > 8 * MIN_RANGE_BYTES and sum(w["jobs"] for w in two.workers.values()) >= 8
    assert two.errors.count == one.errors.count >= 2  # the example's planted lines and these two
    assert [(s.line_no, s.reason) for s in two.errors.samples] == [(s.line_no, s.reason) for s in one.errors.samples]
    assert_one_and_two_workers_agree(log, tmp_path)


def assert_one_and_two_workers_agree(log: Path, tmp_path: Path) -> None:
    """`analyze LOG` writes the same record (less run metadata) with one process and with two."""
    records = {}
    for w in ("1", "2"):
        out = tmp_path / f"r{w}.json"
        assert main(["analyze", str(log), "--workers", w, "--no-store", "-q", "--json", str(out)]) == 0
        records[w] = clean(json.loads(out.read_text()))
    assert records["1"] == records["2"]
