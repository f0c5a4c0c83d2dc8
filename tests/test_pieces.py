"""A compressed log decompressed once into line-aligned pieces that workers read: every line read
once, with the line numbers, sampling and error reports of one reader of the whole log."""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from prefixplan.logs import LineErrors, ReadOptions
from prefixplan.logs.open import open_log
from prefixplan.logs.pieces import sniffed_jsonl, spill
from prefixplan.logs.ranges import ByteRange, read_range
from prefixplan.render.stream import SourceOptions
from prefixplan.trace.executors import Executor
from prefixplan.trace.intake import Intake, IntakePlan
from tests.shard_logs import EXAMPLE
from tests.test_ranges import _file, _whole, assert_one_and_two_workers_agree, assert_same_errors


def _packed(tmp: Path, members: int, cut: int | None, reps: int = 1) -> Path:
    """The ranges test's log (malformed, blank, rejected and over-long lines; CRLF then LF; no
    last newline), ``reps`` times, as ``members`` concatenated gzip members, the bytes cut at
    ``cut`` (a truncated download) when given."""
    one = _file(tmp).read_bytes()
    body = b"\n".join([one] * reps)
    step = -(-len(body) // members)
    data = b"".join(gzip.compress(body[i : i + step]) for i in range(0, len(body), step))
    if cut is not None:
        data = data[: max(20, cut % len(data))]
    path = tmp / "log.jsonl.gz"
    path.write_bytes(data)
    return path


def _spilled(
    path: Path, read: ReadOptions, folder: Path, range_bytes: int | Callable[[int], int], read_bytes: int
) -> tuple[list, LineErrors] | None:
    got, errors = [], LineErrors()
    with open_log(str(path)) as stream:
        found = sniffed_jsonl(stream, read.format, read.max_line_bytes)
        if found is None:  # damaged before its format was known: read as before, not spilled
            return None
        pieces = list(spill(stream, found[1], str(folder), range_bytes, read_bytes=read_bytes))
    lines = 0
    for piece in pieces:
        data = Path(piece.path).read_bytes()
        assert piece.first_line == lines + 1 and piece.end == len(data) and piece.spill
        assert data.endswith(b"\n") or piece is pieces[-1]  # every piece but the last ends a line
        lines += data.count(b"\n")
        part = LineErrors()
        got += [(r.line_no, r.id) for r in read_range(piece, read, part, str(path))]
        errors.merge(part)
        assert not os.path.exists(piece.path)  # its reader removed it
    assert not any(folder.iterdir())
    return got, errors


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    reps=st.sampled_from([1, 170]),
    members=st.integers(1, 4),
    cut=st.one_of(st.none(), st.integers(0, 10_000)),
    range_bytes=st.sampled_from([1, 300, 2_000, 10**6]),
    read_bytes=st.sampled_from([7, 64, 1_000, 1 << 20]),
    sample=st.sampled_from([None, 0.6]),
    shrinking=st.booleans(),
)
def test_pieces_read_as_one_reader_reads_the_whole_log(
    tmp_path_factory: pytest.TempPathFactory,
    reps: int,
    members: int,
    cut: int | None,
    range_bytes: int,
    read_bytes: int,
    sample: float | None,
    shrinking: bool,
) -> None:
    """``reps`` 170: 1.2 MB, longer than the head the format is sniffed from (damage there
    leaves the log to the whole-log reader). ``shrinking``: each piece's size is asked as it
    starts, and shrinks with what was spilled (as the pieces near a log's end do)."""
    tmp = tmp_path_factory.mktemp("s")
    path = _packed(tmp, members, None if cut is None else cut * reps, reps)
    if reps > 1:
        range_bytes, read_bytes = max(range_bytes, 50_000), max(read_bytes, 4_096)
    read = ReadOptions(sample=sample, max_line_bytes=300)
    want, want_errors = _whole(path, read)
    folder = tmp / "pieces"
    folder.mkdir()
    asked: list[int] = []

    def shrink(done: int) -> int:
        asked.append(done)
        return max(1, range_bytes - done // 3)

    spilled = _spilled(path, read, folder, shrink if shrinking else range_bytes, read_bytes)
    if shrinking and spilled is not None:
        assert asked[0] == 0 and asked == sorted(asked)  # at each piece's start, with the bytes before it
    if spilled is None:
        assert cut is not None and any("corrupt input" in s.reason for s in want_errors.samples)
        return
    got, errors = spilled
    assert got == want
    assert_same_errors(errors, want_errors)


def test_a_truncated_log_reports_its_damage_at_the_line_a_whole_reader_does(tmp_path: Path) -> None:
    lines = [
        json.dumps({"model": "m", "messages": [{"role": "user", "content": f"q{i} " * (i % 50)}]}) for i in range(9000)
    ]
    packed = gzip.compress(("\n".join(lines) + "\n").encode())
    path = tmp_path / "log.jsonl.gz"
    path.write_bytes(packed[: len(packed) * 3 // 4])
    read = ReadOptions()
    want_rows, want = _whole(path, read)
    (tmp_path / "p").mkdir()
    spilled = _spilled(path, read, tmp_path / "p", 20_000, 4_096)
    assert spilled is not None
    rows, got = spilled
    corrupt = [(s.line_no, s.reason) for s in want.samples if "corrupt input" in s.reason]
    assert len(corrupt) == 1 and corrupt == [(s.line_no, s.reason) for s in got.samples]
    assert rows == want_rows and corrupt[0][0] == len(rows) + 1 > 1_000


def test_other_formats_and_damaged_heads_are_not_spilled(tmp_path: Path) -> None:
    server = tmp_path / "vllm.log.gz"
    server.write_bytes(gzip.compress(b"INFO 01-01 00:00:00 [logger.py:39] Received request x: prompt: 'hi'\n"))
    bad = tmp_path / "bad.jsonl.gz"
    bad.write_bytes(gzip.compress(b'{"a": 1}\n' * 10)[:15])
    for path in (server, bad):
        with open_log(str(path)) as stream:
            assert sniffed_jsonl(stream, "auto", 1 << 20) is None


@pytest.mark.skipif(not EXAMPLE.is_file(), reason="example log not generated")
def test_workers_reading_pieces_of_one_gzip_log_make_the_record_of_one_reader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The example log (gzip) with a planted bad line, in pieces of at least 256 kB: the rows,
    errors and records of two processes are one process's, and no piece is left on disk."""
    lines = gzip.open(EXAMPLE, "rt", encoding="utf-8").read().splitlines()
    lines.insert(9, "{broken")
    log = tmp_path / "agent_log.jsonl.gz"
    log.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    source = SourceOptions(paths=(str(log),))
    made: list[ByteRange] = []

    def counted(*args: Any, **kwargs: Any) -> Iterator[ByteRange]:
        for piece in spill(*args, **kwargs):
            made.append(piece)
            yield piece

    monkeypatch.setattr("prefixplan.logs.pieces.spill", counted)
    two = Intake(IntakePlan(source, Executor(workers=2), 16))
    rows_two = [(r.line, r.block_keys.tobytes()) for r in two.rows()]
    assert two._planner is None and not os.path.exists(os.path.dirname(made[0].path))  # the folder went too
    assert len(made) >= 4 and sum(w["jobs"] for w in two.workers.values()) == len(made)
    assert not any(os.path.exists(p.path) for p in made)
    one = Intake(IntakePlan(source, Executor(workers=1), 16))
    rows_one = [(r.line, r.block_keys.tobytes()) for r in one.rows()]
    assert rows_two == rows_one and len(rows_one) == len(lines) - one.errors.count
    assert [(s.line_no, s.reason) for s in two.errors.samples] == [(s.line_no, s.reason) for s in one.errors.samples]
    assert_one_and_two_workers_agree(log, tmp_path)
