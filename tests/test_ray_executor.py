"""``--executor ray``: the same analysis on a real local Ray cluster (two CPUs, started here with
``ray.init``), giving the record of a local run byte for byte after removing run metadata, with
one and two actors, on the example log and on a log of 24 files (some gzip, some with malformed
lines); and logs read back from an S3-compatible server (moto) through ``s3://`` by the actors
give the record of the same files on disk.

Skipped with the reason when ``ray`` is not installed (``pip install -e ".[test]"`` installs it).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from prefixplan.cli.app import main
from tests.s3_server import moto_server
from tests.shard_logs import EXAMPLE, clean, split_example

pytestmark = pytest.mark.skipif(not EXAMPLE.is_file(), reason="example log not generated")
BUCKET = "ray-logs"


def _record(tmp: Path, inputs: list[str], *extra: str) -> dict[str, Any]:
    out = tmp / f"r{len(list(tmp.glob('r*.json')))}.json"
    assert main(["analyze", *inputs, "--no-store", "-q", "--json", str(out), *extra]) == 0
    return clean(json.loads(out.read_text()))


def _simulation(tmp: Path, inputs: list[str], *extra: str) -> dict[str, Any]:
    out = tmp / f"s{len(list(tmp.glob('s*.json')))}.json"
    assert main(["simulate", *inputs, "--capacity", "1e5", "-q", "--json", str(out), *extra]) == 0
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """An S3-compatible server holding the split log, then a real two-CPU Ray cluster started in
    that environment (its actors find the endpoint and credentials the way nodes of a real cluster
    find theirs: in the environment)."""
    ray = pytest.importorskip("ray", reason='the Ray executor needs ray (pip install -e ".[test]")')
    pytest.importorskip("ray.data", reason="the Ray executor needs Ray Data (ray[data])")
    local = tmp_path_factory.mktemp("split") / "log"
    files = split_example(local)
    with moto_server() as url:
        import boto3

        client = boto3.client("s3", endpoint_url=url)
        client.create_bucket(Bucket=BUCKET)
        for path in files:
            client.upload_file(str(path), BUCKET, f"split/{path.name}")
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        try:
            yield {"local": local, "files": files}
        finally:
            ray.shutdown()


def test_the_example_log_on_ray_gives_the_local_record(cluster: dict[str, Any], tmp_path: Path) -> None:
    local = _record(tmp_path, [str(EXAMPLE)], "--workers", "1")
    for actors in ("1", "2"):
        assert _record(tmp_path, [str(EXAMPLE)], "--executor", "ray", "--workers", actors) == local


@pytest.mark.heavy
def test_a_log_of_many_files_on_ray_gives_the_local_record(cluster: dict[str, Any], tmp_path: Path) -> None:
    folder = str(cluster["local"])
    local = _record(tmp_path, [folder], "--workers", "1")  # one reader in this process
    assert local["errors"]["count"] >= 10 and local["breakers"] and local["rag"]
    for actors in ("1", "2"):
        assert _record(tmp_path, [folder], "--executor", "ray", "--workers", actors) == local
    # the simulation reads the same rows
    assert _simulation(tmp_path, [folder], "--executor", "ray") == _simulation(tmp_path, [folder], "--workers", "1")


@pytest.mark.heavy
def test_logs_on_s3_read_by_ray_actors_give_the_record_of_the_files_on_disk(
    cluster: dict[str, Any], tmp_path: Path
) -> None:
    prefix = f"s3://{BUCKET}/split"
    local = _record(tmp_path, [str(cluster["local"])], "--workers", "1")
    remote = _record(tmp_path, [prefix], "--executor", "ray", "--workers", "2")
    text = json.dumps(remote).replace(prefix, str(cluster["local"]))
    assert json.loads(text) == local
    assert remote["errors"]["samples"][0]["source"].startswith(prefix + "/")  # errors name the object and line


def test_stdin_is_refused_by_the_ray_executor(cluster: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", "-", "--executor", "ray", "--no-store", "-q"]) == 2
    assert "--executor ray reads files or URLs" in capsys.readouterr().err


@pytest.mark.heavy
def test_a_trace_written_to_s3_by_a_ray_run_reads_back_like_its_log(cluster: dict[str, Any], tmp_path: Path) -> None:
    folder = str(cluster["local"])
    url = f"s3://{BUCKET}/traces/split.parquet"
    from_log = _record(tmp_path, [folder], "--executor", "ray", "--trace-out", url)
    from_trace = _record(tmp_path, [url])  # read back from the bucket, no tokenizer
    assert from_trace == from_log
    # the same simulation (the waterfall's token level needs one key per token: a log has them,
    # a trace written at 16-token keys does not)
    assert _simulation(tmp_path, [url], "--no-waterfall") == _simulation(
        tmp_path, [folder], "--workers", "1", "--no-waterfall"
    )
    # `prefixplan trace -o URL` writes the same rows
    other = f"s3://{BUCKET}/traces/by-trace-command.parquet"
    assert main(["trace", folder, "-o", other, "--executor", "ray", "-q"]) == 0
    assert _simulation(tmp_path, [other]) == _simulation(tmp_path, [url])
    assert main(["trace", folder, "-o", other, "--export", "mooncake", "-q"]) == 2  # exports are local files


def test_one_plain_log_is_read_by_ray_actors_in_byte_ranges(cluster: dict[str, Any], tmp_path: Path) -> None:
    """One uncompressed file on the (shared) file system: cut into ranges the actors read, not one
    job for one actor; the rows are a local run's."""
    import gzip

    from prefixplan.render.stream import SourceOptions
    from prefixplan.trace.executors import Executor
    from prefixplan.trace.intake import Intake, IntakePlan

    log = tmp_path / "agent_log.jsonl"
    log.write_bytes(gzip.decompress(EXAMPLE.read_bytes()))
    source = SourceOptions(paths=(str(log),))
    ray_run = Intake(IntakePlan(source, Executor(kind="ray", workers=2), 16))
    rows = [(r.line, r.block_keys.tobytes()) for r in ray_run.rows()]
    local = Intake(IntakePlan(source, Executor(workers=1), 16))
    assert rows == [(r.line, r.block_keys.tobytes()) for r in local.rows()]
    assert sum(w["jobs"] for w in ray_run.workers.values()) >= 8 and len(ray_run.workers) == 2
    assert _record(tmp_path, [str(log)], "--executor", "ray", "--workers", "2") == _record(
        tmp_path, [str(log)], "--workers", "1"
    )
