"""Seeded trace fuzz: small valid traces (written by ``prefixplan trace``) with bytes flipped at
seeded offsets of their data pages and footers, and seeded pairs of column and metadata changes.
Every case ends in exit 0 or 2 (``damaged trace FILE: ...``), never 70, never a traceback.

Bounded: 2 traces x (40 flip seeds + 12 footer seeds + 20 change pairs) x 2 commands, each run a
fraction of a second on a 2-core machine.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from prefixplan.cli.app import main
from prefixplan.errors import ExitCode
from tests.fuzztrace import META_MUTATIONS, column_mutations, flip_bytes, make_traces, read_trace, write_trace

COMMANDS = (
    ("simulate", "-q"),  # the columns a cache model reads, a batch at a time
    ("trace", "--export", "mooncake", "-q"),  # every column, row by row
)


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_traces(tmp_path_factory.mktemp("fuzz-traces"))


def _ends_cleanly(path: Path, capsys: pytest.CaptureFixture[str]) -> list[int]:
    codes = []
    for command, *flags in COMMANDS:
        args = [command, str(path), *flags]
        if command == "trace":
            args += ["--out", str(path.with_suffix(".jsonl"))]
        code = main(args)
        err = capsys.readouterr().err
        assert "Traceback" not in err, f"{path.name} {command}: {err[-2000:]}"
        assert code in (ExitCode.OK, ExitCode.USAGE), f"{path.name} {command}: exit {code}: {err[-2000:]}"
        if code == ExitCode.USAGE:
            assert err.startswith("error: ") and "hint: " in err, err
        codes.append(code)
    return codes


@pytest.mark.parametrize("kind", ["chat", "mooncake"])
def test_flipped_data_bytes_end_in_exit_0_or_2(
    traces: dict[str, Path], kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    refused = 0
    for seed in range(40):
        rng = random.Random(seed)
        path = flip_bytes(traces[kind], tmp_path / f"{kind}-flip-{seed}.parquet", rng, rng.choice([1, 4, 16, 64]))
        refused += ExitCode.USAGE in _ends_cleanly(path, capsys)
    assert refused  # the seeds reach damage the reader sees


@pytest.mark.parametrize("kind", ["chat", "mooncake"])
def test_damaged_footers_end_in_exit_0_or_2(
    traces: dict[str, Path], kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = traces[kind].read_bytes()
    footer = int.from_bytes(base[-8:-4], "little") + 8
    for seed in range(12):
        rng = random.Random(100 + seed)
        data = bytearray(base)
        if seed % 2:
            cut = rng.randrange(len(data) - footer, len(data) - 8)
            data = data[:cut] + data[cut + rng.randrange(1, 40) :]
        else:
            for _ in range(rng.choice([1, 3, 8])):
                data[rng.randrange(len(data) - footer, len(data))] ^= rng.randrange(1, 256)
        path = tmp_path / f"{kind}-footer-{seed}.parquet"
        path.write_bytes(bytes(data))
        _ends_cleanly(path, capsys)


@pytest.mark.parametrize("kind", ["chat", "mooncake"])
def test_seeded_pairs_of_changes_end_in_exit_0_or_2(
    traces: dict[str, Path], kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    columns = column_mutations()
    names = sorted(n for n in columns if n != "column dropped")  # the other change may need it
    metas = sorted(META_MUTATIONS)
    for seed in range(20):
        rng = random.Random(1000 + seed)
        table, meta = read_trace(traces[kind])
        picked = rng.sample(names, 2)
        for name in picked:
            table = columns[name](table, rng)
        changed = META_MUTATIONS[rng.choice(metas)](dict(meta)) if rng.random() < 0.5 else meta
        path = write_trace(tmp_path / f"{kind}-pair-{seed}.parquet", table, changed)
        assert ExitCode.USAGE in _ends_cleanly(path, capsys), picked
