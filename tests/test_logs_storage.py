"""Logs where they live: inputs on an S3-compatible server and over http read like the same files on
disk, and Parquet / CSV request logs with a column mapping read like the JSON lines they hold.

The S3 server is moto's standalone server, started here in its own process on 127.0.0.1 (a free
port); reads go through s3fs with the credentials and endpoint taken from the AWS environment
variables, as they would in production. When the server cannot start the S3 tests are skipped
with the reason; nothing else depends on it.
"""

from __future__ import annotations

import csv
import gzip
import http.server
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from prefixplan.cli.app import main
from prefixplan.errors import InputError, UsageError
from prefixplan.logs import LineErrors, ReadOptions, expand_paths, iter_requests
from tests.s3_server import SECRET, moto_server

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "agent_log.jsonl.gz"
BUCKET = "logs"
pytestmark = pytest.mark.skipif(not EXAMPLE.is_file(), reason="example log not generated")


# -- helpers -----------------------------------------------------------------------------------


def _analyze(spec: str | list[str], tmp: Path, *extra: str) -> dict[str, Any]:
    out = tmp / f"record-{time.monotonic_ns()}.json"
    specs = [spec] if isinstance(spec, str) else spec
    rc = main(["analyze", *specs, "--no-store", "-q", "--workers", "1", "--json", str(out), *extra])
    assert rc == 0
    record = json.loads(out.read_text())
    record.pop("created")  # run metadata: when, how long
    record["summary"].pop("elapsed_s")
    return record


def _as_local(record: dict[str, Any], remote_prefix: str, local_prefix: str) -> dict[str, Any]:
    """``record`` with every input name moved from ``remote_prefix`` to ``local_prefix``."""
    text = json.dumps(record).replace(json.dumps(remote_prefix)[1:-1], json.dumps(local_prefix)[1:-1])
    return json.loads(text)


def _chat_line(system: int, user: int, turn: int) -> dict[str, Any]:
    prompt = f"You are assistant number {system}. " + "Follow the policy carefully. " * 40
    return {
        "timestamp": 1_700_000_000 + 10 * turn + user,
        "request": {
            "model": "m",
            "user": f"u{user}",
            "messages": [
                {"role": "system", "content": prompt},
                {"role": "user", "content": f"question {turn} from user {user}"},
            ],
        },
    }


def _multi_file_log(folder: Path) -> list[str]:
    """Six small files, two gzip, three with malformed lines, plus a hidden file and a subfolder
    that a folder expansion leaves out; returns the file names in sorted order."""
    folder.mkdir(parents=True)
    names = []
    for k in range(6):
        lines = [json.dumps(_chat_line(k % 2, u, k * 10 + u)) for u in range(8)]
        if k in (1, 3, 4):
            lines.insert(2 + k % 3, '{"request": {"model": "m", "messages": [')  # bad JSON
            lines.insert(5, "[1, 2, 3]")  # not an object
        data = ("\n".join(lines) + "\n").encode()
        name = f"part-{k:02d}.jsonl" + (".gz" if k in (2, 4) else "")
        (folder / name).write_bytes(gzip.compress(data, mtime=0) if name.endswith(".gz") else data)
        names.append(name)
    (folder / ".hidden.jsonl").write_text("not read\n")
    (folder / "sub").mkdir()
    (folder / "sub" / "nested.jsonl").write_text(json.dumps(_chat_line(0, 0, 0)) + "\n")
    return names


@pytest.fixture(scope="module")
def example_record(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The record of the example log read from disk (run metadata removed)."""
    return _analyze(str(EXAMPLE), tmp_path_factory.mktemp("jsonl"))


# -- the S3-compatible server ------------------------------------------------------------------


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """moto's S3 server in its own process, with the example log and a multi-file log uploaded."""
    with moto_server() as url:
        import boto3

        client = boto3.client("s3", endpoint_url=url)
        client.create_bucket(Bucket=BUCKET)
        client.upload_file(str(EXAMPLE), BUCKET, "example/agent_log.jsonl.gz")
        local = tmp_path_factory.mktemp("s3data") / "multi"
        _multi_file_log(local)
        for path in sorted(local.rglob("*")):
            if path.is_file():
                client.upload_file(str(path), BUCKET, f"multi/{path.relative_to(local).as_posix()}")
        yield {"url": url, "local": local}


def test_the_example_log_on_s3_gives_the_record_of_the_file_on_disk(
    s3: dict[str, Any], example_record: dict[str, Any], tmp_path: Path
) -> None:
    url = f"s3://{BUCKET}/example/agent_log.jsonl.gz"
    remote = _analyze(url, tmp_path)
    local = json.loads(json.dumps(example_record))
    assert remote["inputs"]["paths"] == [url]
    # the line errors name the object and the line, as they name the file and line on disk
    assert [(s["source"], s["line"]) for s in remote["errors"]["samples"]] == [
        (url, s["line"]) for s in local["errors"]["samples"]
    ]
    assert remote["errors"]["count"] == 4
    assert _as_local(remote, url, str(EXAMPLE)) == local


def test_a_glob_and_a_prefix_on_s3_read_the_files_of_the_folder_on_disk(s3: dict[str, Any], tmp_path: Path) -> None:
    folder: Path = s3["local"]
    local = _analyze(str(folder), tmp_path, "--no-rag-whatif")
    assert local["summary"]["requests"] == 48 and local["errors"]["count"] == 6
    prefix = f"s3://{BUCKET}/multi"
    for spec in (prefix, prefix + "/", prefix + "/part-*.jsonl*", prefix + "/part-0[0-5]*"):
        remote = _analyze(spec, tmp_path, "--no-rag-whatif")
        files = [f["path"] for f in remote["inputs"]["files"]]
        assert files == [f"{prefix}/part-{k:02d}.jsonl" + (".gz" if k in (2, 4) else "") for k in range(6)], spec
        assert {(s["source"].rsplit("/", 1)[-1], s["line"]) for s in remote["errors"]["samples"]} == {
            ("part-01.jsonl", 4),
            ("part-01.jsonl", 6),
            ("part-03.jsonl", 3),
            ("part-03.jsonl", 6),
            ("part-04.jsonl.gz", 4),
            ("part-04.jsonl.gz", 6),
        }
        remote["inputs"]["paths"] = local["inputs"]["paths"]
        assert _as_local(remote, prefix, str(folder)) == local, spec
    # the sizes for progress and the default number of workers come from the listing, not one
    # request per file
    from prefixplan.logs import ReadMeter, remote

    urls = expand_paths([prefix + "/"])
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(remote, "filesystem", lambda url: pytest.fail(f"a request for {url}"))
        total = ReadMeter.for_paths(urls).total_bytes
    assert total == sum((folder / u.rsplit("/", 1)[-1]).stat().st_size for u in urls)


def test_a_trace_of_s3_logs_has_the_rows_of_the_trace_of_the_files_on_disk(s3: dict[str, Any], tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    folder: Path = s3["local"]
    rows = {}
    for name, spec in (("local", str(folder / "part-0*")), ("s3", f"s3://{BUCKET}/multi/part-0*")):
        trace = tmp_path / f"{name}.parquet"
        assert main(["trace", spec, "--out", str(trace), "-q", "--workers", "1"]) == 0
        # the rows, less the file names (the metadata names the inputs too)
        rows[name] = pq.read_table(trace).drop_columns(["source"]).to_pylist()
    assert rows["s3"] == rows["local"] and len(rows["s3"]) == 48


def test_s3_errors_name_the_input_and_never_the_credentials(
    s3: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cases = {
        f"s3://{BUCKET}/missing.jsonl": "log file not found: s3://logs/missing.jsonl",
        f"s3://{BUCKET}/multi/*.parquet": "no log files match s3://logs/multi/*.parquet",
        f"s3://{BUCKET}/empty/": "log file not found: s3://logs/empty",
        "s3://no-such-bucket/x.jsonl": "s3://no-such-bucket/x.jsonl",
    }
    for spec, message in cases.items():
        capsys.readouterr()
        assert main(["analyze", spec, "--no-store", "-q"]) == 2, spec
        err = capsys.readouterr().err
        assert message in " ".join(err.split()), (spec, err)
        assert SECRET not in err and "Traceback" not in err
    # a strict run stops at the first malformed line and names the object and the line
    capsys.readouterr()
    assert main(["analyze", f"s3://{BUCKET}/multi/part-01.jsonl", "--strict", "--no-store", "-q"]) == 2
    err = capsys.readouterr().err
    assert "s3://logs/multi/part-01.jsonl:4: bad JSON" in err


def test_storage_errors_are_scrubbed_of_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    from prefixplan.logs import remote

    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    err = remote._failed("s3://b/k", RuntimeError(f"signature for {SECRET} does not match"))
    assert SECRET not in str(err) and "***" in str(err)
    err = remote._failed("https://h/a.jsonl?sig=XYZ123", OSError("403 Forbidden, url='https://h/a.jsonl?sig=XYZ123'"))
    assert "XYZ123" not in str(err) and "https://h/a.jsonl?..." in str(err)
    assert remote.shown("https://user:pw@host/a/b.jsonl?sig=abc") == "https://host/a/b.jsonl?..."
    assert remote.shown("s3://bucket/a b/c.jsonl") == "s3://bucket/a b/c.jsonl"


def test_without_the_extra_the_error_names_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # fsspec installed, s3fs not: the registry cannot import the S3 filesystem
    fsspec_registry = pytest.importorskip("fsspec.registry")
    monkeypatch.delitem(fsspec_registry._registry, "s3", raising=False)
    monkeypatch.setitem(sys.modules, "s3fs", None)
    with pytest.raises(UsageError, match="needs s3fs") as info:
        expand_paths(["s3://bucket/logs/*.jsonl"])
    assert info.value.hint == 'pip install "prefixplan[s3]"'
    # fsspec itself missing
    monkeypatch.setitem(sys.modules, "fsspec", None)
    capsys.readouterr()
    assert main(["analyze", "gs://bucket/log.jsonl", "--no-store", "-q"]) == 2
    err = capsys.readouterr().err
    assert "needs fsspec and gcsfs" in err and 'pip install "prefixplan[gcs]"' in err
    with pytest.raises(UsageError, match="cannot read ftp://"):
        expand_paths(["ftp://host/log.jsonl"])


def test_local_inputs_do_not_import_fsspec() -> None:
    code = (
        "import sys\n"
        "from prefixplan.logs import LineErrors, ReadOptions, expand_paths, iter_requests\n"
        f"n = sum(1 for _ in iter_requests(expand_paths([{str(EXAMPLE)!r}]), ReadOptions(), LineErrors()))\n"
        "print(n, 'fsspec' in sys.modules, 'pyarrow' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.split() == ["400", "False", "False"]


# -- over http ---------------------------------------------------------------------------------


@pytest.fixture
def http_root(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    pytest.importorskip("aiohttp")
    folder = tmp_path / "www"
    folder.mkdir()

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, directory=str(folder), **kwargs)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", folder
    finally:
        server.shutdown()
        server.server_close()


def test_a_log_over_http_reads_like_the_file(http_root: tuple[str, Path]) -> None:
    base, folder = http_root
    names = _multi_file_log(folder / "m")
    name = names[4]  # gzip with malformed lines
    url = f"{base}/m/{name}?X-Amz-Signature={SECRET}"
    shown = f"{base}/m/{name}?..."

    def read(spec: str) -> tuple[list[Any], LineErrors]:
        errors = LineErrors()
        requests = list(iter_requests(expand_paths([spec]), ReadOptions(), errors))
        return [(r.line_no, r.id.rsplit(":", 1)[-1], r.messages, r.time, r.tenant) for r in requests], errors

    remote, remote_errors = read(url)
    local, local_errors = read(str(folder / "m" / name))
    assert remote == local and len(remote) == 8
    assert [(s.source, s.line_no, s.reason) for s in remote_errors.samples] == [
        (shown, s.line_no, s.reason) for s in local_errors.samples
    ]
    assert SECRET not in remote_errors.summary()
    from prefixplan.render.stream import SourceOptions

    assert SourceOptions(paths=(url,)).display == (shown,)  # what records name the input
    with pytest.raises(InputError, match="not found|cannot read") as info:
        list(iter_requests(expand_paths([f"{base}/m/none.jsonl?sig={SECRET}"]), ReadOptions(), LineErrors()))
    assert SECRET not in str(info.value) and f"{base}/m/none.jsonl" in str(info.value)


# -- Parquet and CSV ---------------------------------------------------------------------------


def _example_rows() -> list[dict[str, Any]]:
    """The example log's lines as table rows: JSON-valued cells for messages and tools, the
    malformed JSON lines left out (a table has no place for them)."""
    rows = []
    for line in gzip.open(EXAMPLE, "rt", encoding="utf-8"):
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if not isinstance(obj, dict) or not isinstance(obj.get("request"), dict):
            continue
        req = obj["request"]
        rows.append(
            {
                "ts": obj.get("timestamp"),
                "msgs": json.dumps(req["messages"]) if "messages" in req else None,
                "model_name": req.get("model"),
                "user_id": req.get("user"),
                "tools": json.dumps(req["tools"]) if "tools" in req else None,
                "max_tokens": req.get("max_tokens"),
            }
        )
    return rows


def _same_analysis(table: dict[str, Any], jsonl: dict[str, Any]) -> None:
    for record in (table, jsonl):
        for cand in record["candidates"]:
            cand.pop("example")  # a line of the JSONL file, a row of the table
    assert table["candidates"] == jsonl["candidates"]
    assert table["simulation"] == jsonl["simulation"]
    assert table["rag"] == jsonl["rag"] and table["breakers"] == jsonl["breakers"]
    for key in ("requests", "prompt_tokens", "reusable_tokens", "hit_rate_tokens", "hit_rate_requests", "time_span_s"):
        assert table["summary"][key] == jsonl["summary"][key], key


COLUMNS = "messages=msgs,timestamp=ts,user=user_id,model=model_name"


def test_parquet_and_csv_logs_give_the_candidates_and_hit_rates_of_the_jsonl(
    example_record: dict[str, Any], tmp_path: Path
) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = _example_rows()
    parquet = tmp_path / "log.parquet"
    pq.write_table(pa.Table.from_pylist(rows), parquet, row_group_size=64)  # several batches
    got = _analyze(str(parquet), tmp_path, "--columns", COLUMNS)
    assert got["inputs"]["files"][0]["reader"] == "parquet"
    # the two JSON lines that are valid JSON but not valid requests are bad rows, by row number
    assert [(s["source"], s["line"], s["reason"].split(":")[0]) for s in got["errors"]["samples"]] == [
        (str(parquet), 110, "wrong type"),
        (str(parquet), 147, "missing field"),
    ]
    _same_analysis(got, json.loads(json.dumps(example_record)))

    plain = tmp_path / "log.csv.gz"  # a compressed CSV, the field names as its header
    with gzip.open(plain, "wt", encoding="utf-8", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    got = _analyze(str(plain), tmp_path, "--columns", COLUMNS)
    assert got["inputs"]["files"][0]["reader"] == "csv"
    assert [(s["line"]) for s in got["errors"]["samples"]] == [111, 148]  # the header is line 1
    _same_analysis(got, json.loads(json.dumps(example_record)))


def test_table_rows_read_like_json_lines(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    lines = [_chat_line(i % 2, i, i) for i in range(5)]
    jsonl = tmp_path / "log.jsonl"
    jsonl.write_text("".join(json.dumps(x) + "\n" for x in lines))
    # nested: a struct column `request` whose messages are reached as request.messages; a real
    # Parquet timestamp column
    table = pa.table(
        {
            "ts": pa.array([x["timestamp"] * 1000 for x in lines], pa.timestamp("ms", tz="UTC")),
            "request": pa.array([x["request"] for x in lines]),
        }
    )
    parquet = tmp_path / "nested.parquet"
    pq.write_table(table, parquet)

    def read(path: Path, **options: Any) -> tuple[list[Any], LineErrors]:
        errors = LineErrors()
        reqs = list(iter_requests([str(path)], ReadOptions(**options), errors))
        return [(r.messages, r.model, r.tenant, r.time, r.format) for r in reqs], errors

    want, _ = read(jsonl)
    columns = "messages=request.messages,model=request.model,user=request.user,timestamp=ts"
    got, errors = read(parquet, columns=columns)
    assert got == want and errors.count == 0
    # without a mapping the columns are the fields: {"ts", "request": {...}} reads like the line
    # (no timestamp field: ts is not one of the names the reader knows)
    got, _ = read(parquet)
    assert [g[:3] for g in got] == [w[:3] for w in want]
    # an integer column with nulls written as float by pandas still gives integers
    floats = tmp_path / "floats.parquet"
    pq.write_table(pa.table({"prompt": ["a", "b"], "max_tokens": [256.0, float("nan")], "user": [7.0, None]}), floats)
    errors = LineErrors()
    reqs = list(iter_requests([str(floats)], ReadOptions(), errors))
    assert [(r.output_length, r.tenant, r.format) for r in reqs] == [(256, "7", "raw"), (None, None, "raw")]
    # --log-format csv reads a file of any name as CSV; a bad cell is a bad row with its line
    weird = tmp_path / "log.txt"
    weird.write_text(
        'messages,model,timestamp\n"[{""role"":""user"",""content"":""hi""}]",m,1700000000\n'
        '"[{""role"":""user""",m,1700000001\n'
        '"[{""role"":""user"",\n""content"":""ab""}]",m,2024-01-01T00:00:00Z\n'
        "x,y\n"
    )
    got, errors = read(weird, format="csv")
    assert [(g[0][0]["content"], g[3]) for g in got] == [("hi", 1700000000.0), ("ab", 1704067200.0)]
    assert [(s.line_no, s.reason.split(":")[0]) for s in errors.samples] == [(3, "bad JSON"), (6, "bad CSV")]


def test_an_unknown_column_is_a_usage_error_listing_the_columns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "log.parquet"
    pq.write_table(pa.table({"msgs": ["[]"], "ts": [1.0]}), path)
    assert main(["analyze", str(path), "--columns", "messages=message", "--no-store", "-q"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "has no column 'message'" in err and "its columns: msgs, ts" in err
    assert main(["analyze", str(path), "--columns", "prompt_text=msgs", "--no-store", "-q"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "unknown field 'prompt_text'" in err and "fields: messages, tools" in err
    assert main(["analyze", str(path), "--columns", "messages", "--no-store", "-q"]) == 2
    assert "is not FIELD=COLUMN" in capsys.readouterr().err
    jsonl = tmp_path / "log.jsonl"
    jsonl.write_text('{"messages": [{"role": "user", "content": "hi"}]}\n')
    assert main(["analyze", str(jsonl), "--columns", "messages=msgs", "--no-store", "-q"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "--columns maps the columns of Parquet and CSV logs, and no input is one" in err
    # forced to be read as a table, the same file is one: the mapping is checked against its header
    assert main(["analyze", str(jsonl), "--columns", "messages=msgs", "--log-format", "csv", "--no-store", "-q"]) == 2
    assert "has no column 'msgs'" in " ".join(capsys.readouterr().err.split())


def test_parquet_logs_on_s3_read_like_on_disk(s3: dict[str, Any], tmp_path: Path) -> None:
    import boto3
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [_chat_line(i % 2, i, i) for i in range(40)]
    table = pa.table({"ts": [r["timestamp"] for r in rows], "request": [json.dumps(r["request"]) for r in rows]})
    path = tmp_path / "t.parquet"
    pq.write_table(table, path, row_group_size=16)
    boto3.client("s3", endpoint_url=s3["url"]).upload_file(str(path), BUCKET, "tables/t.parquet")
    options = ReadOptions(columns="request=request,timestamp=ts")

    def read(spec: str) -> list[Any]:
        return [(r.line_no, r.messages, r.time) for r in iter_requests([spec], options, LineErrors())]

    assert read(f"s3://{BUCKET}/tables/t.parquet") == read(str(path))
    assert len(read(str(path))) == 40
    assert os.path.getsize(path) > 0


def test_csv_reads_from_stdin_and_parquet_does_not(monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    data = b'messages,model\n"[{""role"":""user"",""content"":""hi""}]",m\n'
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(gzip.compress(data))))
    errors = LineErrors()
    (req,) = iter_requests(["-"], ReadOptions(format="csv"), errors)
    assert req.messages == ({"role": "user", "content": "hi"},) and req.line_no == 2 and req.source == "-"
    with pytest.raises(UsageError, match="cannot be read from stdin"):
        list(iter_requests(["-"], ReadOptions(format="parquet"), LineErrors()))
