"""Rendering on every core: requests in, trace rows out, in input order.

With N > 1 workers the log is cut into jobs (:class:`~prefixplan.trace.shards.ShardJob`) that
worker processes render, each loading the tokenizers once:

* whole files, when there are at least two files per worker (or with ``--executor ray``):
  the worker reads, parses and renders its file;
* else batches of consecutive lines of a JSON-lines file, read here and parsed by the worker
  (so parsing, the costly part of reading, is spread too), or batches of requests parsed here
  (engine server logs, tables, in-memory records).

Workers send back compact :class:`TraceRow` records (block keys and spans, a few hundred bytes
per request: never token arrays, which made an earlier design IPC-bound), the line errors of
their part and, for analyze, what its text showed; the parent keeps a bounded window of jobs in
flight and merges results in job order, so the output is the same whatever the number of
workers. Renderer statistics (which tokenizer rendered which model, engine-id checks) are merged
back into the parent's :class:`~prefixplan.render.RenderSet`, with what the record says of each
tokenizer (:class:`~prefixplan.render.RendererFacts`): the parent loads none just to describe it.

With one worker (or a small input) everything runs in the calling process.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any, Literal, overload

import numpy as np

from prefixplan.core.types import Request, Segment, SegmentHash
from prefixplan.errors import UsageError
from prefixplan.logs import LineErrors, ReadMeter
from prefixplan.logs.noinput import no_requests_error, nothing_left_error
from prefixplan.render import RenderSet
from prefixplan.render.stream import RenderFailure, SourceOptions, iter_source_requests
from prefixplan.trace.columns import RowColumns
from prefixplan.trace.gcpolicy import relaxed_gc
from prefixplan.trace.inprocess import Rendered, failure_handler, render_in_process
from prefixplan.trace.rows import RowMaker, TraceRow
from prefixplan.trace.shards import ShardJob, ShardResult, TextPartial, merge_stats, run_local

SMALL_INPUT_BYTES = 4 * 2**20
"""Inputs below this size render in-process by default: starting workers costs more than it saves."""
BATCH = 64
"""Lines (or parsed requests) per job when a file is shared by several workers."""


def default_workers(source: SourceOptions) -> int:
    """One per core for file inputs of at least :data:`SMALL_INPUT_BYTES`, else 1."""
    if source.objects is not None or "-" in source.paths:
        return 1
    from prefixplan.logs import expand_paths

    size = ReadMeter.for_paths(expand_paths(source.paths)).total_bytes  # local files and URLs
    if size is None:
        return 1
    return (os.cpu_count() or 1) if size >= SMALL_INPUT_BYTES else 1


@dataclass(frozen=True, slots=True)
class RenderedColumns:
    """A worker's rendered requests for one job as columns (``iter_rendered(columns=True)``):
    their text pass came with the job, so nothing here needs a row object."""

    columns: RowColumns


def row_segments(row: TraceRow) -> tuple[Segment, ...]:
    """A row's segment spans as :class:`Segment` records."""
    from prefixplan.core.types import SEGMENT_KINDS

    return tuple(
        Segment(
            SEGMENT_KINDS[int(k)],
            int(a),
            int(b),
            SegmentHash(f"{int(h):016x}"),
            int(i),
            name,
        )
        for k, a, b, i, h, name in zip(
            row.seg_kind, row.seg_start, row.seg_end, row.seg_index, row.seg_hash, row.seg_names, strict=True
        )
    )


# -- parent side -----------------------------------------------------------------------------


@overload
def iter_rendered(
    source: SourceOptions,
    errors: LineErrors,
    renderers: RenderSet,
    *,
    block_size: int,
    routing: bool = False,
    workers: int | None = None,
    transform: Callable[[Request], Request] | None = None,
    failures: list[RenderFailure] | None = None,
    meter: ReadMeter | None = None,
    text: Callable[[], TextPartial] | None = None,
    on_shard: Callable[[ShardResult], None] | None = None,
    preload: bool = False,
    columns: Literal[False] = False,
) -> Iterator[Rendered]: ...


@overload
def iter_rendered(
    source: SourceOptions,
    errors: LineErrors,
    renderers: RenderSet,
    *,
    block_size: int,
    routing: bool = False,
    workers: int | None = None,
    transform: Callable[[Request], Request] | None = None,
    failures: list[RenderFailure] | None = None,
    meter: ReadMeter | None = None,
    text: Callable[[], TextPartial] | None = None,
    on_shard: Callable[[ShardResult], None] | None = None,
    preload: bool = False,
    columns: bool,
) -> Iterator[Rendered | RenderedColumns]: ...


def iter_rendered(
    source: SourceOptions,
    errors: LineErrors,
    renderers: RenderSet,
    *,
    block_size: int,
    routing: bool = False,
    workers: int | None = None,
    transform: Callable[[Request], Request] | None = None,
    failures: list[RenderFailure] | None = None,
    meter: ReadMeter | None = None,
    text: Callable[[], TextPartial] | None = None,
    on_shard: Callable[[ShardResult], None] | None = None,
    preload: bool = False,
    columns: bool = False,
) -> Iterator[Rendered | RenderedColumns]:
    """Read ``source`` and render it into rows at ``block_size`` tokens, in input order, on
    ``workers`` processes (None: ``source.workers``, else :func:`default_workers`). Render failures are counted in
    ``errors`` (and listed in ``failures``) unless the read options are strict.

    With more than one worker (or ``--executor ray``) the work goes out as jobs (module
    docstring); each job's text-level partial (``text``) and outcome reach ``on_shard`` in input
    order and rows come without their request. In this process, rows come with their request.
    ``preload``: the caller renders a few requests itself afterwards; with workers, the first
    row's renderer loads here meanwhile (:meth:`RenderSet.preload`). ``columns``: a worker's
    rows come as one :class:`RenderedColumns` per job, not a :class:`Rendered` per row (for a
    caller that does not look at each row).
    """
    if workers is None:
        workers = source.workers
    asked = workers
    n = (1 if source.executor == "ray" else default_workers(source)) if workers is None else max(1, int(workers))
    files = _shardable(source, n)
    job_text = text if on_shard is not None else None
    rendered: Iterator[Rendered | RenderedColumns]
    jobs: Iterator[ShardJob]
    if files is not None:
        from prefixplan.logs.read import check_columns

        check_columns(files, source.read)
        jobs = (ShardJob(i, path, source, block_size, routing, job_text, transform) for i, path in enumerate(files))
        if source.executor == "ray":
            from prefixplan.trace.ray_executor import run_ray

            results = run_ray(jobs, source.ray_address, asked)
        else:
            results = run_local(jobs, n)
        rendered = _merge_results(results, errors, renderers, failures, meter, on_shard, preload, columns)
    elif n <= 1:
        requests: Iterator[Request] = iter_source_requests(source, errors, meter)
        if transform is not None:
            requests = (transform(r) for r in requests)
        failed = failure_handler(source, errors, failures)
        rendered = render_in_process(
            requests, renderers, RowMaker(block_size, routing=routing), source.render_batch, failed
        )
    else:
        jobs = _batch_jobs(source, errors, meter, block_size, routing, transform, job_text)
        rendered = _merge_results(run_local(jobs, n), errors, renderers, failures, meter, on_shard, preload, columns)
    produced = 0
    with relaxed_gc():  # reading makes garbage by the million, and almost no cycles
        for one in rendered:
            produced += one.columns.n if isinstance(one, RenderedColumns) else 1
            yield one
    if errors.requests_read == 0 and (errors.lines_read > 0 or errors.count > 0):
        raise no_requests_error(errors, source.display)
    if produced == 0 and errors.requests_read > 0:
        read = source.read
        windowed = read.since is not None or read.until is not None
        raise nothing_left_error(errors, source.display, windowed=windowed, sample=read.sample)


def _batch_jobs(
    source: SourceOptions,
    errors: LineErrors,
    meter: ReadMeter | None,
    block_size: int,
    routing: bool,
    transform: Callable[[Request], Request] | None,
    text: Callable[[], TextPartial] | None,
) -> Iterator[ShardJob]:
    """Jobs of consecutive lines (JSON-lines files: read here, parsed by the workers) or of
    requests (in-memory records, server logs, tables: parsed here), in input order."""
    import uuid

    from prefixplan.logs.read import LineBatch, iter_read_items

    items: Iterator[Request | LineBatch]
    if source.objects is not None:
        items = iter_source_requests(source, errors, meter)
    else:
        from prefixplan.logs import expand_paths

        items = iter_read_items(expand_paths(source.paths), source.read, errors, meter, batch_lines=BATCH)
    run = uuid.uuid4().hex  # a local pool hands jobs out in order: workers may leave out what they sent
    index = 0
    pending: list[Request] = []

    def job(**part: Any) -> ShardJob:
        nonlocal index
        index += 1
        return ShardJob(index - 1, "", source, block_size, routing, text, transform, run=run, **part)

    for item in items:
        if isinstance(item, LineBatch):
            if pending:
                yield job(requests=tuple(pending))
                pending = []
            yield job(lines=item)
            continue
        pending.append(item)
        if len(pending) >= BATCH:
            yield job(requests=tuple(pending))
            pending = []
    if pending:
        yield job(requests=tuple(pending))


def _shardable(source: SourceOptions, workers: int) -> list[str] | None:
    """The input files when they are rendered one per worker, else None."""
    ray = source.executor == "ray"
    if source.objects is not None or "-" in source.paths:
        if ray:
            raise UsageError(
                "--executor ray reads files or URLs, not stdin or in-memory records",
                hint="give the log's path (local or s3://, gs://, az://, https://)",
            )
        return None
    if not ray and workers <= 1:
        return None
    from prefixplan.logs import expand_paths

    files = expand_paths(source.paths)
    if ray or len(files) >= 2 * workers:
        return files
    return None


def _merge_results(
    results: Iterator[ShardResult],
    errors: LineErrors,
    renderers: RenderSet,
    failures: list[RenderFailure] | None,
    meter: ReadMeter | None,
    on_shard: Callable[[ShardResult], None] | None,
    preload: bool = False,
    columns: bool = False,
) -> Iterator[Rendered | RenderedColumns]:
    """Rows of the workers' results in job order; their errors, failures, statistics and text
    partials merged into the parent's (``preload``: :func:`iter_rendered`)."""
    index = 0
    try:
        for result in results:
            if result.error is not None:
                raise result.error
            errors.merge(result.errors)
            if failures is not None:
                failures.extend(result.failures)
            merge_stats(renderers, result.stats)
            if columns:
                cols = result.take_columns()
                if cols.n:
                    if preload:
                        preload = False
                        renderers.preload(cols.model.values[int(cols.model.codes[0])])
                    # indexes count rendered requests, as in-process
                    yield RenderedColumns(replace(cols, index=np.arange(index, index + cols.n, dtype=np.int64)))
                    index += cols.n
            else:
                rows = result.take_rows()
                if preload and rows:
                    preload = False
                    renderers.preload(rows[0].model)
                for row in rows:
                    row.index = index  # indexes count rendered requests, as in-process
                    index += 1
                    yield Rendered(None, row)
            if meter is not None and result.size:
                meter.add_done(result.size)
            if on_shard is not None:
                on_shard(result)
    finally:
        # stopped early (an error, a consumer that left): the executor stops here, in this
        # thread, not when the garbage collector finds it on another one
        close = getattr(results, "close", None)
        if close is not None:
            close()
