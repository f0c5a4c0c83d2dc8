"""``--workers N``: shards rendered by a pool of local processes, results in job order.

``N`` render processes are this one and ``N - 1`` workers. The workers start from a fork
server where the platform has one (else spawn), each with
:func:`~prefixplan.trace.shards.start_worker`, and each first loads the run's tokenizer
(:func:`~prefixplan.trace.shards.warm_worker`). Jobs wait in this process
(:class:`~prefixplan.trace.dispatch.Dispatcher`) and a worker is handed the next the moment its
last one finishes; this process keeps as many waiting as the ready workers would take next and
renders the oldest waiting job itself whenever there are more (all workers busy, or still
starting), and at the end of a pass renders what is left while the workers finish theirs. No
job sits queued at a busy worker while another process is free, so starting workers never makes
a run slower than rendering without them, and the calling process, which loads a tokenizer
anyway (for the shown candidates' ids), works as the ``N``-th renderer between merging results
instead of waiting: on two cores ``--workers 2`` loads two tokenizers, not three. Within a
command's :func:`~prefixplan.trace.executors.session` the pool, workers loaded, is kept for the
next pass.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from prefixplan.render.stream import SourceOptions
from prefixplan.trace.executors import Run, session_pools
from prefixplan.trace.shards import (
    IN_FLIGHT_PER_WORKER,
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


def depth(job: ShardJob) -> int:
    """Jobs like ``job`` a ready worker holds at once, the running one included: whole files
    one (seconds each: a second would wait there while another process could take it), others
    :data:`~prefixplan.trace.shards.IN_FLIGHT_PER_WORKER`."""
    whole = job.range is None and job.lines is None and job.requests is None
    return 1 if whole else IN_FLIGHT_PER_WORKER


def run_local(jobs: Iterable[ShardJob], run: Run) -> Iterator[ShardResult]:
    """Shard results in job order from ``run.processes`` local processes, a bounded window ahead
    (module docstring: jobs no ready worker can take are rendered here)."""
    from concurrent.futures.process import BrokenProcessPool

    from prefixplan.errors import TokenizerError
    from prefixplan.trace.dispatch import Dispatcher

    workers = max(1, run.processes - 1)  # this process renders too
    window: deque[Future[ShardResult]] = deque()  # each job's slot, in job order
    pool: Pool | None = None
    dispatch: Dispatcher[ShardJob, ShardResult] | None = None
    owned = False
    finished = False

    def render_here(taken: tuple[Future[ShardResult], ShardJob] | None) -> bool:
        if taken is None:
            return False
        slot, job = taken
        slot.set_result(render_shard(job, run.renderers))
        return True

    try:

        def first() -> ShardResult:
            """The oldest slot's result: its job rendered here if no worker has taken it, else
            waiting jobs rendered here while a worker renders it."""
            assert dispatch is not None and pool is not None
            head = window[0]
            if not render_here(dispatch.take(head)):
                while not head.done() and render_here(dispatch.take()):
                    pass
            window.popleft()
            try:
                return head.result()
            except BrokenProcessPool as exc:
                _forget(pool)
                raise TokenizerError(
                    f"a render worker stopped unexpectedly ({exc or 'killed, or out of memory'})",
                    hint="run again with fewer --workers (--workers 1 renders in this process)",
                ) from None

        for job in jobs:
            if pool is None:
                pool, owned = _pool(workers, job.source, run.processes)
                dispatch = Dispatcher(partial(pool.executor.submit, render_shard), pool.ready_workers, depth)
                for started in pool.ready:  # a worker that becomes ready takes waiting jobs
                    started.add_done_callback(dispatch.fill)
            assert dispatch is not None
            window.append(dispatch.add(job))
            while window and window[0].done():  # hand back what is done, in job order
                yield first()
            ready = pool.ready_workers()
            # keep as many jobs waiting as the workers would take next; past that, render one here
            if dispatch.waiting() > ready * depth(job):
                render_here(dispatch.take())
            if run.on_load is not None:  # this process counts as busy: it renders when they all are
                run.on_load(min(ready, dispatch.held()) + 1, workers + 1)
            while len(window) >= WINDOW_PER_PROCESS * (workers + 1):  # results wait for an earlier job
                yield first()
        # every job is handed out: render what no worker has taken, oldest first, then wait
        while window:
            yield first()
        finished = True
    finally:
        # Stopped early (an error, a consumer that left): waiting and queued jobs are cancelled
        # and nothing waits for the running ones. A generator left suspended may also be closed
        # by the garbage collector on any thread, the pool's manager thread included, which
        # cannot join itself. Workers still starting when the run ends are not waited for.
        if dispatch is not None:
            dispatch.close()
        if pool is not None and owned:
            pool.shutdown(wait=finished)
