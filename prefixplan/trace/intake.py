"""The intake: one pass over a command's input, as trace rows in input order.

Every command that reads logs (``analyze`` and its documents-first what-if, ``simulate``,
``trace``) takes its input through an :class:`Intake`, which owns what they used to repeat:

* a trace file written earlier is read as it is (no tokenizer; its block size is checked, its
  line errors are the run's);
* logs are cut into :class:`~prefixplan.trace.shards.ShardJob` values — whole files (at least
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
from collections.abc import Callable, Generator, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from prefixplan.core.progress import NO_PROGRESS, Progress
from prefixplan.core.types import Request
from prefixplan.errors import PrefixplanError, UsageError
from prefixplan.logs import LineErrors, ReadMeter
from prefixplan.logs.detect import JSONL
from prefixplan.logs.noinput import no_requests_error, nothing_left_error
from prefixplan.render import RenderSet
from prefixplan.render.stream import RenderFailure, SourceOptions, iter_source_requests, source_meter
from prefixplan.trace.columns import RowColumns
from prefixplan.trace.executors import Executor, Run, run_jobs
from prefixplan.trace.gcpolicy import relaxed_gc
from prefixplan.trace.meta import check_block_size, line_errors_json, line_errors_of, renderers_json
from prefixplan.trace.parquet import TraceFile, trace_input
from prefixplan.trace.rows import TraceRow
from prefixplan.trace.shards import ShardJob, ShardResult, TextPartial, merge_stats
from prefixplan.trace.writer import TraceWriter, base_meta

BATCH = 64
"""Lines (or parsed requests) per job when a file is shared by several workers."""
INLINE_BATCH = 1024
"""Lines (or requests) per job rendered in this process (fewer, larger parts to merge)."""
SPILL_RATIO = 4
"""Decompressed bytes per compressed byte assumed when sizing a compressed log's pieces."""
RAY_RANGE_ACTORS = 16
"""Actors a plain file's byte ranges are sized for when ``--workers`` does not say (Ray)."""


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
        transform: rewrites each request before rendering (picklable; may count what it did in
            an attribute ``moved``, summed in :attr:`Intake.moved`).
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
    transform: Callable[[Request], Request] | None = None
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
        self._spilled: str | None = None  # the folder of decompressed pieces, while a pass runs
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
            if self._spilled is not None:
                import shutil

                shutil.rmtree(self._spilled, ignore_errors=True)
                self._spilled = None

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
        """Whole files (at least two per worker, or Ray: there byte ranges of plain JSON-lines
        files); else, with local workers, byte ranges of each plain JSON-lines file, pieces of
        compressed or remote ones (both read by the workers themselves) and batches of the other
        inputs' requests; in this process, batches. Each job carries only its own part."""
        plan = self.plan
        source = plan.source
        # a job carries the options, never the run's in-memory records (each its own part)
        job_source = replace(source, objects=None) if source.objects is not None else source
        batch = INLINE_BATCH if run.kind == "inline" else BATCH
        counter = iter(range(2**62))

        def job(path: str, **part: Any) -> ShardJob:
            return ShardJob(
                next(counter),
                path,
                job_source,
                plan.block_size,
                plan.routing,
                plan.text,
                plan.transform,
                columns=columns,
                **part,
            )

        from prefixplan.logs import ranges
        from prefixplan.logs.read import check_columns
        from prefixplan.logs.remote import shown

        files = _shardable(source, run, self._inputs())
        if files is not None:
            check_columns(files, source.read)
            for path in files:
                how = ranges.splittable(path, source.read) if run.kind == "ray" else None
                if how is None:
                    self.errors.opened(shown(path))  # ranks as listed, beside files read in ranges
                    yield job(path)
                else:  # actors on other nodes read the same path (a shared file system): in ranges
                    yield from self._range_jobs(path, how, run.executor.workers or RAY_RANGE_ACTORS, job)
            return
        if run.kind == "inline" or source.objects is not None or "-" in source.paths:
            yield from self._batch_jobs(None, meter, batch, job)
            return
        expanded = self._inputs() or []
        check_columns(expanded, source.read)
        for path in expanded:
            how = ranges.splittable(path, source.read)
            if how is not None:
                yield from self._range_jobs(path, how, run.processes, job)
            elif not (yield from self._piece_jobs(path, run, meter, job)):
                yield from self._batch_jobs([path], meter, batch, job)

    def _range_jobs(self, path: str, how: str, readers: int, job: Callable[..., ShardJob]) -> Iterator[ShardJob]:
        """Jobs of byte ranges of the plain JSON-lines file ``path``, about four per reader."""
        from prefixplan.logs import ranges
        from prefixplan.logs.remote import shown
        from prefixplan.logs.textlog import SourceInfo

        name = shown(path)
        self.errors.opened(name)
        self.errors.sources.setdefault(name, SourceInfo(JSONL, how))
        size = ranges.range_size(os.path.getsize(path), readers)
        for rng in ranges.line_ranges(path, range_bytes=size):
            yield job(path, range=rng)

    def _piece_jobs(
        self, path: str, run: Run, meter: ReadMeter | None, job: Callable[..., ShardJob]
    ) -> Generator[ShardJob, None, bool]:
        """Jobs of the pieces of a compressed or remote JSON-lines file, decompressed here into
        temporary files the workers read (:mod:`prefixplan.logs.pieces`); False (no job) for a
        table or another format, read as batches instead."""
        from prefixplan.logs import pieces, ranges
        from prefixplan.logs.open import open_log
        from prefixplan.logs.paths import input_size
        from prefixplan.logs.remote import shown
        from prefixplan.logs.tables import table_format
        from prefixplan.logs.textlog import SourceInfo

        read = self.plan.source.read
        if table_format(path, read.format) is not None:
            return False
        with open_log(path, on_open=meter.opened if meter is not None else None) as stream:
            found = pieces.sniffed_jsonl(stream, read.format, read.max_line_bytes)
            if found is None:
                return False
            how, head = found
            name = shown(path)
            self.errors.opened(name)
            self.errors.sources.setdefault(name, SourceInfo(JSONL, how))
            size = input_size(path)
            per_range = ranges.range_size(SPILL_RATIO * size, run.processes) if size else ranges.RANGE_BYTES
            for rng in pieces.spill(stream, head, self._spill_dir(), per_range):
                yield job(path, range=rng)
        if meter is not None:
            meter.closed()
        return True

    def _spill_dir(self) -> str:
        """This pass's folder for decompressed pieces (removed when the pass ends)."""
        if self._spilled is None:
            import tempfile

            self._spilled = tempfile.mkdtemp(prefix="prefixplan-pieces-")
        return self._spilled

    def _batch_jobs(
        self, paths: list[str] | None, meter: ReadMeter | None, batch: int, job: Callable[..., ShardJob]
    ) -> Iterator[ShardJob]:
        """Jobs of consecutive lines (JSON-lines files: read here, parsed where the job runs) or of
        requests (in-memory records, server logs, tables: parsed here), in input order, from
        ``paths`` (None: the whole source)."""
        import uuid

        from prefixplan.logs.read import LineBatch, iter_read_items
        from prefixplan.logs.tables import table_format

        source = self.plan.source
        items: Iterator[Request | LineBatch]
        if paths is None and source.objects is not None:
            items = iter_source_requests(source, self.errors, meter)
        else:
            read = source.read
            if paths is not None and read.columns and all(table_format(p, read.format) is None for p in paths):
                read = replace(read, columns=())  # checked against the run's inputs: for its tables
            expanded = (self._inputs() or []) if paths is None else paths
            items = iter_read_items(expanded, read, self.errors, meter, batch_lines=batch)
        run_id = uuid.uuid4().hex  # jobs are handed out in order: a worker leaves out what it sent
        pending: list[Request] = []
        try:
            for item in items:
                if isinstance(item, LineBatch):
                    if pending:
                        yield job("", requests=tuple(pending), run=run_id)
                        pending = []
                    yield job("", lines=item, run=run_id)
                    continue
                pending.append(item)
                if len(pending) >= batch:
                    yield job("", requests=tuple(pending), run=run_id)
                    pending = []
        except PrefixplanError as exc:  # strict mode: raised after what was read before it
            yield job("", requests=tuple(pending), run=run_id, error=exc)
            return
        if pending:
            yield job("", requests=tuple(pending), run=run_id)

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


def _shardable(source: SourceOptions, run: Run, files: list[str] | None) -> list[str] | None:
    """The input ``files`` (expanded) when each is one job (at least two per worker, or Ray),
    else None."""
    ray = run.kind == "ray"
    if source.objects is not None or "-" in source.paths:
        if ray:
            raise UsageError(
                "--executor ray reads files or URLs, not stdin or in-memory records",
                hint="give the log's path (local or s3://, gs://, az://, https://)",
            )
        return None
    if run.kind == "inline" or files is None:
        return None
    if ray or len(files) >= 2 * run.processes:
        return files
    return None
