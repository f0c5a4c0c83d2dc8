"""The public log reader: paths -> a stream of :class:`~prefixplan.core.types.Request`.

Requests come out in file order (files in the order given, lines in file order); nothing
is sorted or held back, so memory does not grow with the log. Malformed lines are counted
in a :class:`LineErrors` and skipped, or raise :class:`~prefixplan.errors.LogLineError` in
strict mode.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from prefixplan.core.types import FORMATS, Request
from prefixplan.errors import LogLineError, UsageError
from prefixplan.logs import limits
from prefixplan.logs.badline import BadLine
from prefixplan.logs.csvtable import iter_csv
from prefixplan.logs.detect import JSONL, sniff
from prefixplan.logs.dispatch import Parsed, parse_line
from prefixplan.logs.envelope import LineContext
from prefixplan.logs.lineerrors import LineErrors
from prefixplan.logs.noinput import EMPTY_TABLE
from prefixplan.logs.open import STDIN, CorruptInput, decompress, iter_lines, open_log, open_raw
from prefixplan.logs.paths import ReadMeter, expand_paths
from prefixplan.logs.remote import shown
from prefixplan.logs.serverlog import read_server_log
from prefixplan.logs.tables import (
    TABLE_FORMATS,
    TableCorrupt,
    TableShape,
    iter_parquet,
    parse_columns,
    table_format,
)
from prefixplan.logs.textlog import SourceInfo

_BOM = b"\xef\xbb\xbf"


@dataclass(frozen=True, slots=True)
class ReadOptions:
    """How to read logs.

    Attributes:
        format: ``"auto"`` (detect per line) or one of :data:`prefixplan.core.types.FORMATS`, or a
            table container (``"parquet"``, ``"csv"``: every input read as one, rows detected).
        since: keep requests with ``time >= since`` (epoch seconds); untimed ones pass.
        until: keep requests with ``time < until``; untimed ones pass.
        sample: keep this deterministic fraction of lines (hash of source and line number).
        strict: raise :class:`~prefixplan.errors.LogLineError` on the first malformed line.
        trace_block_size: tokens per Mooncake ``hash_ids`` block.
        max_line_bytes: the most bytes of one record (:data:`~prefixplan.logs.limits.MAX_RECORD_BYTES`,
            64 MiB): longer lines are skipped (read and discarded in chunks), larger CSV and
            Parquet rows too (a Parquet row measured before it is read into Python objects).
        max_record_tokens: the most token ids one request may give
            (:data:`~prefixplan.logs.limits.MAX_RECORD_TOKENS`); more is a malformed line.
        columns: ``((field, column), ...)`` for Parquet and CSV logs (``--columns``; see
            :mod:`prefixplan.logs.tables`); a string ``"field=column,..."`` or a mapping is accepted.
        tenant_field: take each request's tenant id from this field of its record (a dotted
            path, :func:`~prefixplan.logs.dispatch.field_value`); None: the usual keys.
    """

    format: str = "auto"
    since: float | None = None
    until: float | None = None
    sample: float | None = None
    strict: bool = False
    trace_block_size: int = 512
    max_line_bytes: int = field(default_factory=lambda: limits.MAX_RECORD_BYTES)
    columns: tuple[tuple[str, str], ...] = ()
    max_record_tokens: int = field(default_factory=lambda: limits.MAX_RECORD_TOKENS)
    tenant_field: str | None = None

    def __post_init__(self) -> None:
        if self.format != "auto" and self.format not in FORMATS and self.format not in TABLE_FORMATS:
            raise UsageError(
                f"unknown log format {self.format!r}",
                hint=f"use auto or one of: {', '.join(FORMATS + TABLE_FORMATS)}",
            )
        if not isinstance(self.columns, tuple) or any(not isinstance(c, tuple) for c in self.columns):
            object.__setattr__(self, "columns", parse_columns(self.columns))
        else:
            parse_columns(self.columns)
        if self.sample is not None and not 0.0 < self.sample <= 1.0:
            raise UsageError(f"sample must be in (0, 1], got {self.sample}")
        if self.trace_block_size <= 0:
            raise UsageError(f"trace block size must be positive, got {self.trace_block_size}")
        if self.max_line_bytes <= 0:
            raise UsageError(f"max line bytes must be positive, got {self.max_line_bytes}")
        if self.max_record_tokens <= 0:
            raise UsageError(f"max record tokens must be positive, got {self.max_record_tokens}")
        if self.since is not None and self.until is not None and self.since >= self.until:
            raise UsageError("--since must be earlier than --until")
        if self.tenant_field is not None and not all(self.tenant_field.split(".")):
            raise UsageError(f"bad field path {self.tenant_field!r}", hint="keys joined by dots, e.g. metadata.org_id")


try:
    from orjson import loads as _fast_loads
except ImportError:  # pragma: no cover - orjson is a dependency, but optional here
    _fast_loads = None  # type: ignore[assignment]
_NOT_PARSED = object()


def _decode(data: bytes, ctx: LineContext, fmt: str, tenant_field: str | None) -> Parsed:
    if ctx.line_no == 1 and data.startswith(_BOM):
        data = data[3:]
    obj: Any = _NOT_PARSED
    if _fast_loads is not None:
        # orjson is ~2x faster on big request lines and checks the UTF-8 itself (the bytes are
        # not decoded to a str first); anything it refuses (NaN, huge ints, bad JSON or UTF-8)
        # goes through the standard parser, which also words the error message.
        try:
            obj = _fast_loads(data)
        except (ValueError, RecursionError):
            obj = _NOT_PARSED
    if obj is _NOT_PARSED:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BadLine(f"invalid UTF-8: byte 0x{data[exc.start]:02x} at offset {exc.start}") from None
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            raise BadLine(f"bad JSON: {exc.msg} at column {exc.colno}") from None
        except ValueError as exc:  # an integer literal past Python's digit limit (4300 digits)
            raise BadLine(f"bad JSON: {str(exc)[:200]}") from None
        except RecursionError:
            raise BadLine("nesting too deep: JSON nested deeper than the parser allows") from None
    try:
        return parse_line(obj, ctx, fmt, tenant_field)
    except BadLine:
        raise
    except RecursionError:
        raise BadLine("nesting too deep: record nested deeper than the reader allows") from None
    except Exception as exc:
        raise BadLine(f"invalid record: {type(exc).__name__}: {limits.clip(exc)}") from None


def _sample_threshold(fraction: float | None) -> int | None:
    if fraction is None or fraction >= 1.0:
        return None
    return int(fraction * 2**64)


def _sampled(source: str, line_no: int, threshold: int) -> bool:
    digest = hashlib.blake2b(f"{source}\0{line_no}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") < threshold


def _reporter(errors: LineErrors, source: str, strict: bool) -> Callable[[int, str], None]:
    """How a reader reports a malformed line of ``source``: counted, or raised when ``strict``."""

    def bad(line_no: int, reason: str) -> None:
        reason = limits.clip(reason, limits.MAX_REASON_CHARS)  # a reason may quote the input
        errors.add(source, line_no, reason)
        if strict:
            raise LogLineError(source, line_no, reason)

    return bad


def _in_time(t: float | None, since: float | None, until: float | None) -> bool:
    """True for an untimed request or one in ``[since, until)``."""
    return t is None or not ((since is not None and t < since) or (until is not None and t >= until))


def _requests(obj: Any, ctx: LineContext, options: ReadOptions, errors: LineErrors, bad: Any) -> Iterator[Request]:
    """The requests of one decoded record (a table row, an in-memory object) in the time window;
    an unreadable record or part is reported through ``bad``."""
    fmt = "auto" if options.format in TABLE_FORMATS else options.format
    try:
        parsed = parse_line(obj, ctx, fmt, options.tenant_field)
    except BadLine as exc:
        bad(ctx.line_no, exc.reason)
        return
    except RecursionError:
        bad(ctx.line_no, "nesting too deep: record nested deeper than the reader allows")
        return
    except Exception as exc:
        bad(ctx.line_no, f"invalid record: {type(exc).__name__}: {limits.clip(exc)}")
        return
    yield from _in_window(parsed, ctx.line_no, errors, bad, options.since, options.until)


def _in_window(
    parsed: Iterable[Request | BadLine],
    line_no: int,
    errors: LineErrors,
    bad: Any,
    since: float | None,
    until: float | None,
) -> Iterator[Request]:
    """The requests of one record's parts: bad parts reported, the rest counted as read and
    kept when in the ``[since, until)`` window."""
    requests = []
    for item in parsed:
        if isinstance(item, BadLine):
            bad(line_no, item.reason)
        else:
            requests.append(item)
    errors.requests_read += len(requests)
    for req in requests:
        if _in_time(req.time, since, until):
            yield req


def _read_table(
    path: str, source: str, kind: str, options: ReadOptions, errors: LineErrors, meter: ReadMeter | None
) -> Iterator[Request]:
    """The requests of one Parquet or CSV log (:mod:`prefixplan.logs.tables`), row by row."""

    bad = _reporter(errors, source, options.strict)

    threshold = _sample_threshold(options.sample)
    how = "forced by --log-format" if options.format == kind else "by its file name"
    errors.sources[source] = SourceInfo(kind, how)
    if path == STDIN and kind == "parquet":
        raise UsageError("a Parquet log cannot be read from stdin (it is read by seeking)", hint="give its path")
    raw = sys.stdin.buffer if path == STDIN else open_raw(path)
    if meter is not None:
        meter.opened(raw)
    last = 0
    shape = TableShape()
    try:
        if kind == "parquet":
            rows = iter_parquet(raw, source, options.columns, options.max_line_bytes, shape)
        else:
            rows = iter_csv(decompress(raw), source, options.columns, options.max_line_bytes, shape)
        for row_no, item in rows:
            last = row_no
            if threshold is not None and not _sampled(source, row_no, threshold):
                continue
            if isinstance(item, BadLine):
                errors.lines_read += 1
                bad(row_no, item.reason)
                continue
            errors.saw(source, row_no, item)
            ctx = LineContext(source, row_no, options.trace_block_size, options.max_record_tokens)
            yield from _requests(item, ctx, options, errors, bad)
        if last == 0 and shape.columns is not None:  # a header (a schema) and no rows: not an empty file
            errors.lines_read += 1
            errors.sources[source].notes.append(f"{EMPTY_TABLE} ({shape.columns} columns)")
    except TableCorrupt as exc:
        bad(last + 1, f"corrupt input: {exc}; the rest of the file is skipped")
    finally:
        if path != STDIN:
            raw.close()


@dataclass(frozen=True, slots=True)
class LineBatch:
    """Consecutive lines of one JSON-lines file, read but not parsed: what a reader hands to
    another process to parse (:func:`parse_batch`). ``lines`` are ``(line_no, data, size)``;
    ``data`` is None for a line longer than the limit (``size`` bytes)."""

    source: str
    lines: tuple[tuple[int, bytes | None, int], ...]


BATCH_BYTES = 4 * 2**20
"""A :class:`LineBatch` holds at most this many bytes of lines (and at least one line)."""


def parse_batch(batch: LineBatch, options: ReadOptions, errors: LineErrors) -> Iterator[Request]:
    """The requests of a :class:`LineBatch`, exactly as :func:`iter_requests` reads its lines
    (malformed ones counted in ``errors`` with their file and line)."""
    source = batch.source

    bad = _reporter(errors, source, options.strict)

    errors.opened(source)
    for line_no, data, size in batch.lines:
        yield from _parse_line(source, line_no, data, size, options, errors, bad)


def _parse_line(
    source: str,
    line_no: int,
    data: bytes | None,
    size: int,
    options: ReadOptions,
    errors: LineErrors,
    bad: Any,
) -> Iterator[Request]:
    if data is None:
        bad(line_no, f"line too long: {size} bytes > max_line_bytes {options.max_line_bytes} (skipped)")
        return
    errors.saw(source, line_no, data)
    ctx = LineContext(source, line_no, options.trace_block_size, options.max_record_tokens)
    try:
        parsed = _decode(data, ctx, options.format, options.tenant_field)
    except BadLine as exc:
        bad(line_no, exc.reason)
        return
    yield from _in_window(parsed, line_no, errors, bad, options.since, options.until)


def _read_one(
    path: str,
    options: ReadOptions,
    errors: LineErrors,
    meter: ReadMeter | None = None,
    batch_lines: int | None = None,
) -> Iterator[Request | LineBatch]:
    source = shown(path)  # a URL without credentials; a local path as it is
    errors.opened(source)
    kind = table_format(path, options.format)
    if kind is not None:
        yield from _read_table(path, source, kind, options, errors, meter)
        return

    bad = _reporter(errors, source, options.strict)

    threshold = _sample_threshold(options.sample)
    since, until = options.since, options.until
    last = 0
    with open_log(path, on_open=meter.opened if meter is not None else None) as stream:
        try:
            reader, how, lines = sniff(iter_lines(stream, options.max_line_bytes), options.format)
            if reader != JSONL:

                def keep(line_no: int) -> bool:
                    return threshold is None or _sampled(source, line_no, threshold)

                for req in read_server_log(
                    source, reader, how, lines, errors, keep, bad, options.max_line_bytes, options.max_record_tokens
                ):
                    if _in_time(req.time, since, until):
                        yield req
                return
            errors.sources[source] = SourceInfo(JSONL, how)
            pending: list[tuple[int, bytes | None, int]] = []
            pending_bytes = 0
            for raw in lines:
                last = raw.line_no
                if threshold is not None and not _sampled(source, raw.line_no, threshold):
                    continue
                data = raw.data
                if data is not None and (not data or data.isspace()):
                    continue
                if batch_lines is None:
                    yield from _parse_line(source, raw.line_no, data, raw.size, options, errors, bad)
                    continue
                pending.append((raw.line_no, data, raw.size))
                pending_bytes += raw.size
                if len(pending) >= batch_lines or pending_bytes >= BATCH_BYTES:
                    yield LineBatch(source, tuple(pending))
                    pending, pending_bytes = [], 0
            if pending:
                yield LineBatch(source, tuple(pending))
        except CorruptInput as exc:
            bad(last + 1, f"corrupt input: {exc}; the rest of the file is skipped")


def check_columns(expanded: Sequence[str], options: ReadOptions) -> None:
    """Refuse ``options.columns`` when no input is a table (the mapping would be ignored)."""
    if options.columns and not any(table_format(p, options.format) for p in expanded):
        raise UsageError(
            "--columns maps the columns of Parquet and CSV logs, and no input is one",
            hint="name .parquet/.csv files, or read them as tables with --log-format parquet|csv",
        )


def iter_requests(
    paths: Sequence[str], options: ReadOptions, errors: LineErrors, meter: ReadMeter | None = None
) -> Iterator[Request]:
    """Stream the requests of ``paths`` in order.

    Args:
        paths: files, globs, directories or ``"-"``; expanded with :func:`expand_paths`.
        options: format, time window, sampling, strictness and limits.
        errors: receives every malformed line (source, line number, reason).

    Yields:
        One :class:`~prefixplan.core.types.Request` per logged request (a completions line
        with a list of prompts yields one per prompt).

    Raises:
        InputError: a path is missing or unreadable.
        LogLineError: ``options.strict`` and a line is malformed.
        UsageError: ``options.columns`` is set and no input is a table.
    """
    expanded = expand_paths(paths)
    check_columns(expanded, options)
    for path in expanded:
        for item in _read_one(path, options, errors, meter):
            assert isinstance(item, Request)
            yield item
        if meter is not None:
            meter.closed()


def iter_read_items(
    paths: Sequence[str],
    options: ReadOptions,
    errors: LineErrors,
    meter: ReadMeter | None = None,
    *,
    batch_lines: int = 64,
) -> Iterator[Request | LineBatch]:
    """Like :func:`iter_requests`, but the lines of JSON-lines files come unparsed, as
    :class:`LineBatch` es of up to ``batch_lines`` lines, for other processes to parse with
    :func:`parse_batch` (engine server logs and tables, whose records span lines or need the
    whole file, still come as requests). Sampling and blank lines are handled here."""
    expanded = expand_paths(paths)
    check_columns(expanded, options)
    for path in expanded:
        yield from _read_one(path, options, errors, meter, batch_lines=max(1, batch_lines))
        if meter is not None:
            meter.closed()


def iter_objects(
    objects: Iterable[Any], options: ReadOptions, errors: LineErrors, *, source: str = "<memory>"
) -> Iterator[Request]:
    """Requests from already-decoded log records (e.g. OpenAI chat request dicts in a notebook).

    Each object is read exactly like one log line (same formats and validation); a malformed
    one is counted in ``errors`` with its 1-based position as the line number. Objects that are
    already :class:`~prefixplan.core.types.Request` records pass through unchanged.
    """

    bad = _reporter(errors, source, options.strict)

    since, until = options.since, options.until
    for i, obj in enumerate(objects, start=1):
        errors.saw(source, i, obj)
        if not isinstance(obj, Request):
            ctx = LineContext(source, i, options.trace_block_size, options.max_record_tokens)
            yield from _requests(obj, ctx, options, errors, bad)
            continue
        errors.requests_read += 1
        if _in_time(obj.time, since, until):
            yield obj
