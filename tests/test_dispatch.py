"""Jobs wait in this process until a worker can start them: a finished worker takes the next at
once, the caller takes the oldest waiting one, and nothing is left queued at a busy worker."""

from __future__ import annotations

from concurrent.futures import CancelledError, Future
from dataclasses import dataclass, field

import pytest

from prefixplan.trace.dispatch import Dispatcher


@dataclass
class Pool:
    """A stand-in pool: each submitted job's future, completed by the test."""

    ready: int = 1
    handed: list[tuple[str, Future[str]]] = field(default_factory=list)
    broken: bool = False

    def submit(self, job: str) -> Future[str]:
        if self.broken:
            raise RuntimeError("pool broken")
        future: Future[str] = Future()
        future.set_running_or_notify_cancel()  # a worker took it
        self.handed.append((job, future))
        return future

    def jobs(self) -> list[str]:
        return [job for job, _ in self.handed]

    def finish(self, job: str) -> None:
        dict(self.handed)[job].set_result(f"{job} by a worker")


def dispatcher(pool: Pool, depth: int = 1) -> Dispatcher[str, str]:
    return Dispatcher(pool.submit, lambda: pool.ready, lambda _job: depth)


def test_a_finished_worker_takes_the_next_job_and_the_caller_the_oldest_waiting() -> None:
    pool = Pool()
    d = dispatcher(pool)
    slots = [d.add(f"file-{i}") for i in range(4)]
    assert pool.jobs() == ["file-0"] and d.waiting() == 3 and d.held() == 1  # none queued behind it
    taken = d.take()
    assert taken is not None and taken[1] == "file-1" and taken[0] is slots[1]
    taken[0].set_result("file-1 here")
    pool.finish("file-0")  # its done callback hands the worker the next one
    assert pool.jobs() == ["file-0", "file-2"] and d.waiting() == 1
    assert slots[0].result() == "file-0 by a worker" and not slots[2].done()
    pool.finish("file-2")
    pool.finish("file-3")
    assert [s.result() for s in slots] == [
        "file-0 by a worker",
        "file-1 here",
        "file-2 by a worker",
        "file-3 by a worker",
    ]
    assert d.take() is None and d.held() == 0


def test_a_worker_holds_up_to_its_depth_and_only_ready_workers_take_jobs() -> None:
    pool = Pool(ready=0)
    d = dispatcher(pool, depth=2)
    slots = [d.add(f"batch-{i}") for i in range(5)]
    assert pool.jobs() == [] and d.waiting() == 5  # still starting: the caller renders meanwhile
    pool.ready = 2
    d.fill(Future())  # a worker's warm-up finished (a done callback)
    assert pool.jobs() == [f"batch-{i}" for i in range(4)] and d.waiting() == 1
    assert d.take(slots[1]) is None  # a worker holds it: not the caller's to take
    taken = d.take(slots[4])
    assert taken is not None and taken[0] is slots[4] and d.waiting() == 0


def test_errors_reach_the_jobs_slot() -> None:
    pool = Pool()
    d = dispatcher(pool)
    first, second = d.add("a"), d.add("b")
    dict(pool.handed)["a"].set_exception(ValueError("bad line"))
    with pytest.raises(ValueError, match="bad line"):
        first.result()
    pool.finish("b")
    pool.broken = True
    third = d.add("c")  # the pool can no longer take jobs: the slot says why
    with pytest.raises(RuntimeError, match="pool broken"):
        third.result()
    assert second.result() == "b by a worker"


def test_closing_cancels_what_waits_and_hands_out_nothing_more() -> None:
    pool = Pool()
    d = dispatcher(pool)
    slots = [d.add(f"file-{i}") for i in range(3)]
    d.close()
    for slot in slots[1:]:
        with pytest.raises(CancelledError):
            slot.result()
    pool.finish("file-0")  # the running one ends; nothing else is handed out
    assert pool.jobs() == ["file-0"] and slots[0].result() == "file-0 by a worker"


def test_at_the_end_of_a_pass_no_whole_file_waits_behind_a_busy_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two processes, whole files: while the worker renders its first file, this process renders
    every other one (none was queued at the worker), and the results come in job order."""
    from prefixplan.render.stream import SourceOptions
    from prefixplan.trace import local_pool
    from prefixplan.trace.executors import Executor, Run
    from prefixplan.trace.shards import ShardJob

    source = SourceOptions(paths=("log",))
    jobs = [ShardJob(i, f"part-{i}.jsonl.gz", source, 16) for i in range(6)]
    at_worker: list[tuple[int, Future[int]]] = []
    here: list[int] = []

    class Workers:
        def submit(self, fn: object, job: ShardJob) -> Future[int]:
            future: Future[int] = Future()
            future.set_running_or_notify_cancel()
            at_worker.append((job.index, future))
            return future

        def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None:
            pass

    def render(job: ShardJob, renderers: object = None) -> int:
        here.append(job.index)
        if len(here) + len(at_worker) == len(jobs):  # the worker ends when this process has done the rest
            for index, future in at_worker:
                future.set_result(index)
        return job.index

    warm: Future[str] = Future()
    warm.set_result("host:1")
    monkeypatch.setattr(local_pool, "_pool", lambda *a: (local_pool.Pool(Workers(), [warm]), True))
    monkeypatch.setattr(local_pool, "render_shard", render)
    results = list(local_pool.run_local(jobs, Run(Executor(workers=2), source.renderers(), 2)))
    assert [index for index, _ in at_worker] == [0]
    assert here == [1, 2, 3, 4, 5] and results == [0, 1, 2, 3, 4, 5]


def test_closing_from_inside_fill_on_the_same_thread_does_not_wait_on_itself() -> None:
    """A run's generator closed by the garbage collector on the pool's thread, while that thread
    is handing out jobs, closes the dispatcher there: it returns, and nothing more is handed out."""
    import threading

    pool = Pool(ready=3)
    d: Dispatcher[str, str] = Dispatcher(lambda job: closing(job), lambda: pool.ready, lambda _job: 1)

    def closing(job: str) -> Future[str]:
        future = pool.submit(job)
        d.close()  # as a finalizer would, mid-fill
        return future

    slots: list[Future[str]] = []
    t = threading.Thread(target=lambda: slots.extend(d.add(f"file-{i}") for i in range(3)), daemon=True)
    t.start()
    t.join(timeout=30)
    assert not t.is_alive()
    assert pool.jobs() == ["file-0"] and d.waiting() == 0
    assert all(s.cancelled() for s in slots[1:])
