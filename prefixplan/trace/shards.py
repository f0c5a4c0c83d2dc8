"""The shard: a part of the input that one worker reads, parses and renders.

A job is a whole file (a log kept as many files: a day of gateway logs in object storage, 32
rotated JSONL files), a batch of a file's lines (read by the parent, parsed here) or a batch of
requests the parent parsed (in-memory records, server logs, tables). Every executor
(:mod:`prefixplan.trace.executors`: in-process, local processes, Ray actors) runs
:func:`render_shard` on it and returns a :class:`ShardResult`: compact trace rows, the part's
:class:`~prefixplan.logs.LineErrors`, its render failures and, for analyze, the text-level
findings of its requests (``text``: previews, breakers) as a partial that merges in input order.
No request text and no token array leaves the worker, and the parent only merges: rows in job
order, line errors and text partials with their ``merge`` methods, which give what one reader of
the whole input would have found. So the record is the same whatever the executor, the number of
workers and the way the log is split.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

from prefixplan.core.types import Request, Segment
from prefixplan.errors import PrefixplanError
from prefixplan.logs import LineErrors
from prefixplan.logs.ranges import ByteRange
from prefixplan.logs.read import LineBatch
from prefixplan.render import RenderSet
from prefixplan.render.stream import RenderFailure, SourceOptions
from prefixplan.trace.columns import RowColumns
from prefixplan.trace.gcpolicy import relax_for_process
from prefixplan.trace.rows import TraceRow, pack_rows, unpack_rows

if TYPE_CHECKING:
    from prefixplan.trace.inprocess import Unrendered

Transform = Callable[[Request], "Request | Unrendered"]
"""Rewrites a request before rendering, or says it need not be rendered (the row of an earlier
pass stands for it: :class:`~prefixplan.trace.inprocess.Unrendered`)."""

IN_FLIGHT_PER_WORKER = 3
"""Jobs (byte ranges, pieces, batches) a ready local worker holds at once, the running one
included (:func:`~prefixplan.trace.local_pool.depth`); a whole file is held alone."""


Stats = tuple[dict, dict, dict, dict, dict]
"""Models by spec, prompts by spec, engine-id checks, tokenizer facts, encode counts."""


class TextPartial(Protocol):
    """What the text-level analysis keeps of a shard's requests (analysis provides it)."""

    def add(self, request: Request, row: TraceRow, segments: tuple[Segment, ...] | None = None) -> None: ...

    def merge(self, other: Any) -> None: ...

    def drop(self, known: set[str]) -> None: ...


@dataclass(frozen=True)
class ShardJob:
    """One file to read and render.

    Attributes:
        index: position of the job among the run's jobs (results merge in this order).
        path: the file (local path or URL, as given after expansion); with ``lines`` or
            ``requests``, only a name.
        source: the run's source options (``paths`` is replaced by ``path``).
        block_size: trace block size in tokens.
        routing: rows carry the gateway's routing keys.
        text: makes the text partial of a shard (None: rows only, e.g. simulate).
        transform: rewrites each request before rendering, or leaves it unrendered
            (:data:`Transform`); picklable; may count what it did in an attribute ``moved``,
            summed over shards.
        lines: a batch of the file's lines, read by the parent and parsed here (one big file
            shared by several workers); ``requests``: requests the parent parsed.
    """

    index: int
    path: str
    source: SourceOptions
    block_size: int
    routing: bool = False
    text: Callable[[], TextPartial] | None = None
    transform: Transform | None = None
    lines: LineBatch | None = None  # instead of the whole file: these lines of it, read, not parsed
    requests: tuple[Request, ...] | None = None  # or these requests (server logs, tables)
    range: ByteRange | None = None  # or these bytes of the file, read here (a plain JSON-lines file)
    run: str = ""  # the run's id when each worker takes jobs in order (local processes)
    columns: bool = False  # the consumer takes columns: a worker sends its rows as RowColumns
    error: PrefixplanError | None = None  # the parent's reading stopped here (strict mode): raised after these


@dataclass
class ShardResult:
    """What a worker sends back for one file (never request text or token arrays)."""

    index: int
    rows: list[TraceRow] = field(default_factory=list)
    errors: LineErrors = field(default_factory=LineErrors)
    failures: list[RenderFailure] = field(default_factory=list)
    stats: Stats | None = None  # None: rendered with the parent's renderers
    text: TextPartial | None = None
    moved: int = 0
    size: int = 0  # bytes of the input file, for progress
    error: PrefixplanError | None = None  # strict mode, an unreadable file: raised by the parent
    worker: str = ""  # host:pid that rendered it (benchmarks, progress)
    peak_rss_mb: float = 0.0  # the worker process's peak RSS after this file
    seconds: float = 0.0  # time the worker spent on this job
    cpu_seconds: float = 0.0  # CPU time of the worker's process on this job
    cols: RowColumns | None = None  # the rows, made columns where they rendered (then rows is empty)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["rows"] = pack_rows(self.rows)  # a few buffers, not eleven arrays a row
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        # unpacked when taken: as rows (take_rows) or straight as columns (take_columns)
        self.__dict__.update(state, rows=[], _packed=state["rows"])

    def take_rows(self) -> list[TraceRow]:
        """The rows (from another process: unpacked now)."""
        if self.cols is not None:
            raise RuntimeError("this job's rows were sent as columns")
        packed = self.__dict__.pop("_packed", None)
        if packed is not None:
            self.rows = unpack_rows(packed)
        return self.rows

    def take_columns(self) -> RowColumns:
        """The rows as columns, with no row object when they came from another process; the
        result keeps no rows after this."""
        if self.cols is not None:
            cols, self.cols = self.cols, None
            return cols
        packed = self.__dict__.pop("_packed", None)
        cols = RowColumns.of_packed(packed) if packed is not None else RowColumns.of_rows(self.rows)
        self.rows = []
        return cols


# -- worker side -----------------------------------------------------------------------------

_RENDERERS: dict[tuple[Any, ...], RenderSet] = {}
_SENT: dict[str, set[str]] = {}  # run id -> segments whose text this process has sent


def _renderers(source: SourceOptions) -> RenderSet:
    """The tokenizers of ``source``, loaded once per process."""
    key = (source.tokenizer, tuple(sorted(source.tokenizer_map.items())), source.chat_template,
           repr(sorted(source.template_kwargs.items())))  # fmt: skip
    found = _RENDERERS.get(key)
    if found is None:
        found = _RENDERERS[key] = source.renderers()
    return found


def _stats(renderers: RenderSet) -> Stats:
    return (
        {s: set(m) for s, m in renderers.models_by_spec.items()},
        dict(renderers.prompts_by_spec),
        dict(renderers.engine_ids),
        {f.spec: f for f in renderers.facts()},
        renderers.encode_stats(),
    )


def _delta(before: Stats, after: Stats) -> Stats:
    models = {s: m - before[0].get(s, set()) for s, m in after[0].items()}
    prompts = {s: n - before[1].get(s, 0) for s, n in after[1].items()}
    engine = {k: n - before[2].get(k, 0) for k, n in after[2].items()}
    encoded = {k: n - before[4].get(k, 0) for k, n in after[4].items()}
    return models, prompts, engine, after[3], encoded


def render_shard(job: ShardJob, renderers: RenderSet | None = None) -> ShardResult:
    """Read, parse and render one job (in a worker process, a Ray actor or, with the caller's
    ``renderers``, in the calling process; their statistics are then already the caller's)."""
    import socket
    import time

    from prefixplan.logs.paths import input_size

    started, cpu_started = time.perf_counter(), time.process_time()
    own = renderers is None
    if renderers is None:
        renderers = _renderers(job.source)
    before = _stats(renderers) if own else None
    moved_before = int(getattr(job.transform, "moved", 0) or 0)
    result = ShardResult(job.index, worker=f"{socket.gethostname()}:{os.getpid()}")
    text = job.text() if job.text is not None else None
    if job.range is not None:
        result.size = 0 if job.range.spill else job.range.end - job.range.start  # a piece: counted where it was read
    elif job.lines is None and job.requests is None:
        result.size = input_size(job.path) or 0
    try:
        for one in _render(job, renderers, result):
            result.rows.append(one.row)
            if text is not None and one.request is not None:
                text.add(one.request, one.row, one.segments)
    except PrefixplanError as exc:
        result.error = exc
    if result.error is None and job.error is not None:
        result.error = job.error
    if text is not None and job.run:
        text.drop(_SENT.setdefault(job.run, set()))
    result.text = text
    if job.columns and own:  # the parent takes columns: made here, where the rows were rendered
        result.cols = RowColumns.of_rows(result.rows)
        result.rows = []
    result.moved = int(getattr(job.transform, "moved", 0) or 0) - moved_before
    result.stats = _delta(before, _stats(renderers)) if before is not None else None
    result.peak_rss_mb = _peak_rss_mb()
    result.seconds = time.perf_counter() - started
    result.cpu_seconds = time.process_time() - cpu_started
    return result


def _render(job: ShardJob, renderers: RenderSet, result: ShardResult) -> Iterator[Any]:
    """Read (a whole file), parse (a batch of lines) or take (requests) what ``job`` carries, and
    render it here; malformed lines and render failures go to ``result``."""
    from prefixplan.logs.read import iter_requests, parse_batch
    from prefixplan.logs.tables import table_format
    from prefixplan.trace.inprocess import failure_handler, render_in_process

    requests: Iterator[Request] | Iterator[Request | Unrendered]
    if job.range is not None:
        from prefixplan.logs.ranges import read_range
        from prefixplan.logs.remote import shown

        requests = read_range(job.range, job.source.read, result.errors, shown(job.path))
    elif job.lines is not None:
        requests = parse_batch(job.lines, job.source.read, result.errors)
    elif job.requests is not None:
        requests = iter(job.requests)
    else:
        read = job.source.read
        if read.columns and table_format(job.path, read.format) is None:
            read = replace(read, columns=())  # the mapping is for the run's table files, not this one
        requests = iter_requests([job.path], read, result.errors)
    if job.transform is not None:
        requests = map(job.transform, requests)
    failed = failure_handler(job.source, result.errors, result.failures)
    return render_in_process(requests, renderers, _maker(job.block_size, job.routing), job.source.render_batch, failed)


_MAKERS: dict[tuple[int, bool], Any] = {}


def _maker(block_size: int, routing: bool) -> Any:
    from prefixplan.trace.rows import RowMaker

    found = _MAKERS.get((block_size, routing))
    if found is None:
        found = _MAKERS[(block_size, routing)] = RowMaker(block_size, routing=routing)
    return found


def _peak_rss_mb() -> float:
    try:
        import resource
    except ImportError:  # pragma: no cover - not on Windows
        return 0.0
    kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kb / 1024 / (1024 if sys.platform == "darwin" else 1)  # bytes on macOS, KiB elsewhere


# -- parent side -----------------------------------------------------------------------------


def merge_stats(renderers: RenderSet, delta: Stats | None) -> None:
    """Add a worker's renderer statistics (and what it says of its tokenizers) to the
    parent's :class:`RenderSet` (None: the job rendered with the parent's own)."""
    if delta is None:
        return
    models, prompts, engine, facts, encoded = delta
    for key, n in encoded.items():
        if n:
            renderers.encoded_elsewhere[key] = renderers.encoded_elsewhere.get(key, 0) + n
    for spec, one in facts.items():
        renderers.reported.setdefault(spec, one)
    for spec, names in models.items():
        renderers.models_by_spec.setdefault(spec, set()).update(names)
    for spec, n in prompts.items():
        if n:
            renderers.prompts_by_spec[spec] = renderers.prompts_by_spec.get(spec, 0) + n
    for key, n in engine.items():
        if n:
            renderers.engine_ids[key] = renderers.engine_ids.get(key, 0) + n


def worker_threads(workers: int, cores: int | None = None) -> int:
    """Threads each of ``workers`` render processes gives its tokenizer's batch encoding: the
    cores shared out, at least one. The fast tokenizers otherwise start a thread per core in
    every process; with a process per core they competed for the same cores (the 100k benchmark
    log rendered 8% faster with one thread per worker on 2 cores)."""
    cores = cores if cores is not None else (os.cpu_count() or 1)
    return max(1, cores // max(1, workers))


def warm_worker(source: SourceOptions) -> str:
    """A render worker's first task: load the run's default tokenizer (others load when a
    request needs them), so that the worker is ready when it takes its first job. Returns the
    worker's ``host:pid``."""
    import socket

    _renderers(source).warm(None)
    return f"{socket.gethostname()}:{os.getpid()}"


def start_worker(threads: int) -> None:
    """Render worker start: no model framework is importable here (a tokenizer needs none, and
    transformers would otherwise import torch, seconds per worker:
    :func:`~prefixplan.render.frameworks.hide_model_frameworks`); the tokenizer's thread pool
    (Rust rayon, sized when first used) takes ``threads`` threads unless the user set
    RAYON_NUM_THREADS; the garbage collector runs less often (:mod:`prefixplan.trace.gcpolicy`)."""
    from prefixplan.render.frameworks import hide_model_frameworks

    hide_model_frameworks()
    os.environ.setdefault("RAYON_NUM_THREADS", str(threads))
    relax_for_process()
