"""Malformed log lines: counted with line number and reason, neighbours still read."""

from __future__ import annotations

import gzip
import io
import json
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prefixplan.core.types import Request
from prefixplan.errors import ExitCode, LogLineError
from prefixplan.logs import LineErrors, ReadOptions, iter_requests
from prefixplan.logs.open import iter_lines

GOOD = json.dumps({"model": "m", "messages": [{"role": "user", "content": "ok"}]})


def read_lines(tmp_path: Path, bad: str | bytes, **opts: Any) -> tuple[list[Request], LineErrors]:
    """A file: good line, ``bad`` on line 2, good line; returns what was read."""
    path = tmp_path / "log.jsonl"
    raw = bad if isinstance(bad, bytes) else bad.encode("utf-8")
    path.write_bytes(GOOD.encode() + b"\n" + raw + b"\n" + GOOD.encode() + b"\n")
    errors = LineErrors()
    return list(iter_requests([str(path)], ReadOptions(**opts), errors)), errors


def chat(messages: Any, **extra: Any) -> str:
    return json.dumps({"model": "m", "messages": messages, **extra})


CASES = [
    ('{"model": "m", "messages": [', "bad JSON: Expecting value at column 29"),
    ('{"model": "m" "x": 1}', "bad JSON: Expecting ',' delimiter at column 15"),
    ("[1, 2]", "not an object: line is a JSON list"),
    ('"just a string"', "not an object: line is a JSON string"),
    ('{"model": "m"}', "missing field: no messages, prompt, input or hash_ids"),
    (chat("hello"), "wrong type: messages is string, expected list"),
    (chat([]), "missing field: messages is empty"),
    (chat([{"role": "user", "content": 5}]), "wrong type: message 0 content is integer, expected string, list or null"),
    (chat([{"role": "user", "content": ["x"]}]), "wrong type: message 0 content part 0 is string, expected object"),
    (chat([{"content": "x"}]), "missing field: message 0 has no role"),
    (chat([{"role": 3, "content": "x"}]), "wrong type: message 0 role is integer, expected string"),
    (chat(["hi"]), "wrong type: message 0 is string, expected object"),
    (chat([{"role": "user", "content": None}]), "missing field: message 0 (user) has no content"),
    (chat([{"role": "user", "content": "x"}], tools={"a": 1}), "wrong type: tools is object, expected list"),
    (chat([{"role": "user", "content": "x"}], tools=["f"]), "wrong type: tool 0 is string, expected object"),
    (chat([{"role": "user", "content": "x"}], model=7), "wrong type: model is integer, expected string"),
    (
        chat([{"role": "user", "content": "x"}], time="soon"),
        "bad timestamp: field 'time': not a number or ISO-8601 time: 'soon'",
    ),
    ('{"model": "m", "prompt": [1, "2"]}', "wrong type: prompt ids not ints in [0, 2^32) (item 1 is string 2)"),
    ('{"model": "m", "prompt": [1, -2]}', "wrong type: prompt ids not ints in [0, 2^32) (item 1 is integer -2)"),
    ('{"model": "m", "prompt": {"a": 1}}', "wrong type: prompt is object, expected string or list"),
    ('{"hash_ids": "1,2"}', "wrong type: hash_ids is string, expected list"),
    ('{"hash_ids": [1, 2.5]}', "wrong type: hash_ids not ints (item 1 is number)"),
    (
        '{"system": "s", "messages": [{"role": "user", "content": [{"type": "text", "text": 1}]}]}',
        "wrong type: message 0 block 0 text is integer, expected string",
    ),
    (
        '{"system": 5, "messages": [{"role": "user", "content": "x"}]}',
        "wrong type: system is integer, expected string or list",
    ),
    ("[" * 100_000 + "]" * 100_000, "nesting too deep: JSON nested deeper than the parser allows"),
    (b"\x00\x01\xfe\xff garbage", "invalid UTF-8: byte 0xfe at offset 2"),
    (b'{"prompt": "caf\xe9"}', "invalid UTF-8: byte 0xe9 at offset 15"),
    (b'{"prompt": "\xed\xa0\x80"}', "invalid UTF-8: byte 0xed at offset 12"),  # an encoded surrogate
    (b"\x00\x01\x02", "bad JSON: Expecting value at column 1"),
]


@pytest.mark.parametrize(("bad", "reason"), CASES, ids=[r.split(":")[0] + f"-{i}" for i, (_, r) in enumerate(CASES)])
def test_malformed_line_reported_and_neighbours_read(tmp_path: Path, bad: str | bytes, reason: str) -> None:
    reqs, errors = read_lines(tmp_path, bad)
    assert [r.line_no for r in reqs] == [1, 3]
    assert errors.count == 1
    (sample,) = errors.samples
    assert (sample.line_no, sample.reason) == (2, reason)
    assert sample.source == str(tmp_path / "log.jsonl")
    assert errors.by_reason == {reason.split(":")[0]: 1}


def test_empty_and_blank_lines_are_skipped_silently(tmp_path: Path) -> None:
    reqs, errors = read_lines(tmp_path, "   \t ")
    assert [r.line_no for r in reqs] == [1, 3] and errors.count == 0


def test_strict_raises_with_line_number(tmp_path: Path) -> None:
    with pytest.raises(LogLineError) as info:
        read_lines(tmp_path, "not json", strict=True)
    err = info.value
    assert err.line_no == 2 and err.reason.startswith("bad JSON")
    assert str(err).startswith(f"{tmp_path / 'log.jsonl'}:2: bad JSON")
    assert err.exit_code == ExitCode.USAGE


def test_samples_capped_counts_not(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text("x\n" * 250 + GOOD + "\n")
    errors = LineErrors()
    reqs = list(iter_requests([str(path)], ReadOptions(), errors))
    assert len(reqs) == 1 and reqs[0].line_no == 251
    assert errors.count == 250 and len(errors.samples) == 100
    assert errors.samples[-1].line_no == 100
    assert "250 malformed lines (bad JSON: 250)" in errors.summary()


def _write_huge_line(path: Path, size: int, opener: Any = open) -> None:
    block = b"a" * (1 << 20)
    with opener(path, "wb") as f:
        f.write(GOOD.encode() + b"\n")
        f.write(b'{"prompt": "')
        for _ in range(size // len(block)):
            f.write(block)
        f.write(b'"}\n')
        f.write(GOOD.encode() + b"\n")


@pytest.mark.parametrize("compressed", [False, True])
def test_50mb_line_is_skipped_with_bounded_memory(tmp_path: Path, compressed: bool) -> None:
    path = tmp_path / ("huge.jsonl.gz" if compressed else "huge.jsonl")
    _write_huge_line(path, 50 << 20, (lambda p, m: gzip.open(p, m, compresslevel=1)) if compressed else open)
    errors = LineErrors()
    tracemalloc.start()
    try:
        reqs = list(iter_requests([str(path)], ReadOptions(max_line_bytes=4 << 20), errors))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [r.line_no for r in reqs] == [1, 3]
    (sample,) = errors.samples
    assert sample.line_no == 2
    assert sample.reason == f"line too long: {(50 << 20) + 14} bytes > max_line_bytes {4 << 20} (skipped)"
    assert peak < 12 << 20, f"peak {peak} bytes: the long line was not streamed"


def test_line_just_under_the_limit_is_read(tmp_path: Path) -> None:
    line = json.dumps({"prompt": "x" * 5000})
    path = tmp_path / "l.jsonl"
    path.write_text(line + "\n" + line + "x\n")
    errors = LineErrors()
    reqs = list(iter_requests([str(path)], ReadOptions(max_line_bytes=len(line)), errors))
    assert [r.line_no for r in reqs] == [1]
    assert errors.samples[0].line_no == 2 and errors.samples[0].reason.startswith("line too long")


@settings(max_examples=200, deadline=None)
@given(
    data=st.binary(max_size=300).map(lambda b: b.replace(b"\x00", b"\n")),
    chunk=st.integers(1, 40),
    limit=st.integers(1, 60),
)
def test_iter_lines_matches_split_oracle(data: bytes, chunk: int, limit: int) -> None:
    pieces = data.split(b"\n")
    if pieces and pieces[-1] == b"":
        pieces.pop()
    expected = []
    for n, piece in enumerate(pieces, 1):
        stripped = piece[:-1] if piece.endswith(b"\r") else piece
        expected.append((n, stripped if len(piece) <= limit else None, len(piece)))
    got = [(r.line_no, r.data, r.size) for r in iter_lines(io.BytesIO(data), limit, chunk)]
    assert got == expected
