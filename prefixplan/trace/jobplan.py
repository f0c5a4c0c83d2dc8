"""Which jobs one pass's input becomes, each carrying only its own part (read where it runs):
whole files (at least two per worker, or with Ray, where a plain JSON-lines file is read in byte
ranges), else byte ranges of plain JSON-lines files and line-aligned pieces of compressed or
remote ones (decompressed here into temporary files, :mod:`prefixplan.logs.pieces`), else
batches of lines or requests (in-memory records, server logs, tables). Used by
:class:`~prefixplan.trace.intake.Intake`."""

from __future__ import annotations

import os
from collections.abc import Callable, Generator, Iterator
from dataclasses import replace
from typing import Any, Protocol

from prefixplan.core.types import Request
from prefixplan.errors import PrefixplanError, UsageError
from prefixplan.logs import LineErrors, ReadMeter
from prefixplan.logs.detect import JSONL
from prefixplan.render.stream import SourceOptions, iter_source_requests
from prefixplan.trace.executors import Run
from prefixplan.trace.shards import ShardJob, TextPartial, Transform

BATCH = 64
"""Lines (or parsed requests) per job when a file is shared by several workers."""
INLINE_BATCH = 1024
"""Lines (or requests) per job rendered in this process (fewer, larger parts to merge)."""
SPILL_RATIO = 4
"""Decompressed bytes per compressed byte assumed when sizing a compressed log's pieces."""
RAY_RANGE_ACTORS = 16
"""Actors a plain file's byte ranges are sized for when ``--workers`` does not say (Ray)."""


class PassPlan(Protocol):
    """What the jobs need of a pass's plan (:class:`~prefixplan.trace.intake.IntakePlan`)."""

    @property
    def source(self) -> SourceOptions: ...
    @property
    def block_size(self) -> int: ...
    @property
    def routing(self) -> bool: ...
    @property
    def text(self) -> Callable[[], TextPartial] | None: ...
    @property
    def transform(self) -> Transform | None: ...


class JobPlanner:
    """The jobs of one pass over ``plan.source`` (module docstring); ``errors`` notes each input
    as its jobs are made (inputs rank in the order they were opened); ``inputs`` gives the
    source's files, expanded once."""

    def __init__(self, plan: PassPlan, errors: LineErrors, inputs: Callable[[], list[str] | None]) -> None:
        self.plan = plan
        self.errors = errors
        self._inputs = inputs
        self.spilled: str | None = None  # the folder of decompressed pieces

    def jobs(self, run: Run, meter: ReadMeter | None, columns: bool = False) -> Iterator[ShardJob]:
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

        files = shardable(source, run, self._inputs())
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
        """Jobs of byte ranges of the plain JSON-lines file ``path``, about four per reader and
        smaller ones towards its end (:func:`~prefixplan.logs.ranges.tapered_cuts`)."""
        from prefixplan.logs import ranges
        from prefixplan.logs.remote import shown
        from prefixplan.logs.textlog import SourceInfo

        name = shown(path)
        self.errors.opened(name)
        self.errors.sources.setdefault(name, SourceInfo(JSONL, how))
        size = os.path.getsize(path)
        cuts = ranges.tapered_cuts(size, ranges.range_size(size, readers), readers)
        for rng in ranges.line_ranges(path, cuts):
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
        raws: list[Any] = []

        def opened(raw: Any) -> None:
            raws.append(raw)
            if meter is not None:
                meter.opened(raw)

        with open_log(path, on_open=opened) as stream:
            found = pieces.sniffed_jsonl(stream, read.format, read.max_line_bytes)
            if found is None:
                return False
            how, head = found
            name = shown(path)
            self.errors.opened(name)
            self.errors.sources.setdefault(name, SourceInfo(JSONL, how))
            size = input_size(path)
            per_range = ranges.range_size(SPILL_RATIO * size, run.processes) if size else ranges.RANGE_BYTES

            def piece_bytes(spilled: int) -> int:
                """Smaller pieces towards the end: what is left, at the ratio decompressed so far."""
                at = _position(raws[0]) if raws else None
                if not size or not at or not spilled:
                    return per_range
                return ranges.taper(spilled * max(0, size - at) // at, per_range, run.processes)

            for rng in pieces.spill(stream, head, self._spill_dir(), piece_bytes):
                yield job(path, range=rng)
        if meter is not None:
            meter.closed()
        return True

    def _spill_dir(self) -> str:
        """This pass's folder for decompressed pieces (removed when the pass ends)."""
        if self.spilled is None:
            import tempfile

            self.spilled = tempfile.mkdtemp(prefix="prefixplan-pieces-")
        return self.spilled

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

    def remove_pieces(self) -> None:
        """Remove the pieces' folder (the pass has ended, or stopped)."""
        if self.spilled is not None:
            import shutil

            shutil.rmtree(self.spilled, ignore_errors=True)
            self.spilled = None


def shardable(source: SourceOptions, run: Run, files: list[str] | None) -> list[str] | None:
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


def _position(raw: Any) -> int | None:
    """How far into the compressed file ``raw`` reading got (None when it cannot say)."""
    try:
        return int(raw.tell())
    except (OSError, ValueError, AttributeError):
        return None
