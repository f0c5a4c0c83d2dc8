"""The intake: one path for every command that reads logs — the jobs it makes, the executors that
run them, the pool a command keeps, and malformed lines reported the same way everywhere."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

from prefixplan.cli.app import main
from prefixplan.errors import UsageError
from prefixplan.render import RenderSet
from prefixplan.render.stream import SourceOptions
from prefixplan.trace.executors import Executor, Run, session
from prefixplan.trace.intake import Intake, IntakePlan
from prefixplan.trace.jobplan import BATCH, INLINE_BATCH


def _log(path: Path, n: int, bad: tuple[int, ...] = ()) -> Path:
    system = {"role": "system", "content": "you are a careful assistant; answer briefly. " * 12}
    lines = []
    for i in range(n):
        if i in bad:
            lines.append("{not json" if i % 2 else '{"messages": 5}')
        else:
            lines.append(json.dumps({"model": "m", "messages": [system, {"role": "user", "content": f"q{i}"}]}))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_an_executor_is_checked_once_where_it_is_built() -> None:
    with pytest.raises(UsageError, match="unknown executor 'dask'"):
        Executor("dask")
    with pytest.raises(UsageError, match="--ray-address needs --executor ray"):
        Executor("local", ray_address="auto")
    with pytest.raises(UsageError, match="--workers must be >= 1"):
        Executor(workers=0)
    source = SourceOptions(objects=[{"prompt": "x"}])
    assert Executor().processes(source) == 1 and Executor(workers=3).processes(source) == 3
    assert Run(Executor(workers=1), RenderSet(), 1).kind == "inline"
    assert Run(Executor(workers=2), RenderSet(), 2).kind == "local"
    assert Run(Executor("ray"), RenderSet(), 1).kind == "ray"


@pytest.mark.parametrize("workers", [1, 2])
def test_in_memory_records_travel_one_part_per_job(workers: int) -> None:
    """Each job carries its own requests and the options, never the run's whole list of records
    (which used to be pickled into every job)."""
    system = {"role": "system", "content": "s " * 200}
    records = [{"model": "m", "messages": [system, {"role": "user", "content": f"q{i}"}]} for i in range(2000)]
    source = SourceOptions(objects=records)
    intake = Intake(IntakePlan(source, Executor(workers=workers), 16))
    run = Run(intake.plan.executor, RenderSet(), workers)
    jobs = list(intake._jobs(run, None))
    size = BATCH if workers > 1 else INLINE_BATCH
    assert [len(j.requests or ()) for j in jobs] == [size] * (2000 // size) + ([2000 % size] if 2000 % size else [])
    assert all(j.source.objects is None for j in jobs)
    whole = len(pickle.dumps(records))
    assert max(len(pickle.dumps(j)) for j in jobs) < whole * (size / 2000) * 3


def test_simulate_reports_malformed_lines_as_analyze_does(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = _log(tmp_path / "log.jsonl", 40, bad=(3, 8, 20))
    a, s = tmp_path / "a.json", tmp_path / "s.json"
    assert main(["analyze", str(log), "--no-store", "--json", str(a)]) == 0
    analyze_out = capsys.readouterr()
    assert main(["simulate", str(log), "--capacity", "1e5", "--json", str(s)]) == 0
    simulate_out = capsys.readouterr()
    analyzed, simulated = json.loads(a.read_text())["errors"], json.loads(s.read_text())
    assert simulated["errors"] == analyzed and simulated["line_errors"] == 3
    assert [(e["source"], e["line"]) for e in analyzed["samples"]] == [(str(log), n) for n in (4, 9, 21)]
    for out in (analyze_out, simulate_out):
        text = out.out + out.err
        assert "3 malformed line(s) skipped" in text
        assert all(f"{log}:{n}: " in text for n in (4, 9, 21))


def test_a_command_keeps_its_worker_pool_for_its_second_pass(tmp_path: Path) -> None:
    """Within one command (a session) the second pass over the input finds the first pass's
    workers, tokenizers loaded; outside a session each pass has its own pool. Three render
    processes: this one and two workers."""
    import os
    import socket

    from prefixplan.trace.executors import session_pools

    log = _log(tmp_path / "log.jsonl", 3000)  # seven byte ranges: more jobs than the workers hold
    plan = IntakePlan(SourceOptions(paths=(str(log),)), Executor(workers=3), 16)
    with session():
        first = Intake(plan)
        n_first = sum(1 for _ in first.rows())
        pools = session_pools()
        assert pools is not None and len(pools) == 1
        (pool,) = pools.values()
        started = {f.result(timeout=300) for f in pool.ready}  # the two workers, tokenizer loaded
        second = Intake(plan)
        n_second = sum(1 for _ in second.rows())
        assert list((session_pools() or {}).values()) == [pool]
    assert n_first == n_second == 3000 and len(started) == 2
    here = f"{socket.gethostname()}:{os.getpid()}"
    # every job of the second pass went to those workers, or was rendered here (while they were
    # busy, or taken back at the end before a worker started it)
    assert set(second.workers) - {here} and set(second.workers) - {here} <= started


def test_a_trace_input_is_refused_where_a_log_is_needed(tmp_path: Path) -> None:
    log = _log(tmp_path / "log.jsonl", 20)
    trace = tmp_path / "t.parquet"
    assert main(["trace", str(log), "-o", str(trace), "-q"]) == 0
    with pytest.raises(UsageError, match="the input is a trace already"):
        Intake(IntakePlan(SourceOptions(paths=(str(trace),)), block_size=16, accept_trace=False))
    with pytest.raises(UsageError, match="--trace-out writes a trace while rendering a log"):
        Intake(IntakePlan(SourceOptions(paths=(str(trace),)), block_size=16, trace_out=str(tmp_path / "u.parquet")))
    rows = list(Intake(IntakePlan(SourceOptions(paths=(str(trace),)), block_size=16)).rows())
    assert len(rows) == 20


def test_progress_hears_how_many_workers_are_busy(tmp_path: Path) -> None:
    """Progress is told, as jobs come and go, how many of the workers have work; the console
    shows it with the counts."""
    import io

    from rich.console import Console

    from prefixplan.cli.progress import ConsoleProgress

    class Recorder:
        def __init__(self) -> None:
            self.loads: list[tuple[int, int]] = []

        def begin(self, name: str, total_bytes: int | None = None) -> None: ...

        def update(self, requests: int, tokens: int, bytes_done: int | None = None) -> None: ...

        def workers(self, busy: int, total: int) -> None:
            self.loads.append((busy, total))

        def end(self) -> None: ...

    from prefixplan.trace.executors import session_pools

    log = _log(tmp_path / "log.jsonl", 400)
    seen = Recorder()
    plan = IntakePlan(SourceOptions(paths=(str(log),)), Executor(workers=2), 16)
    with session():
        list(Intake(plan).rows())  # starts the workers
        for pool in (session_pools() or {}).values():
            for ready in pool.ready:
                ready.result(timeout=300)
        rows = list(Intake(plan, seen).rows())
    assert len(rows) == 400 and seen.loads
    assert {total for _, total in seen.loads} == {2} and all(0 <= busy <= 2 for busy, _ in seen.loads)
    assert max(busy for busy, _ in seen.loads) >= 1
    out = io.StringIO()
    console = ConsoleProgress(Console(file=out, force_terminal=True, width=200), clock=lambda: 5.0)
    console.begin("reading and rendering", None)
    console.workers(1, 2)
    console.update(10, 1000, None)
    assert "workers 1/2 busy" in console._bar.tasks[0].fields["counts"]
    console.end()
