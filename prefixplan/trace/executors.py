"""Where shards render: one :class:`Executor` value, three ways to run the same shard function.

Every executor takes :class:`~prefixplan.trace.shards.ShardJob` values and gives back one
:class:`~prefixplan.trace.shards.ShardResult` per job, in job order, from the same
:func:`~prefixplan.trace.shards.render_shard`:

* ``inline``: in the calling process, with the caller's own renderers (one worker, small inputs);
* ``local``: a pool of processes on this machine (``--workers N``); the pool lives for the
  whole command (:func:`session`), so a second pass over the input (the documents-first what-if)
  finds its workers started and their tokenizers loaded;
* ``ray``: a pool of Ray actors (``--executor ray``, :mod:`prefixplan.trace.ray_executor`).

The runners are found in a lazy registry (:data:`RUNNERS`): nothing of Ray or multiprocessing is
imported until a run needs it.
"""

from __future__ import annotations

import contextlib
import importlib
import os
from collections.abc import Callable, Iterable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from prefixplan.errors import UsageError
from prefixplan.trace.shards import ShardJob, ShardResult, render_shard

if TYPE_CHECKING:
    from prefixplan.logs import ReadMeter
    from prefixplan.render import RenderSet
    from prefixplan.render.stream import SourceOptions

EXECUTORS = ("local", "ray")
"""What ``--executor`` accepts: processes on this machine (one worker: in-process) or Ray actors."""
SMALL_INPUT_BYTES = 4 * 2**20
"""Inputs below this size render in-process by default: starting workers costs more than it saves."""
RUNNERS: dict[str, str] = {
    "inline": "prefixplan.trace.executors:run_inline",
    "local": "prefixplan.trace.local_pool:run_local",
    "ray": "prefixplan.trace.ray_executor:run_ray",
}
"""Executor kind -> ``module:function`` running jobs (imported when first used)."""


@dataclass(frozen=True)
class Executor:
    """Where rendering runs, decided once per command.

    Attributes:
        kind: ``"local"`` (processes on this machine; one worker renders in this process) or
            ``"ray"`` (actors on a Ray cluster, one input file each).
        workers: processes (local) or actors (Ray); None: one per core for file inputs of at
            least :data:`SMALL_INPUT_BYTES` (local), one per cluster CPU (Ray).
        ray_address: the cluster to join (``auto``, ``ray://HOST:10001``; None: ``RAY_ADDRESS``
            or a new local cluster).
    """

    kind: str = "local"
    workers: int | None = None
    ray_address: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in EXECUTORS:
            raise UsageError(f"unknown executor {self.kind!r}", hint=f"use one of: {', '.join(EXECUTORS)}")
        if self.ray_address is not None and self.kind != "ray":
            raise UsageError("--ray-address needs --executor ray")
        if self.workers is not None and (isinstance(self.workers, bool) or int(self.workers) < 1):
            raise UsageError("--workers must be >= 1", hint="omit it for one worker per core")

    @property
    def ray(self) -> bool:
        return self.kind == "ray"

    def processes(self, source: SourceOptions, meter: ReadMeter | None = None) -> int:
        """Local processes for ``source``: ``workers``, else :func:`default_workers` (1 means
        in this process; ``meter``: the input's sizes when the caller has them). Ray's pool is
        sized by the cluster instead (1 here)."""
        if self.ray:
            return 1
        return max(1, int(self.workers)) if self.workers is not None else default_workers(source, meter)


def default_workers(source: SourceOptions, meter: ReadMeter | None = None) -> int:
    """One per core for file inputs of at least :data:`SMALL_INPUT_BYTES`, else 1 (``meter``:
    the files' sizes, measured here when not given)."""
    if source.objects is not None or "-" in source.paths:
        return 1
    if meter is None:
        from prefixplan.render.stream import source_meter

        meter = source_meter(source)
    size = meter.total_bytes if meter is not None else None  # local files and URLs
    if size is None:
        return 1
    return (os.cpu_count() or 1) if size >= SMALL_INPUT_BYTES else 1


@dataclass(frozen=True)
class Run:
    """What a runner is given besides its jobs: the executor, the caller's renderers (used in
    process), the number of local processes (:meth:`Executor.processes`) and who hears how many
    of them are busy."""

    executor: Executor
    renderers: RenderSet
    processes: int
    on_load: Callable[[int, int], None] | None = None
    """Told (busy, total) render workers as jobs come and go (progress)."""

    @property
    def kind(self) -> str:
        """The runner: ``ray``, ``local`` (more than one process) or ``inline``."""
        if self.executor.ray:
            return "ray"
        return "local" if self.processes > 1 else "inline"


def run_jobs(jobs: Iterable[ShardJob], run: Run) -> Iterator[ShardResult]:
    """Results of ``jobs`` in job order from the runner of ``run.kind`` (:data:`RUNNERS`)."""
    module, _, name = RUNNERS[run.kind].partition(":")
    result: Iterator[ShardResult] = getattr(importlib.import_module(module), name)(jobs, run)
    return result


def run_inline(jobs: Iterable[ShardJob], run: Run) -> Iterator[ShardResult]:
    """Each job rendered here, in order, with the caller's renderers (a tokenizer loaded once
    serves the run and whatever the caller renders afterwards)."""
    for job in jobs:
        yield render_shard(job, run.renderers)


# -- a pool for the whole command --------------------------------------------------------------

_POOLS: ContextVar[dict[tuple[Any, ...], Any] | None] = ContextVar("prefixplan_pools", default=None)


@contextlib.contextmanager
def session() -> Iterator[None]:
    """Keep local worker pools started inside this block alive until it ends (one command: the
    first pass and the what-if share workers); nested sessions share the outer one's."""
    if _POOLS.get() is not None:
        yield
        return
    token = _POOLS.set({})
    try:
        yield
    finally:
        pools = _POOLS.get() or {}
        _POOLS.reset(token)
        for pool in pools.values():
            pool.shutdown()


def session_pools() -> dict[tuple[Any, ...], Any] | None:
    """The pools of the current :func:`session` (None outside one)."""
    return _POOLS.get()
