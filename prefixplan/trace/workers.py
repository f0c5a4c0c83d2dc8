"""Rendering on every core: requests in, trace rows out, in input order.

The parent reads and parses the log (cheap) and hands batches of requests to worker processes;
each worker loads the tokenizers once and sends back compact :class:`TraceRow` records (block
keys and spans, a few hundred bytes per request: never token arrays, which made an earlier
design IPC-bound). The parent keeps a bounded window of batches in flight and yields rows in
input order, so the output is the same whatever the number of workers. Renderer statistics
(which tokenizer rendered which model, engine-id checks) are merged back into the parent's
:class:`~prefixplan.render.RenderSet`.

With one worker (or a small input) everything runs in the calling process.
"""

from __future__ import annotations

import contextlib
import os
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from prefixplan.core.types import Prompt, Request, Segment, SegmentHash
from prefixplan.errors import TokenizerError, UsageError
from prefixplan.logs import LineErrors, ReadMeter
from prefixplan.logs.read import no_requests_error
from prefixplan.render import RenderSet
from prefixplan.render.stream import RenderFailure, SourceOptions, iter_source_requests
from prefixplan.trace.rows import RowMaker, TraceRow
from prefixplan.trace.shards import ShardResult, TextPartial, merge_stats

SMALL_INPUT_BYTES = 4 * 2**20
"""Inputs below this size render in-process by default: starting workers costs more than it saves."""
BATCH = 64
IN_FLIGHT_PER_WORKER = 3


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
class Rendered:
    """One request's outcome: its row (and the request itself, for text-level analysis), or why
    it could not be rendered."""

    request: Request | None  # None when a file's worker kept the text (:mod:`prefixplan.trace.shards`)
    row: TraceRow | None
    error: str | None = None


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


# -- worker side -----------------------------------------------------------------------------

_STATE: dict[str, Any] = {}


def _init(source: SourceOptions, block_size: int, routing: bool) -> None:
    _STATE["renderers"] = source.renderers()
    _STATE["maker"] = RowMaker(block_size, routing=routing)
    _STATE["stats"] = ({}, {}, {})


def _render(batch: list[Request], first: int) -> tuple[list[TraceRow | str], tuple[dict, dict, dict]]:
    renderers: RenderSet = _STATE["renderers"]
    maker: RowMaker = _STATE["maker"]
    out: list[TraceRow | str] = []
    for k, result in enumerate(renderers.render_batch(batch)):
        out.append(str(result) if isinstance(result, TokenizerError) else maker.row(result, first + k))
    return out, _stats_delta(renderers)


def _stats_delta(renderers: RenderSet) -> tuple[dict, dict, dict]:
    """What changed in the renderer statistics since the last call."""
    seen_models, seen_prompts, seen_engine = _STATE["stats"]
    models = {s: set(m) - seen_models.get(s, set()) for s, m in renderers.models_by_spec.items()}
    prompts = {s: n - seen_prompts.get(s, 0) for s, n in renderers.prompts_by_spec.items()}
    engine = {k: n - seen_engine.get(k, 0) for k, n in renderers.engine_ids.items()}
    _STATE["stats"] = (
        {s: set(m) for s, m in renderers.models_by_spec.items()},
        dict(renderers.prompts_by_spec),
        dict(renderers.engine_ids),
    )
    return models, prompts, engine


# -- parent side -----------------------------------------------------------------------------


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
    require_requests: bool = True,
) -> Iterator[Rendered]:
    """Read ``source`` and render it into rows at ``block_size`` tokens, in input order, on
    ``workers`` processes (None: ``source.workers``, else :func:`default_workers`). Render failures are counted in
    ``errors`` (and listed in ``failures``) unless the read options are strict.

    Files are rendered one per worker (:mod:`prefixplan.trace.shards`) with ``--executor ray``,
    and locally when there are at least two files per worker; then each file's text-level
    partial (``text``) and outcome reach ``on_shard`` in input order and rows come without their
    request. Otherwise requests are read here and rendered in batches (rows with requests).
    """
    if workers is None:
        workers = source.workers
    asked = workers
    n = (1 if source.executor == "ray" else default_workers(source)) if workers is None else max(1, int(workers))
    files = _shardable(source, n)
    if files is not None:
        yield from _by_file(
            files, source, errors, renderers, block_size, routing, asked, n, transform, failures, meter, text, on_shard
        )
        if require_requests and errors.requests_read == 0 and (errors.lines_read > 0 or errors.count > 0):
            raise no_requests_error(errors, source.display)
        return
    requests: Iterator[Request] = iter_source_requests(source, errors, meter)
    if transform is not None:
        requests = (transform(r) for r in requests)

    def failed(req: Request, reason: str) -> None:
        if source.read.strict:
            raise TokenizerError(reason)
        errors.add(req.source, req.line_no, "render: " + reason.replace(f"{req.source}:{req.line_no}: ", ""))
        if failures is not None:
            failures.append(RenderFailure(req.source, req.line_no, reason))

    if n <= 1:
        yield from _in_process(requests, renderers, RowMaker(block_size, routing=routing), source.render_batch, failed)
    else:
        yield from _in_workers(requests, source, renderers, block_size, routing, n, failed)
    if require_requests and errors.requests_read == 0 and (errors.lines_read > 0 or errors.count > 0):
        raise no_requests_error(errors, source.display)


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


def _by_file(
    files: list[str],
    source: SourceOptions,
    errors: LineErrors,
    renderers: RenderSet,
    block_size: int,
    routing: bool,
    asked: int | None,
    workers: int,
    transform: Callable[[Request], Request] | None,
    failures: list[RenderFailure] | None,
    meter: ReadMeter | None,
    text: Callable[[], TextPartial] | None,
    on_shard: Callable[[ShardResult], None] | None,
) -> Iterator[Rendered]:
    from prefixplan.logs.read import check_columns
    from prefixplan.trace.shards import ShardJob, merge_stats, run_local

    check_columns(files, source.read)
    jobs = (
        ShardJob(i, path, source, block_size, routing, text if on_shard is not None else None, transform)
        for i, path in enumerate(files)
    )
    if source.executor == "ray":
        from prefixplan.trace.ray_executor import run_ray

        results = run_ray(jobs, len(files), source.ray_address, asked)
    else:
        results = run_local(jobs, workers)
    index = 0
    for result in results:
        if result.error is not None:
            raise result.error
        errors.merge(result.errors)
        if failures is not None:
            failures.extend(result.failures)
        merge_stats(renderers, result.stats)
        for row in result.rows:
            row.index = index  # indexes count rendered requests, as in-process
            index += 1
            yield Rendered(None, row)
        if meter is not None:
            meter.add_done(result.size)
        if on_shard is not None:
            on_shard(result)
    _list_tokenizers(renderers)


def _in_process(
    requests: Iterator[Request],
    renderers: RenderSet,
    maker: RowMaker,
    batch_size: int,
    failed: Callable[[Request, str], None],
) -> Iterator[Rendered]:
    index = 0
    pending: list[Request] = []

    def flush() -> Iterator[Rendered]:
        nonlocal index
        for req, result in zip(pending, renderers.render_batch(pending), strict=True):
            if isinstance(result, Prompt):
                yield Rendered(req, maker.row(result, index))
                index += 1
            else:
                failed(req, str(result))
        pending.clear()

    for req in requests:
        pending.append(req)
        if len(pending) >= batch_size:
            yield from flush()
    yield from flush()


def _in_workers(
    requests: Iterator[Request],
    source: SourceOptions,
    renderers: RenderSet,
    block_size: int,
    routing: bool,
    n: int,
    failed: Callable[[Request, str], None],
) -> Iterator[Rendered]:
    import multiprocessing
    from concurrent.futures import Future, ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    ctx = multiprocessing.get_context("spawn")  # tokenizer libraries start threads: never fork them
    window: deque[tuple[list[Request], Future[Any]]] = deque()
    submitted = 0  # requests handed out; a batch's row indexes are fixed when its rows come back
    index = 0
    with ProcessPoolExecutor(n, mp_context=ctx, initializer=_init, initargs=(source, block_size, routing)) as pool:

        def drain_one() -> Iterator[Rendered]:
            nonlocal index
            batch, fut = window.popleft()
            try:
                outcomes, delta = fut.result()
            except BrokenProcessPool as exc:
                raise TokenizerError(
                    f"a render worker stopped unexpectedly ({exc or 'killed, or out of memory'})",
                    hint="run again with fewer --workers (--workers 1 renders in this process)",
                ) from None
            merge_stats(renderers, delta)
            for req, out in zip(batch, outcomes, strict=True):
                if isinstance(out, str):
                    failed(req, out)
                    continue
                out.index = index  # indexes count rendered requests, as in-process
                index += 1
                yield Rendered(req, out)

        batch: list[Request] = []
        for req in requests:
            batch.append(req)
            if len(batch) >= BATCH:
                window.append((batch, pool.submit(_render, batch, submitted)))
                submitted += len(batch)
                batch = []
                while len(window) >= n * IN_FLIGHT_PER_WORKER:
                    yield from drain_one()
        if batch:
            window.append((batch, pool.submit(_render, batch, submitted)))
        while window:
            yield from drain_one()
    _list_tokenizers(renderers)


def _list_tokenizers(renderers: RenderSet) -> None:
    """Load, in the parent, the tokenizers the workers used, so its :class:`RenderSet` lists them
    for the record as after in-process rendering (one the parent cannot load is left out)."""
    for spec in list(renderers.models_by_spec):
        for model in sorted(renderers.models_by_spec[spec]):
            if renderers.spec_for(None if model == "-" else model) == spec:
                with contextlib.suppress(TokenizerError, UsageError):  # only the workers could load it
                    renderers.for_model(None if model == "-" else model)
                break
