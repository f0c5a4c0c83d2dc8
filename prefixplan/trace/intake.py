"""The intake: one pass over a command's input, as trace rows in input order.

Every command that reads logs (``analyze`` and its documents-first what-if, ``simulate``,
``trace``) takes its input through an :class:`Intake`, which owns what they used to repeat:

* a trace file written earlier is read as it is (no tokenizer; its block size is checked, its
  line errors are the run's);
* logs are cut into :class:`~prefixplan.trace.shards.ShardJob` values
  (:mod:`prefixplan.trace.jobplan`) — whole files (at least
  two per worker, or with Ray), else byte ranges of plain JSON-lines files and line-aligned
  pieces of compressed or remote ones (decompressed here into temporary files; both read and
  parsed by the worker), else batches of requests parsed here (in-memory records, server logs,
  tables), each job carrying only its own part — and rendered by the command's
  :class:`~prefixplan.trace.executors.Executor`;
* the results merge in job order: rows (or columns, for a consumer that takes them), line
  errors (file:line and reason), render failures, the renderers' statistics, the workers' own
  figures and, through ``on_shard``, each job's text partial;
* progress, the ``--trace-out`` writer (closed with what the run knew of its input, or aborted
  so that no half-written file is left) and the "nothing was read" errors.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from prefixplan.core.progress import NO_PROGRESS, Progress
from prefixplan.errors import UsageError
from prefixplan.logs import LineErrors, ReadMeter
from prefixplan.logs.noinput import no_requests_error, nothing_left_error
from prefixplan.render import RenderSet
from prefixplan.render.stream import RenderFailure, SourceOptions, source_meter
from prefixplan.trace.columns import RowColumns
from prefixplan.trace.executors import Executor, Run, run_jobs
from prefixplan.trace.gcpolicy import relaxed_gc
from prefixplan.trace.jobplan import JobPlanner
from prefixplan.trace.meta import check_block_size, line_errors_json, line_errors_of, renderers_json
from prefixplan.trace.parquet import TraceFile, trace_input
from prefixplan.trace.rows import TraceRow
from prefixplan.trace.shards import ShardJob, ShardResult, TextPartial, Transform, merge_stats
from prefixplan.trace.writer import TraceWriter, base_meta


@dataclass(frozen=True)
class IntakePlan:
    """What a pass reads and how.

    Attributes:
        source: the input and its tokenizers.
        executor: where rendering runs.
        block_size: trace block size in tokens.
        describe: the granularity's description, kept in a written trace file.
        routing: rows carry the gateway's routing keys.
        text: makes a job's text partial (analyze); each reaches ``on_shard``.
        transform: rewrites each request before rendering, or leaves it unrendered (a reference
            row: :class:`~prefixplan.trace.inprocess.Unrendered`); picklable; may count what it
            did in an attribute ``moved``, summed in :attr:`Intake.moved`.
        trace_out: also write the rows to this trace file.
        accept_trace: a trace file is a valid input (else a usage error).
        preload: with workers, load the first row's renderer here meanwhile (the caller renders
            a few requests itself afterwards).
        label: what progress calls the pass.
    """

    source: SourceOptions
    executor: Executor = field(default_factory=Executor)
    block_size: int = 16
    describe: str = ""
    routing: bool = False
    text: Callable[[], TextPartial] | None = None
    transform: Transform | None = None
    trace_out: str | os.PathLike[str] | None = None
    accept_trace: bool = True
    preload: bool = False
    label: str = "reading and rendering"


class Intake:
    """One pass over ``plan.source`` (module docstring). Use as a context manager when writing a
    trace file: leaving the block with an error removes the partial file; leaving it normally
    closes it with :meth:`input_meta` (and what :meth:`close` adds)."""

    def __init__(
        self,
        plan: IntakePlan,
        progress: Progress = NO_PROGRESS,
        *,
        renderers: RenderSet | None = None,
        on_shard: Callable[[ShardResult], None] | None = None,
    ) -> None:
        self.plan = plan
        self.progress = progress
        self.on_shard = on_shard
        self.trace: TraceFile | None = trace_input(plan.source)
        self.errors = LineErrors()
        self.failures: list[RenderFailure] = []
        self.requests = 0
        self.tokens = 0
        self.moved = 0
        self.workers: dict[str, dict[str, float]] = {}
        """``host:pid`` -> jobs, peak RSS (MB), busy and CPU seconds of each process that rendered."""
        self.writer: TraceWriter | None = None
        self._expanded: list[str] | None = None
        self._planner: JobPlanner | None = None  # the pass's jobs (and pieces on disk), while it runs
        if self.trace is not None:
            if not plan.accept_trace:
                raise UsageError("the input is a trace already", hint="pass the log to write a trace from it")
            if plan.trace_out is not None:
                raise UsageError("--trace-out writes a trace while rendering a log; the input is a trace already")
            check_block_size(self.trace.meta, plan.block_size, str(self.trace.path))
            self.errors = line_errors_of(self.trace.meta.get("line_errors"))
            self.renderers: RenderSet | None = None
        else:
            self.renderers = renderers if renderers is not None else plan.source.renderers()
            if plan.trace_out is not None:
                self.writer = TraceWriter(plan.trace_out, base_meta(plan.block_size, {"describe": plan.describe}))

    def _inputs(self) -> list[str] | None:
        """The source's files, expanded once per pass (a bucket prefix is listed once); None
        for in-memory records."""
        if self._expanded is None and self.plan.source.objects is None:
            from prefixplan.logs import expand_paths

            self._expanded = expand_paths(self.plan.source.paths)
        return self._expanded

    # -- the pass ------------------------------------------------------------------------------

    def rows(self) -> Iterator[TraceRow]:
        """Every row, in input order (index = position among rendered requests)."""
        for item in self.batches(columns=False):
            assert isinstance(item, TraceRow)
            yield item

    def batches(self, columns: bool = True) -> Iterator[TraceRow | RowColumns]:
        """The rows in input order, as :class:`RowColumns` batches where ``columns`` allows and no
        trace file is being written (the writer takes rows), else one :class:`TraceRow` each."""
        columns = columns and self.writer is None
        if self.trace is not None:
            yield from self._trace_rows(self.trace, columns)
            return
        meter = source_meter(self.plan.source, self._inputs())
        self.progress.begin(self.plan.label, meter.total_bytes if meter is not None else None)
        try:
            with relaxed_gc():  # reading makes garbage by the million, and almost no cycles
                for item in self._rendered(meter, columns):
                    if isinstance(item, RowColumns):
                        self.requests += item.n
                        self.tokens += int(item.prompt_tokens.sum())
                    else:
                        if self.writer is not None:
                            self.writer.write(item)
                        self.requests += 1
                        self.tokens += int(item.prompt_tokens)
                    yield item
            self.progress.update(self.requests, self.tokens, meter.done() if meter is not None else None)
        finally:
            self.progress.end()
        self._check_something_read()

    def _trace_rows(self, trace: TraceFile, columns: bool) -> Iterator[TraceRow | RowColumns]:
        self.progress.begin("reading the trace", None)
        try:
            if columns:
                for cols in trace.columns():
                    self.requests += cols.n
                    self.tokens += int(cols.prompt_tokens.sum())
                    self.progress.update(self.requests, self.tokens, None)
                    yield cols
            else:
                for row in trace.rows():
                    self.requests += 1
                    self.tokens += int(row.prompt_tokens)
                    if self.requests % 4096 == 1:
                        self.progress.update(self.requests, self.tokens, None)
                    yield row
            self.progress.update(self.requests, self.tokens, None)
        finally:
            self.progress.end()

    def _rendered(self, meter: ReadMeter | None, columns: bool) -> Iterator[TraceRow | RowColumns]:
        plan = self.plan
        assert self.renderers is not None
        run = Run(plan.executor, self.renderers, _processes(plan, meter), on_load=self.progress.workers)
        results = run_jobs(self._jobs(run, meter, columns), run)
        preload = plan.preload and run.kind != "inline"
        index = 0
        try:
            for result in results:
                if result.error is not None:
                    raise result.error
                self._merge(result, meter)
                if columns:
                    cols = result.take_columns()
                    if cols.n:
                        if preload:
                            preload = False
                            self.renderers.preload(cols.model.values[int(cols.model.codes[0])])
                        yield replace(cols, index=np.arange(index, index + cols.n, dtype=np.int64))
                        index += cols.n
                else:
                    rows = result.take_rows()
                    if preload and rows:
                        preload = False
                        self.renderers.preload(rows[0].model)
                    for row in rows:
                        row.index = index  # indexes count rendered requests, whatever the jobs
                        index += 1
                        yield row
                self.progress.update(index, self.tokens, _done(meter))
        finally:
            # stopped early (an error, a consumer that left): the executor stops here, in this
            # thread, not when the garbage collector finds it on another one
            close = getattr(results, "close", None)
            if close is not None:
                close()
            if self._planner is not None:
                self._planner.remove_pieces()
                self._planner = None

    def _merge(self, result: ShardResult, meter: ReadMeter | None) -> None:
        assert self.renderers is not None
        self.errors.merge(result.errors)
        self.failures.extend(result.failures)
        merge_stats(self.renderers, result.stats)
        self.moved += result.moved
        seen = self.workers.setdefault(
            result.worker, {"jobs": 0, "peak_rss_mb": 0.0, "seconds": 0.0, "cpu_seconds": 0.0}
        )
        seen["jobs"] += 1
        seen["seconds"] += result.seconds
        seen["cpu_seconds"] += result.cpu_seconds
        seen["peak_rss_mb"] = max(seen["peak_rss_mb"], result.peak_rss_mb)
        if meter is not None and result.size:
            meter.add_done(result.size)
        if self.on_shard is not None:
            self.on_shard(result)

    # -- the jobs ------------------------------------------------------------------------------
    def _jobs(self, run: Run, meter: ReadMeter | None, columns: bool = False) -> Iterator[ShardJob]:
        """The pass's jobs (:class:`~prefixplan.trace.jobplan.JobPlanner`); its pieces of
        compressed logs are removed when the pass ends."""
        self._planner = JobPlanner(self.plan, self.errors, self._inputs)
        return self._planner.jobs(run, meter, columns)

    def _check_something_read(self) -> None:
        errors, source = self.errors, self.plan.source
        if errors.requests_read == 0 and (errors.lines_read > 0 or errors.count > 0):
            raise no_requests_error(errors, source.display)
        if self.requests == 0 and errors.requests_read > 0:
            read = source.read
            windowed = read.since is not None or read.until is not None
            raise nothing_left_error(errors, source.display, windowed=windowed, sample=read.sample)

    # -- the trace file ------------------------------------------------------------------------

    def input_meta(self) -> dict[str, Any]:
        """What a trace file written from this pass records of its input."""
        return {
            "inputs": {"paths": list(self.plan.source.display)},
            "line_errors": line_errors_json(self.errors),
            "tokenizers": renderers_json(self.renderers) if self.renderers is not None else [],
        }

    def close(self, meta: Mapping[str, Any] | None = None) -> None:
        """Finish the trace file (if one is written) with :meth:`input_meta`, then ``meta``."""
        if self.writer is not None:
            writer, self.writer = self.writer, None
            writer.close({**self.input_meta(), **(meta or {})})

    def abort(self) -> None:
        """Remove the partial trace file (if one is written)."""
        if self.writer is not None:
            writer, self.writer = self.writer, None
            writer.abort()

    def __enter__(self) -> Intake:
        return self

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> None:
        if kind is not None:
            self.abort()
        else:
            self.close()


def _processes(plan: IntakePlan, meter: ReadMeter | None) -> int:
    """Local processes for the pass: the executor's, or 1 (with a warning saying what to add)
    when the calling script would run again in each worker (:mod:`prefixplan.trace.mainguard`)."""
    n = plan.executor.processes(plan.source, meter)
    if n > 1 and not plan.executor.ray:
        from prefixplan.trace.mainguard import unguarded_call

        where = unguarded_call()
        if where is not None:
            import warnings

            warnings.warn(
                f"{where}: prefixplan renders in this process, not in {n} workers: each worker would run this "
                'script again. Put the script\'s top-level code under `if __name__ == "__main__":` to use them.',
                RuntimeWarning,
                stacklevel=2,
            )
            return 1
    return n


def _done(meter: ReadMeter | None) -> int | None:
    return meter.done() if meter is not None else None
