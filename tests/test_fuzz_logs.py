"""Seeded fuzz: thousands of lines of mixed malformed shapes; every planted line is reported with
its number, no good line is lost, and no command crashes (exit 70)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from prefixplan.cli.app import main
from prefixplan.errors import ExitCode
from prefixplan.logs import LineErrors, ReadOptions, iter_requests
from tests.fuzzlog import BAD_CHAT, BAD_MOONCAKE, write_fuzz_log


class _EveryLine(LineErrors):
    """LineErrors that keeps every reported line number (the default keeps 100 samples)."""

    def __init__(self) -> None:
        super().__init__()
        self.reported: dict[int, str] = {}

    def add(self, source: str, line_no: int, reason: str) -> None:
        super().add(source, line_no, reason)
        self.reported[line_no] = reason


@pytest.mark.parametrize("kind, shapes", [("chat", BAD_CHAT), ("mooncake", BAD_MOONCAKE)])
@pytest.mark.parametrize("seed", [1, 2])
def test_every_planted_line_is_reported_with_its_number(tmp_path: Path, kind: str, shapes: dict, seed: int) -> None:
    log = write_fuzz_log(tmp_path / f"{kind}.jsonl", 2500, seed=seed, kind=kind)
    assert set(log.planted.values()) == set(shapes)  # the run covers every shape
    errors = _EveryLine()
    good = [r.line_no for r in iter_requests([str(log.path)], ReadOptions(), errors)]
    assert set(errors.reported) == set(log.planted)
    assert good == [n for n in range(1, log.lines + 1) if n not in log.planted]
    assert errors.count == len(log.planted)


@pytest.mark.parametrize("kind", ["chat", "mooncake"])
def test_analyze_and_simulate_finish_and_count_the_bad_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    log = write_fuzz_log(tmp_path / f"{kind}.jsonl", 2000, seed=11, kind=kind)
    record = tmp_path / "a.json"
    assert main(["analyze", str(log.path), "--no-store", "--json", str(record), "-q"]) == ExitCode.OK
    summary = json.loads(record.read_text())["summary"]
    assert summary["malformed_lines"] == len(log.planted)
    assert summary["requests"] == log.lines - len(log.planted)
    sim = tmp_path / "s.json"
    assert main(["simulate", str(log.path), "--json", str(sim), "-q"]) == ExitCode.OK
    assert json.loads(sim.read_text())["line_errors"] == len(log.planted)
    assert "Traceback" not in capsys.readouterr().err


def test_a_plain_file_that_looks_gzipped_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fake = tmp_path / "log.jsonl"
    fake.write_bytes(b"\x1f\x8b" + b'{"prompt": "not really gzip"}\n' * 10)
    code = main(["analyze", str(fake), "--no-store", "-q"])
    err = capsys.readouterr().err
    assert code == ExitCode.USAGE and "Traceback" not in err
    assert "log.jsonl:1: corrupt input: the file starts with gzip's magic bytes but is not gzip data" in err
