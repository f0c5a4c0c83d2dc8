"""Rendering in worker processes gives the rows, records and results of rendering in-process,
and a request the tokenizer rejects is reported the same way."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from prefixplan.cli.app import main
from prefixplan.logs import LineErrors
from prefixplan.render.stream import RenderFailure, SourceOptions
from prefixplan.trace.executors import Executor, default_workers
from prefixplan.trace.intake import Intake, IntakePlan
from tests.shard_logs import REJECTED, split_example

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "agent_log.jsonl.gz"
pytestmark = pytest.mark.skipif(not EXAMPLE.is_file(), reason="example log not generated")


def _rows(source: SourceOptions, workers: int) -> tuple[list, LineErrors, list[RenderFailure], dict]:
    renderers = source.renderers()
    intake = Intake(IntakePlan(source, Executor(workers=workers), 16, routing=True), renderers=renderers)
    out = [(row.line, row) for row in intake.rows()]
    errors, failures = intake.errors, intake.failures
    stats = {
        "models": {k: sorted(v) for k, v in renderers.models_by_spec.items()},
        "prompts": dict(renderers.prompts_by_spec),
        "described": sorted((f.spec, f.label, f.fingerprint, f.exact, f.probe_ids) for f in renderers.facts()),
    }
    stats["loaded_here"] = sorted(r.spec for r in renderers.loaded)
    return out, errors, failures, stats


def test_rows_are_the_same_on_any_number_of_workers(tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    good = {"model": "m", "messages": [{"role": "user", "content": "hello " * 50}]}
    lines = [json.dumps(good if i % 7 else REJECTED) for i in range(150)] + ["not json"]
    log.write_text("\n".join(lines) + "\n")
    source = SourceOptions(paths=(str(log),))
    one = _rows(source, 1)
    two = _rows(source, 2)
    assert [line for line, _ in one[0]] == [line for line, _ in two[0]]
    for (_, a), (_, b) in zip(one[0], two[0], strict=True):
        assert a.index == b.index and (a.block_keys == b.block_keys).all() and a.route_units == b.route_units
        assert (a.seg_hash == b.seg_hash).all() and a.boundary_keys == b.boundary_keys
    assert one[1].count == two[1].count == 1 + 22 and one[1].by_reason == two[1].by_reason
    assert [f.line_no for f in one[2]] == [f.line_no for f in two[2]] == list(range(1, 151, 7))
    # the parent knows which tokenizer rendered what and what the record says of it, whether
    # it rendered some jobs itself (while the workers started) or none
    assert {k: v for k, v in one[3].items() if k != "loaded_here"} == {
        k: v for k, v in two[3].items() if k != "loaded_here"
    }
    assert one[3]["described"] and one[3]["loaded_here"] == ["mistral:nemo"]


def test_a_log_of_many_files_gives_the_same_rows_with_three_processes(tmp_path: Path) -> None:
    """Two workers and this process, whole files as jobs: the jobs no worker has taken are
    rendered here (:mod:`prefixplan.trace.dispatch`), and the results merge in job order."""
    split_example(tmp_path / "log")
    source = SourceOptions(paths=(str(tmp_path / "log"),))
    one, three = _rows(source, 1), _rows(source, 3)
    assert [line for line, _ in one[0]] == [line for line, _ in three[0]]
    for (_, a), (_, b) in zip(one[0], three[0], strict=True):
        assert a.index == b.index and a.source == b.source and (a.block_keys == b.block_keys).all()
    assert one[1].count == three[1].count and one[1].samples == three[1].samples
    assert [(f.source, f.line_no) for f in one[2]] == [(f.source, f.line_no) for f in three[2]]


@pytest.mark.heavy
def test_records_and_simulations_do_not_depend_on_workers(tmp_path: Path) -> None:
    docs = {}
    for w in (1, 2):
        a, s = tmp_path / f"a{w}.json", tmp_path / f"s{w}.json"
        assert main(["analyze", str(EXAMPLE), "--no-store", "-q", "--json", str(a), "--workers", str(w)]) == 0
        assert main(["simulate", str(EXAMPLE), "--capacity", "1e5", "-q", "--json", str(s), "--workers", str(w)]) == 0
        record = json.loads(a.read_text())
        record.pop("created")
        record["summary"].pop("elapsed_s")
        record["summary"].pop("encoded")  # run metadata: what each render process reused
        docs[w] = (record, json.loads(s.read_text()))
    assert docs[1] == docs[2]


def test_small_inputs_render_in_process(tmp_path: Path) -> None:
    small = tmp_path / "small.jsonl"
    small.write_text('{"prompt": "x"}\n')
    assert default_workers(SourceOptions(paths=(str(small),))) == 1
    assert default_workers(SourceOptions(objects=[{"prompt": "x"}])) == 1
    assert main(["analyze", str(small), "--workers", "0", "--no-store", "-q"]) == 2


def test_render_workers_share_the_cores_out_among_their_tokenizer_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each render process gives its tokenizer's thread pool its share of the cores (a process
    per core: one thread each), unless the user sized the pool."""
    from prefixplan.trace import shards

    assert [shards.worker_threads(w, cores=2) for w in (1, 2, 3)] == [2, 1, 1]
    assert shards.worker_threads(4, cores=16) == 4
    hidden: list[bool] = []
    monkeypatch.setattr("prefixplan.render.frameworks.hide_model_frameworks", lambda: hidden.append(True))
    monkeypatch.delenv("RAYON_NUM_THREADS", raising=False)
    shards.start_worker(3)
    assert os.environ["RAYON_NUM_THREADS"] == "3"
    monkeypatch.setenv("RAYON_NUM_THREADS", "7")
    shards.start_worker(1)
    assert os.environ["RAYON_NUM_THREADS"] == "7"
    assert hidden == [True, True]  # and no model framework is importable in a worker


def test_segments_rendered_here_are_those_a_row_rebuilds() -> None:
    """The text pass takes the segments of requests rendered in this process as the renderer
    gave them, and those of a worker's or a trace's rows rebuilt from the row: the same."""
    from prefixplan.logs import iter_requests
    from prefixplan.trace.inprocess import render_in_process
    from prefixplan.trace.rows import RowMaker, row_segments

    source = SourceOptions(paths=(str(EXAMPLE),))
    requests = iter_requests([str(EXAMPLE)], source.read, LineErrors())
    rendered = list(render_in_process(requests, source.renderers(), RowMaker(16), 64, lambda r, why: None))
    assert rendered and all(r.segments is not None for r in rendered)
    assert sum(len(r.segments or ()) for r in rendered) > 10 * len(rendered)
    for r in rendered:
        assert r.segments == row_segments(r.row)
