"""``--workers N``: shards rendered by a pool of local processes, results in job order.

``N`` render processes are this one and ``N - 1`` workers. The workers start from a fork
server where the platform has one (else spawn), each with
:func:`~prefixplan.trace.shards.start_worker`, and each first loads the run's tokenizer
(:func:`~prefixplan.trace.shards.warm_worker`). Each ready worker is kept a few jobs ahead;
whenever none can take another (all busy, or still starting), the calling process renders the
next job itself with its own renderers; once every job is handed out, it takes back the latest
ones no worker has started and renders them (the workers' queues would otherwise be the last
thing left, this process idle). So starting workers never makes a run slower than
rendering without them, and the calling process, which loads a tokenizer anyway (for the shown
candidates' ids), works as the ``N``-th renderer between merging results instead of waiting:
on two cores ``--workers 2`` loads two tokenizers, not three. Within a command's
:func:`~prefixplan.trace.executors.session` the pool, workers loaded, is kept for the next pass.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from prefixplan.render.stream import SourceOptions
from prefixplan.trace.executors import Run, session_pools
from prefixplan.trace.shards import (
    IN_FLIGHT_PER_WORKER,
    WHOLE_FILE_IN_FLIGHT,
    ShardJob,
    ShardResult,
    render_shard,
    start_worker,
    warm_worker,
    worker_threads,
)

WINDOW_PER_PROCESS = 2 * IN_FLIGHT_PER_WORKER
"""Jobs in the window (handed out or rendered here, results not yet taken) per render process:
past it the caller waits for the oldest, which bounds what finished results hold in memory."""


def start_method() -> Any:
    """The multiprocessing context of render workers: a fork server where the platform has one
    (each worker forks from a small clean process, not from the parent with its tokenizers'
    threads), else spawn."""
    import multiprocessing

    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")


@dataclass
class Pool:
    """A process pool and, per worker, the future of its warm-up (done: a worker is ready)."""

    executor: Any
    ready: list[Future[str]] = field(default_factory=list)  # each worker's host:pid when ready

    def ready_workers(self) -> int:
        return sum(1 for f in self.ready if f.done())

    def shutdown(self, wait: bool = True) -> None:
        """Stop the workers: queued jobs are cancelled; with ``wait`` their processes are joined,
        unless some are still starting (loading a tokenizer the run no longer needs)."""
        self.executor.shutdown(wait=wait and self.ready_workers() == len(self.ready), cancel_futures=True)


def _pool(workers: int, source: SourceOptions, renderers: int) -> tuple[Pool, bool]:
    """A pool of ``workers`` render workers and whether this call owns it (else it belongs to
    the command's :func:`~prefixplan.trace.executors.session` and outlives the run);
    ``renderers``: the processes that render in all, which share the cores."""
    from concurrent.futures import ProcessPoolExecutor

    threads = worker_threads(renderers)
    pools = session_pools()
    key = (workers, threads)
    if pools is not None and key in pools:
        found: Pool = pools[key]
        return found, False
    executor = ProcessPoolExecutor(workers, mp_context=start_method(), initializer=start_worker, initargs=(threads,))
    pool = Pool(executor, [executor.submit(warm_worker, source) for _ in range(workers)])
    if pools is None:
        return pool, True
    pools[key] = pool
    return pool, False


def _forget(pool: Pool) -> None:
    """Take a broken pool out of the command's session (the next run starts a new one)."""
    pools = session_pools() or {}
    for key, one in list(pools.items()):
        if one is pool:
            del pools[key]
    pool.shutdown(wait=False)


def in_flight(job: ShardJob) -> int:
    """Jobs of ``job``'s kind a ready worker is kept ahead (whole files fewer: they are long)."""
    whole = job.range is None and job.lines is None and job.requests is None
    return WHOLE_FILE_IN_FLIGHT if whole else IN_FLIGHT_PER_WORKER


def take_back(
    window: deque[Future[ShardResult]], handed: dict[Future[ShardResult], ShardJob]
) -> tuple[int, ShardJob] | None:
    """The latest job of ``window`` that a worker holds but has not started, cancelled there:
    (its place in the window, the job); None when every handed job has started."""
    for at in range(len(window) - 1, -1, -1):
        future = window[at]
        if future in handed and future.cancel():
            return at, handed.pop(future)
    return None


def run_local(jobs: Iterable[ShardJob], run: Run) -> Iterator[ShardResult]:
    """Shard results in job order from ``run.processes`` local processes, a bounded window ahead
    (module docstring: jobs no ready worker can take are rendered here)."""
    from concurrent.futures.process import BrokenProcessPool

    from prefixplan.errors import TokenizerError

    workers = max(1, run.processes - 1)  # this process renders too
    window: deque[Future[ShardResult]] = deque()
    helped: set[Future[ShardResult]] = set()  # rendered here
    handed: dict[Future[ShardResult], ShardJob] = {}  # handed to the workers, result not yet taken
    pool: Pool | None = None
    owned = False
    finished = False
    try:

        def first() -> ShardResult:
            future = window.popleft()
            helped.discard(future)
            handed.pop(future, None)
            try:
                return future.result()
            except BrokenProcessPool as exc:
                assert pool is not None
                _forget(pool)
                raise TokenizerError(
                    f"a render worker stopped unexpectedly ({exc or 'killed, or out of memory'})",
                    hint="run again with fewer --workers (--workers 1 renders in this process)",
                ) from None

        for job in jobs:
            if pool is None:
                pool, owned = _pool(workers, job.source, run.processes)
            while window and window[0].done():  # hand back what is done, in job order
                yield first()
            queued = sum(1 for f in window if f not in helped and not f.done())  # jobs the workers hold
            ready = pool.ready_workers()
            if queued < ready * in_flight(job):
                window.append(pool.executor.submit(render_shard, job))
                handed[window[-1]] = job
                queued += 1
            else:  # no ready worker would take it soon: this process renders it
                here: Future[ShardResult] = Future()
                here.set_result(render_shard(job, run.renderers))
                helped.add(here)
                window.append(here)
            if run.on_load is not None:  # this process counts as busy: it renders when they all are
                run.on_load(min(ready, queued) + 1, workers + 1)
            while len(window) >= WINDOW_PER_PROCESS * (workers + 1):  # results wait for an earlier job
                yield first()
        # every job is handed out: take back the latest one no worker has started and render it
        # here, until none is left, so this process does not wait idle for the workers' queues
        while window:
            while window and window[0].done():
                yield first()
            taken = take_back(window, handed)
            if taken is None:
                break
            at, job = taken
            here = Future()
            here.set_result(render_shard(job, run.renderers))
            helped.add(here)
            window[at] = here
        while window:
            yield first()
        finished = True
    finally:
        # Stopped early (an error, a consumer that left): queued jobs are cancelled and nothing
        # waits for the running ones. A generator left suspended may also be closed by the
        # garbage collector on any thread, the pool's manager thread included, which cannot
        # join itself. Workers still starting when the run ends are not waited for.
        for future in window:
            future.cancel()
        if pool is not None and owned:
            pool.shutdown(wait=finished)
