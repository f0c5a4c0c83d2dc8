"""Damaged and inconsistent trace files: each is refused as a damaged trace (exit 2, ``damaged trace
FILE: reason`` naming the column or field), never read into wrong results, never a traceback.

The cases are the hostile-input campaign's: bytes flipped in data pages, negative ``prompt_tokens``,
an out-of-range ``seg_kind``, a short ``seg_start``, metadata nested 100,000 deep, a column of the
wrong type; ``keys_units`` 0 (which gave a hit rate of 0.032 instead of 0.542), NaN times, null
columns, a block size of 0, -16 or ``"16"``.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from prefixplan.cli.app import main
from prefixplan.errors import DamagedTraceError, ExitCode, InputError
from prefixplan.trace.parquet import TraceFile, is_trace_file
from tests.fuzztrace import META_MUTATIONS, column_mutations, make_traces, read_trace, write_trace

COLUMN_CASES = {
    "negative prompt_tokens": "column prompt_tokens outside 0..2^40",
    "keys_units 0": "column keys_units differs from block_size 16 / token_scale",
    "keys_units 3": "column keys_units differs from block_size 16 / token_scale",
    "token_scale 0": "column token_scale outside 1..2^40",
    "units past the keys": "column block_keys does not hold units / keys_units keys in a row",
    "time NaN": "column time holds NaN",
    "time infinite": "column time holds NaN, infinity",
    "time 1e300": "column time holds NaN, infinity or a time past ±1e+11 s",
    "null prompt_tokens": "column prompt_tokens has nulls",
    "null units": "column units has nulls",
    "null namespace": "column namespace has nulls",
    "prompt_tokens as text": "column prompt_tokens is string, expected int64",
    "exact as int": "column exact is int64, expected bool",
    "seg_kind out of range": "column seg_kind outside 0..8",
    "seg_kind negative": "column seg_kind outside 0..8",
    "seg_start short": "columns seg_kind and seg_start differ in length in a row",
    "seg_end past units": "columns seg_start/seg_end outside 0..units of their row",
    "seg_start after seg_end": "columns seg_start/seg_end outside 0..units of their row",
    "seg_name short": "columns seg_kind and seg_name differ in length in a row",
    "block_keys missing one": "column block_keys does not hold units / keys_units keys in a row",
    "block key even": "block_keys holds an even value",
    "boundaries falling": "columns boundaries and boundary_keys differ in length in a row",
    "boundary_keys short": "columns boundaries and boundary_keys differ in length in a row",
    "null block key": "column block_keys holds a null item",
    "index negative": "column index outside 0..2^40",
    "gw_key_tokens past units": "column gw_key_tokens past the prompt's units",
    "line huge": "column line outside 0..2^40",
    "column dropped": "trace columns missing: ",
}
ROWS_ONLY = frozenset({"boundaries falling", "boundary_keys short", "gw_key_tokens past units"})
"""Columns only a run that reads whole rows reads (the Anthropic model, routing, --trace-out, export)."""
META_CASES = {
    "block_size 0": "metadata block_size: expected a positive integer, found 0",
    "block_size -16": "metadata block_size: expected a positive integer, found -16",
    "block_size text": 'metadata block_size: expected a positive integer, found "16"',
    "block_size float": "metadata block_size: expected a positive integer, found 16.5",
    "block_size null": "metadata block_size: expected a positive integer, found null",
    "requests wrong": "metadata requests: expected the file's 40 rows, found 47",
    "line_errors a list": "metadata line_errors: expected an object",
    "line_errors count text": 'metadata line_errors.count: expected a count, found "many"',
    "tokenizers an object": "metadata tokenizers: expected a list of tokenizer objects",
    "tokenizer probe ids text": "metadata tokenizers: expected a list of tokenizer objects",
    "text previews a list": "metadata text.previews: expected an object of [kind, text, tokens]",
    "text parts not base64": "metadata text.parts.a: not base64",
    "text breakers of numbers": "metadata text.breakers: expected a list of breaker objects",
    "granularity a string": "metadata granularity: expected an object",
    "inputs paths numbers": "metadata inputs: expected an object whose paths are strings",
    "format missing": "its metadata does not name the prefixplan-trace format",
    "nested 100k deep": "metadata nested deeper than 32 levels",
    "nested 40 deep": "metadata nested deeper than 32 levels",
    "not JSON": "metadata is not JSON",
    "not an object": "its metadata does not name the prefixplan-trace format",
}


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_traces(tmp_path_factory.mktemp("traces"))


def _refused(path: Path, fragment: str, capsys: pytest.CaptureFixture[str], command: str = "simulate") -> None:
    args = [command, str(path), "-q"] + (["--no-store"] if command == "analyze" else [])
    if command == "trace":
        args += ["--export", "mooncake", "--out", str(path.with_suffix(".jsonl"))]
    code = main(args)
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert code == ExitCode.USAGE, err
    assert f"error: damaged trace {path}: {fragment}" in err, err
    assert "hint: write the trace again from its log" in err


def test_the_base_traces_read(traces: dict[str, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    for path in traces.values():
        out = tmp_path / "s.json"
        assert main(["simulate", str(path), "-q", "--json", str(out)]) == ExitCode.OK
        assert json.loads(out.read_text())["runs"]
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.parametrize("name", sorted(COLUMN_CASES))
def test_a_column_no_writer_writes_is_refused(
    traces: dict[str, Path], name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = traces["chat"]
    table, meta = read_trace(base)
    damaged = write_trace(tmp_path / "damaged.parquet", column_mutations()[name](table, random.Random(name)), meta)
    fragment = COLUMN_CASES[name]
    if name not in ROWS_ONLY:
        _refused(damaged, fragment, capsys)  # the columns simulate reads, a batch at a time
    _refused(damaged, fragment, capsys, "trace")  # every column, through rows


@pytest.mark.parametrize("name", sorted(META_CASES))
def test_metadata_no_writer_writes_is_refused(
    traces: dict[str, Path], name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    table, meta = read_trace(traces["chat"])
    damaged = write_trace(tmp_path / "damaged.parquet", table, META_MUTATIONS[name](dict(meta)))
    _refused(damaged, META_CASES[name], capsys, "analyze")


def test_keys_units_zero_no_longer_gives_a_wrong_hit_rate(
    traces: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The campaign's case: keys_units 0 read silently into a hit rate of 0.032 (0.542 right)."""
    table, meta = read_trace(traces["chat"])
    damaged = write_trace(tmp_path / "ku0.parquet", column_mutations()["keys_units 0"](table, random.Random(0)), meta)
    with pytest.raises(DamagedTraceError, match="keys_units differs"):
        list(TraceFile(damaged).columns())
    _refused(damaged, "column keys_units differs from block_size 16 / token_scale", capsys)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_flipped_bytes_in_data_pages_are_a_damaged_trace_or_read(
    traces: dict[str, Path], seed: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.fuzztrace import flip_bytes

    damaged = flip_bytes(traces["chat"], tmp_path / "flipped.parquet", random.Random(seed), 24)
    code = main(["trace", str(damaged), "--export", "mooncake", "--out", str(tmp_path / "m.jsonl"), "-q"])
    err = capsys.readouterr().err
    assert "Traceback" not in err and code in (ExitCode.OK, ExitCode.USAGE)
    if code == ExitCode.USAGE:
        assert f"error: damaged trace {damaged}: " in err


def test_a_damaged_footer_that_names_the_trace_is_a_damaged_trace(
    traces: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = bytearray(traces["mooncake"].read_bytes())
    footer = int.from_bytes(data[-8:-4], "little")
    start = len(data) - 8 - footer
    for at in range(start, start + 40):  # the footer's first fields, before the trace key
        data[at] ^= 0xFF
    damaged = tmp_path / "footer.parquet"
    damaged.write_bytes(bytes(data))
    assert is_trace_file(damaged)
    _refused(damaged, "not a readable Parquet file (", capsys)


def test_a_trace_message_quotes_a_huge_value_only_in_part(traces: dict[str, Path], tmp_path: Path) -> None:
    table, meta = read_trace(traces["mooncake"])
    for field in ("version", "hash", "segment_kinds", "block_size"):
        damaged = write_trace(tmp_path / f"{field}.parquet", table, {**meta, field: "9" * 1_000_000})
        with pytest.raises(InputError) as exc:
            TraceFile(damaged)
        assert len(str(exc.value)) < 600 + len(str(damaged))


def test_a_null_time_is_read_and_a_nan_time_refused(
    traces: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A null time is allowed (no time logged), NaN is not: the two must not read alike."""
    import pyarrow as pa

    table, meta = read_trace(traces["mooncake"])
    nulls = write_trace(
        tmp_path / "nulls.parquet", table.set_column(1, "time", pa.nulls(len(table), pa.float64())), meta
    )
    assert main(["simulate", str(nulls), "-q"]) == ExitCode.OK
    nan = write_trace(
        tmp_path / "nan.parquet", table.set_column(1, "time", pa.array([float("nan")] * len(table))), meta
    )
    _refused(nan, "column time holds NaN", capsys)


@pytest.mark.parametrize(
    "start, end, chars, fragment",
    [
        (2, 9, 7, ""),
        (5, 3, 7, "columns chunk_start/chunk_end outside 0..units of their row, or ending before they start"),
        (0, 2**30, 7, "columns chunk_start/chunk_end outside 0..units of their row"),
        (2, 9, -1, "column chunk_chars below 0"),
    ],
)
def test_document_chunks_lie_within_their_request(
    traces: dict[str, Path], start: int, end: int, chars: int, fragment: str, tmp_path: Path
) -> None:
    import pyarrow as pa

    table, meta = read_trace(traces["chat"])
    n = len(table)

    def one(value: int, type_: pa.DataType) -> pa.Array:
        return pa.array([[value]] + [[]] * (n - 1), pa.list_(type_))

    for name, value, type_ in (
        ("chunk_start", start, pa.int32()),
        ("chunk_end", end, pa.int32()),
        ("chunk_msg", 1, pa.int32()),
        ("chunk_hash", 12345, pa.uint64()),
        ("chunk_chars", chars, pa.int32()),
    ):
        table = table.set_column(table.schema.get_field_index(name), name, one(value, type_))
    path = write_trace(tmp_path / "chunks.parquet", table, meta)
    if not fragment:
        assert sum(c.n for c in TraceFile(path).columns()) == n
        return
    with pytest.raises(DamagedTraceError, match=fragment.replace(".", r"\.")):
        list(TraceFile(path).columns())
