"""Hostile request logs: huge token-id lists, huge Parquet and CSV rows, tables without rows,
damaged files, values quoted back in messages, credentials in tokenizer specs and log URLs.

Each case ends in exit 0 (the bad record counted with its file and line) or 2 (a clear message),
never in a traceback or exit 70, and what the log reader allocates is bounded by the per-record
limits of ``prefixplan.logs.limits``.
"""

from __future__ import annotations

import gzip
import json
import random
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from prefixplan.cli.app import main
from prefixplan.errors import ExitCode, UsageError
from prefixplan.logs import LineErrors, ReadOptions, iter_requests, limits
from prefixplan.logs.intlist import TooManyItems, scan_int_list
from prefixplan.logs.pyrepr import ReprError, parse_value
from prefixplan.logs.vllm_log import VLLMLogReader
from prefixplan.render import RenderSet, check_spec

DATA = Path(__file__).resolve().parent / "data" / "logs"
PREFIX = "(APIServer pid=7) DEBUG 12-01 08:31:12 [entrypoints/serve/utils/request_logger.py:55]"
INFO = "(APIServer pid=7) INFO 12-01 08:31:12 [entrypoints/serve/utils/request_logger.py:65]"
CHAT = {"model": "m", "messages": [{"role": "system", "content": "Be brief. " * 30}, {"role": "user", "content": "hi"}]}


def details(rid: str, ids: str) -> str:
    return f"{PREFIX} Request {rid} details: prompt: 'p', prompt_token_ids: {ids}, prompt_embeds shape: None."


def received(rid: str) -> str:
    return f"{INFO} Received request {rid}: params: SamplingParams(n=1, max_tokens=4), lora_request: None."


def id_list(ids: np.ndarray) -> str:
    return "[" + ", ".join(map(str, ids.tolist())) + "]"


def cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(args)
    out = capsys.readouterr()
    assert "Traceback" not in out.out + out.err
    return code, out.out, out.err


def record(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


# -- L1: token-id lists --------------------------------------------------------------------------


def test_three_million_token_ids_parse_in_bounded_memory() -> None:
    n = 3_000_000
    ids = np.random.default_rng(1).integers(0, 151_000, n)
    line = details("chatcmpl-big", id_list(ids))
    reader = VLLMLogReader("big.log", "forced", max_tokens=4_000_000)
    tracemalloc.start()
    try:
        found = list(reader.feed(1, line)) + list(reader.feed(2, received("chatcmpl-big"))) + list(reader.finish())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    (req,) = found
    assert peak < 40 * n, f"{peak / n:.1f} bytes an id"
    assert np.array_equal(np.asarray(req.prompt_ids, dtype=np.uint32), ids) and req.input_length == n
    assert req.prompt_ids == tuple(ids.tolist())  # compares like the tuple it stands for


def test_a_list_over_the_limit_is_refused_before_it_is_read() -> None:
    text = "[" + ", ".join(["151643"] * 3_000_000) + "]"
    tracemalloc.start()
    try:
        with pytest.raises(TooManyItems) as exc:
            scan_int_list(text, 0, 2_000_000)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert exc.value.count == 3_000_000 and peak < 2**20


@pytest.mark.parametrize("engine", ["vllm-log", "sglang-log"])
def test_a_request_over_the_token_limit_is_a_malformed_line(
    tmp_path: Path, engine: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(limits, "MAX_RECORD_TOKENS", 1000)
    ok, big = id_list(np.arange(1, 300)), id_list(np.arange(1, 5001))
    if engine == "vllm-log":
        lines = [details("chatcmpl-a", ok), received("chatcmpl-a"), details("chatcmpl-b", big), received("chatcmpl-b")]
        lines += [details("chatcmpl-c", ok), received("chatcmpl-c")]
    else:
        lines = [
            f"[2025-12-01 09:00:0{k}] Receive: obj=GenerateReqInput(rid='r{k}', input_ids={ids}, "
            "sampling_params={'max_new_tokens': 4})"
            for k, ids in enumerate([ok, big, ok])
        ]
    log = tmp_path / "server.log"
    log.write_text("\n".join(lines) + "\n")
    out = tmp_path / "a.json"
    code, _, err = cli(["analyze", str(log), "--log-format", engine, "--no-store", "-q", "--json", str(out)], capsys)
    assert code == ExitCode.OK, err
    doc = record(out)
    assert doc["summary"]["requests"] == 2 and doc["summary"]["malformed_lines"] == 1
    (sample,) = doc["errors"]["samples"]
    assert sample["line"] == (3 if engine == "vllm-log" else 2)
    assert sample["reason"].startswith("too many tokens: ")
    assert "5,000" in sample["reason"] and "max_record_tokens 1,000" in sample["reason"]


@pytest.mark.parametrize(
    "text, value",
    [
        ("[1, 2, 3]", [1, 2, 3]),
        ("[1,2]", [1, 2]),
        ("[ 5 ]", [5]),
        ("[-1, 2]", [-1, 2]),
        ("[]", []),
        ("[[1, 2], [3]]", [[1, 2], [3]]),
        ("[1, 'a']", [1, "a"]),
        ("[12345678901234567890]", [12345678901234567890]),
    ],
)
def test_int_lists_read_as_before(text: str, value: list[Any]) -> None:
    got, end = parse_value(text, 0)
    as_list = [v.tolist() if isinstance(v, np.ndarray) else v for v in got] if isinstance(got, list) else got.tolist()
    assert as_list == value and end == len(text)


@pytest.mark.parametrize("text", ["[1 2]", "[1,,2]", "[,1]", "[1-2]", "[1, 2"])
def test_malformed_int_lists_are_errors(text: str) -> None:
    with pytest.raises(ReprError):
        parse_value(text, 0)


def test_int_lists_read_the_same_in_any_slices(monkeypatch: pytest.MonkeyPatch) -> None:
    from prefixplan.logs import intlist

    rng = random.Random(5)
    texts = []
    for _ in range(50):
        values = [rng.randrange(-(10**17), 10**17) for _ in range(rng.randrange(1, 60))]
        texts.append((values, "[" + rng.choice([",", ", ", " ,  "]).join(map(str, values)) + "]"))
    monkeypatch.setattr(intlist, "CHUNK_CHARS", 32)  # a few items a slice
    for values, text in texts:
        got = scan_int_list(text, 0, 10**6)
        assert got is not None and got[0].tolist() == values and got[1] == len(text)


def test_an_escaped_prompt_string_is_read_without_state_per_escape() -> None:
    text = "'" + "ab\\n" * 300_000 + "'"
    tracemalloc.start()
    try:
        value, end = parse_value(text, 0)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert value == "ab\n" * 300_000 and end == len(text)
    assert peak < 16 * len(text)  # the literal's decoding; the old regular expression kept ~120 bytes an escape


# -- L2: one byte limit per record, in every reader ----------------------------------------------


def _parquet_log(path: Path, contents: list[str]) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [{"model": "m", "messages": [{"role": "user", "content": c}]} for c in contents]
    pq.write_table(pa.Table.from_pylist(rows), path, compression="zstd")
    return path


def test_a_huge_parquet_row_is_refused_before_it_becomes_python(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from prefixplan.logs import tables

    monkeypatch.setattr(limits, "MAX_RECORD_BYTES", 2000)
    made: list[int] = []
    values = tables._values

    def spy(column: Any) -> list[Any]:
        out = values(column)
        made.extend(len(json.dumps(v)) for v in out)
        return out

    monkeypatch.setattr(tables, "_values", spy)
    log = _parquet_log(tmp_path / "log.parquet", ["hello", "x" * 50_000, "bye"])
    assert log.stat().st_size < 5000  # zstd: 50 KB of text in a few hundred bytes
    out = tmp_path / "a.json"
    code, _, err = cli(["analyze", str(log), "--no-store", "-q", "--json", str(out), "--no-rag-whatif"], capsys)
    assert code == ExitCode.OK, err
    doc = record(out)
    assert doc["summary"]["requests"] == 2
    (sample,) = doc["errors"]["samples"]
    assert sample["line"] == 2 and sample["reason"].startswith("record too large: row of 50,0")
    assert sample["reason"].endswith("bytes > max_line_bytes 2,000 (skipped)")
    assert made and max(made) < 2000  # the big cell never became a Python string


def test_row_sizes_of_nested_parquet_columns() -> None:
    import pyarrow as pa

    from prefixplan.logs.rowsize import row_bytes

    table = pa.Table.from_pylist(
        [
            {"messages": [{"role": "user", "content": "abc"}], "n": 1, "tags": ["x"]},
            {"messages": None, "n": None, "tags": []},
            {
                "messages": [{"role": "system", "content": "y" * 100}, {"role": "user", "content": ""}],
                "n": 3,
                "tags": None,
            },
        ]
    )
    table = pa.concat_tables([table, table.slice(1)]).combine_chunks()
    names = table.column_names
    sizes = row_bytes([table.column(n).chunk(0) for n in names], table.num_rows).tolist()
    assert sizes == [4 + 3 + 8 + 1, 0, 6 + 100 + 4 + 8, 0, 6 + 100 + 4 + 8]
    dict_col = pa.array(["a", "bbbb", None, "a"]).dictionary_encode()
    assert row_bytes([dict_col], 4).tolist() == [1, 4, 0, 1]


def test_csv_lines_and_rows_over_the_limit_are_skipped_with_their_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(limits, "MAX_RECORD_BYTES", 2000)
    tall = "\n".join(["y" * 100] * 30)
    log = tmp_path / "log.csv"
    log.write_text(
        "prompt,model\n"
        "hello there,m\n"
        f"{'z' * 5000},m\n"  # one line past the limit
        "hello again,m\n"
        f'"{tall}",m\n'  # short lines, a row past the limit
        "goodbye,m\n"
    )
    errors = LineErrors()
    reqs = list(iter_requests([str(log)], ReadOptions(), errors))
    first_tall = 5
    assert [r.line_no for r in reqs] == [2, 4, first_tall + 30]
    reasons = {s.line_no: s.reason for s in errors.samples}
    assert reasons[3].startswith("line too long: 5,") and reasons[3].endswith("max_line_bytes 2,000 (skipped)")
    assert reasons[first_tall].startswith("record too large: row of 3,")


@pytest.mark.parametrize("kind", ["jsonl", "vllm-log", "csv", "parquet"])
def test_every_reader_applies_the_same_byte_limit(
    tmp_path: Path, kind: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(limits, "MAX_RECORD_BYTES", 4000)
    big = "w" * 6000
    if kind == "jsonl":
        log = tmp_path / "log.jsonl"
        log.write_text("\n".join(json.dumps({**CHAT, "user": u}) for u in ["a", big, "b"]) + "\n")
    elif kind == "vllm-log":
        log = tmp_path / "server.log"
        ok = id_list(np.arange(1, 200))
        lines = [details("chatcmpl-a", ok), received("chatcmpl-a"), details("chatcmpl-b", ok) + big]
        log.write_text("\n".join([*lines, details("chatcmpl-c", ok), received("chatcmpl-c")]) + "\n")
    elif kind == "csv":
        log = tmp_path / "log.csv"
        cell = json.dumps(CHAT["messages"]).replace('"', '""')
        log.write_text(f'messages,model,user\n"{cell}",m,a\n"{cell}",m,{big}\n"{cell}",m,b\n')
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        log = tmp_path / "log.parquet"
        pq.write_table(pa.Table.from_pylist([{**CHAT, "user": u} for u in ["a", big, "b"]]), log)
    out = tmp_path / "a.json"
    args = ["analyze", str(log), "--no-store", "-q", "--json", str(out), "--no-rag-whatif", "--no-simulate"]
    code, _, err = cli([*args, "--log-format", kind] if kind == "vllm-log" else args, capsys)
    assert code == ExitCode.OK, err
    doc = record(out)
    (sample,) = doc["errors"]["samples"]
    assert doc["summary"]["malformed_lines"] == 1 and sample["line"] == (3 if kind in ("vllm-log", "csv") else 2)
    assert sample["reason"].split(":")[0] in ("line too long", "record too large")
    assert "max_line_bytes 4" in sample["reason"]


# -- C1: empty tables, damaged files, values quoted in messages ------------------------------------


@pytest.mark.parametrize("kind", ["csv", "parquet"])
def test_a_table_with_a_header_and_no_rows_is_an_error(
    tmp_path: Path, kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / f"empty.{kind}"
    if kind == "csv":
        log.write_text("messages,model\n")
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.table({"messages": pa.array([], pa.string()), "model": pa.array([], pa.string())}), log)
    code, _, err = cli(["analyze", str(log), "--no-store", "-q"], capsys)
    assert code == ExitCode.USAGE
    assert f"no requests read from {log}: {log} has a header and no rows (2 columns)" in err


def test_a_damaged_parquet_request_log_is_reported_as_a_log(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = _parquet_log(tmp_path / "log.parquet", ["hello", "bye"])
    data = bytearray(log.read_bytes())
    footer = int.from_bytes(data[-8:-4], "little")
    for at in range(len(data) - 8 - footer, len(data) - 8, 7):
        data[at] ^= 0x5A
    log.write_bytes(bytes(data))
    code, _, err = cli(["simulate", str(log), "-q"], capsys)
    assert code == ExitCode.USAGE
    assert f"no requests read from {log}: {log}:1: corrupt input: not a readable Parquet file" in err
    assert "trace" not in err


def test_a_truncated_engine_log_says_it_is_damaged(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = gzip.decompress((DATA / "vllm-0.32-debug.log.gz").read_bytes()).splitlines(keepends=True)
    head = b"".join(lines[: next(i for i, line in enumerate(lines) if b" details: " in line)])
    packed = gzip.compress(head)
    log = tmp_path / "server.log.gz"
    log.write_bytes(packed[: len(packed) * 2 // 3])
    code, _, err = cli(["analyze", str(log), "--no-store", "-q"], capsys)
    assert code == ExitCode.USAGE
    assert f"no requests read from {log}: the input is damaged ({log}:" in err
    assert "corrupt input: gzip data corrupt or truncated" in err and "it is truncated or damaged" in err


HUGE = "K" * 1_000_000


@pytest.mark.parametrize(
    "line",
    [
        json.dumps({"model": "m", "messages": [{"role": HUGE, "content": "x"}]}),
        json.dumps({"system": "s", "messages": [{"role": HUGE, "content": "x"}]}),
        json.dumps({"id": "o1", "type": "GENERATION", HUGE: 1}),
        json.dumps({"prefix_key": HUGE, "model": "m", "messages": [{"role": "user", "content": 5}]}),
        json.dumps({"model": "m", "messages": [{"role": "user", "content": "x"}], "time": HUGE}),
    ],
    ids=["chat role", "anthropic role", "langfuse field name", "prefix_key", "timestamp"],
)
def test_a_quoted_value_is_cut(tmp_path: Path, line: str) -> None:
    log = tmp_path / "log.jsonl"
    log.write_text(json.dumps(CHAT) + "\n" + line + "\n")
    errors = LineErrors()
    list(iter_requests([str(log)], ReadOptions(), errors))
    (sample,) = errors.samples
    assert sample.line_no == 2 and len(sample.reason) <= limits.MAX_REASON_CHARS
    assert "K" * (limits.MAX_QUOTED_CHARS + 1) not in sample.reason


def test_an_engine_log_request_id_is_cut_in_messages(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text(
        details("chatcmpl-a", "[1, 2]")
        + "\n"
        + received("chatcmpl-a")
        + "\n"
        + f"{INFO} Received request {HUGE}: params: SamplingParams(n=1), lora_request: None.\n"
    )
    errors = LineErrors()
    list(iter_requests([str(log)], ReadOptions(format="vllm-log"), errors))
    (sample,) = errors.samples
    assert sample.reason.startswith("no prompt: request KKK") and len(sample.reason) < 500


def test_line_errors_cut_any_long_reason() -> None:
    errors = LineErrors()
    errors.add("a.log", 3, "render: " + HUGE)
    (sample,) = errors.samples
    assert len(sample.reason) <= limits.MAX_REASON_CHARS + 30 and sample.reason.endswith("chars)")


# -- S1: credentials in URLs ----------------------------------------------------------------------


SECRET = "s3cr3t-9f8e7d"


@pytest.mark.parametrize(
    "flags",
    [
        ["-t", f"vllm:http://admin:{SECRET}@127.0.0.1:9"],
        ["--tokenizer", f"sglang:admin:{SECRET}@127.0.0.1:9"],
        ["-t", f"vllm:http://127.0.0.1:9/?api_key={SECRET}"],
        ["--tokenizer-map", f"acme-chat=vllm:https://u:{SECRET}@gpu-1:8000"],
    ],
    ids=["vllm user:password", "sglang without scheme", "query string", "tokenizer map"],
)
@pytest.mark.parametrize("command", ["analyze", "simulate", "trace"])
def test_a_tokenizer_url_with_credentials_is_refused_and_never_shown(
    tmp_path: Path, flags: list[str], command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "log.jsonl"
    log.write_text(json.dumps({**CHAT, "model": "acme-chat"}) + "\n")
    out = tmp_path / "out.json"
    args = [command, str(log), *flags, "-q"]
    args += ["--out", str(tmp_path / "t.parquet")] if command == "trace" else ["--json", str(out)]
    code, stdout, err = cli(args, capsys)
    assert code == ExitCode.USAGE
    assert "the URL carries credentials" in err and "PREFIXPLAN_API_KEY" in err
    assert SECRET not in stdout + err
    assert not out.exists() and not (tmp_path / "t.parquet").exists()
    for stored in tmp_path.rglob("*"):
        assert not stored.is_file() or SECRET.encode() not in stored.read_bytes()


def test_check_spec_passes_plain_specs_and_names_the_refused_one() -> None:
    for spec in ["mistral:nemo", "hf:Qwen/Qwen3-8B", "vllm:http://gpu-1:8000", "tiktoken:o200k_base", "auto"]:
        check_spec(spec)
    with pytest.raises(UsageError, match=r"--tokenizer-map m=vllm:http://h:1: the URL carries credentials") as exc:
        RenderSet(None, {"m": f"vllm:http://a:{SECRET}@h:1"})
    assert SECRET not in str(exc.value) + str(exc.value.hint)


def test_a_log_url_with_credentials_never_shows_them(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "a.json"
    code, stdout, err = cli(
        ["analyze", f"https://reader:{SECRET}@127.0.0.1:9/logs/day.jsonl", "--json", str(out), "-q"], capsys
    )
    assert code == ExitCode.USAGE and "127.0.0.1:9/logs/day.jsonl" in err
    assert SECRET not in stdout + err
    for stored in tmp_path.rglob("*"):
        assert not stored.is_file() or SECRET.encode() not in stored.read_bytes()
