"""Trace files: :class:`~prefixplan.trace.rows.TraceRow` records as Parquet (schema v1).

One row per request, in input order, columns as :data:`SCHEMA` (documented in docs/trace.md);
the file's key-value metadata ``prefixplan.trace`` holds a JSON object: ``format``
(``"prefixplan-trace"``), ``version`` (1), ``hash`` (the block-key scheme), ``block_size``
(real tokens per key for token-level rows), ``granularity``, ``segment_kinds``, and what the
writing run knew about its input (paths, formats, tokenizers, line errors, render failures).
Rows are written in batches as they come, so writing holds one batch in memory; reading
streams the same way.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from prefixplan.core.parquetio import iter_batches
from prefixplan.core.types import SEGMENT_KINDS
from prefixplan.errors import DamagedTraceError, InputError, UsageError
from prefixplan.logs.limits import clip
from prefixplan.logs.remote import is_url, open_remote, shown
from prefixplan.render.stream import SourceOptions
from prefixplan.trace.blockhash import BLOCK_SCHEME
from prefixplan.trace.columns import ARROW_FIELDS, RowColumns, arrow_ragged
from prefixplan.trace.rows import TraceRow
from prefixplan.trace.schema import BATCH_ROWS, FORMAT, META_KEY, PARQUET_MAGIC, VERSION, arrow_schema, need_pyarrow
from prefixplan.trace.validate import TraceDamage, check_batch, check_meta, check_schema, parse_meta

__all__ = ["TraceFile", "batch_columns_of", "batch_rows_of", "is_trace_file", "trace_input"]

FOOTER_SCAN = 16 * 2**20

_LISTS_U64 = ("block_keys", "seg_hash", "chunk_hash", "boundary_keys")
_LISTS_I32 = ("seg_start", "seg_end", "seg_index", "chunk_start", "chunk_end", "chunk_msg", "chunk_chars")


def is_trace_file(path: str | os.PathLike[str]) -> bool:
    """True when ``path`` is a Parquet file (by its magic bytes; ``-`` never is) whose footer holds
    the trace metadata, or a local one whose footer cannot be read (:class:`TraceFile` says why). A
    Parquet file without the metadata is a request log (:mod:`prefixplan.logs.tables`); so is a
    URL that cannot be read (the log reader says why)."""
    p = str(path)
    if is_url(p):
        if not p.lower().endswith(".parquet") or any(c in p for c in "*?["):
            return False
        try:
            import pyarrow.parquet as pq

            with io.BufferedReader(open_remote(p)) as fh:
                if fh.read(4) != PARQUET_MAGIC:
                    return False
                fh.seek(0)
                meta = pq.read_metadata(fh).metadata or {}
        except Exception:
            return False  # unreadable: the log reader says why
        return META_KEY in meta
    if p == "-" or not os.path.isfile(p):
        return False
    try:
        with open(p, "rb") as fh:
            if fh.read(4) != PARQUET_MAGIC:
                return False
    except OSError:
        return False
    try:
        import pyarrow.parquet as pq

        meta = pq.read_metadata(p).metadata or {}
    except Exception:  # a damaged footer: a trace's names the trace key (TraceFile says what is wrong)
        return _footer_names_trace(p)
    return META_KEY in meta


def _footer_names_trace(path: str) -> bool:
    """Whether the footer of a Parquet file pyarrow cannot read holds the trace key: its length
    when the last 8 bytes give a plausible one, else the last :data:`FOOTER_SCAN` bytes."""
    try:
        with open(path, "rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            fh.seek(max(0, size - 8))
            tail = fh.read(8)
            length = int.from_bytes(tail[:4], "little") if len(tail) == 8 else 0
            span = length + 8 if 0 < length <= size - 12 else min(size, FOOTER_SCAN)
            fh.seek(max(0, size - span))
            return META_KEY in fh.read(span)
    except OSError:
        return False


def trace_input(source: SourceOptions) -> TraceFile | None:
    """The trace file ``source`` names (one ``.parquet`` written by ``--trace-out``), or None for logs.

    Raises:
        UsageError: a trace mixed with other inputs.
    """
    if source.objects is not None:
        return None
    traces = [p for p in source.paths if is_trace_file(p)]
    if not traces:
        return None
    if len(source.paths) > 1:
        raise UsageError(
            "a trace file is read on its own, not with other inputs",
            hint="write one trace for all the logs: prefixplan simulate LOG1 LOG2 --trace-out T.parquet",
        )
    return TraceFile(traces[0])


class TraceFile:
    """A trace file opened for reading: :attr:`meta` and :meth:`rows`. The footer is checked when
    it is opened and each batch as it is read (:mod:`prefixplan.trace.validate`): a damaged or
    inconsistent file raises :class:`~prefixplan.errors.DamagedTraceError`."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        need_pyarrow()
        import pyarrow.parquet as pq

        target = os.fspath(path)
        remote = is_url(target)
        self.path: Path | str = shown(target) if remote else Path(target)
        try:
            self._file = pq.ParquetFile(io.BufferedReader(open_remote(target)) if remote else target)
        except OSError as exc:
            if remote or not os.access(target, os.R_OK):
                raise InputError(f"{self.path}: cannot read the trace: {clip(exc)}") from exc
            raise self._damaged(f"not a readable Parquet file ({clip(exc)})") from None
        except Exception as exc:  # pyarrow.ArrowInvalid for a damaged file
            raise self._damaged(f"not a readable Parquet file ({clip(exc)})") from None
        raw = (self._file.metadata.metadata or {}).get(META_KEY)
        if raw is None:
            raise InputError(
                f"{self.path}: a Parquet file without prefixplan trace metadata",
                hint="write traces with prefixplan analyze/simulate --trace-out FILE",
            )
        try:
            meta = parse_meta(raw)
        except TraceDamage as exc:
            raise self._damaged(exc.reason) from None
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            raise self._damaged(f"its metadata does not name the {FORMAT} format")
        version = meta.get("version")
        if type(version) is not int or version != VERSION:  # not True, not 1.0
            raise InputError(
                f"{self.path}: trace version {clip(repr(version), 40)}; this prefixplan reads version {VERSION}",
                hint="write the trace again with this version of prefixplan",
            )
        again = "write the trace again from its log with this version of prefixplan"
        if meta.get("hash") != BLOCK_SCHEME:
            raise InputError(
                f"{self.path}: block keys of scheme {clip(repr(meta.get('hash')), 40)}; expected {BLOCK_SCHEME}",
                hint=again,
            )
        kinds = meta.get("segment_kinds")
        if kinds != list(SEGMENT_KINDS):
            raise InputError(
                f"{self.path}: segment kinds {clip(repr(kinds))} differ from this prefixplan's", hint=again
            )
        try:
            check_schema(self._file.schema_arrow, arrow_schema())
            check_meta(meta, int(self._file.metadata.num_rows))
        except TraceDamage as exc:
            raise self._damaged(exc.reason) from None
        except (OSError, ValueError) as exc:  # a schema pyarrow cannot read
            raise self._damaged(f"unreadable schema ({clip(exc)})") from None
        self.meta: dict[str, Any] = meta

    def _damaged(self, reason: str) -> DamagedTraceError:
        return DamagedTraceError(str(self.path), reason)

    @property
    def num_rows(self) -> int:
        return int(self._file.metadata.num_rows)

    def _batches(self, batch_rows: int, columns: Sequence[str] | None = None) -> Iterator[Any]:
        """Record batches in file order, each checked; pyarrow's errors on damaged pages become
        :class:`~prefixplan.errors.DamagedTraceError`."""
        import pyarrow as pa

        block_size = int(self.meta["block_size"])
        batches = iter_batches(self._file, batch_rows, columns)
        while True:
            try:
                batch = next(batches)
            except StopIteration:
                return
            except (OSError, ValueError, pa.ArrowException) as exc:
                raise self._damaged(f"unreadable data ({clip(exc)})") from None
            try:
                check_batch(batch, block_size)
            except TraceDamage as exc:
                raise self._damaged(exc.reason) from None
            yield batch

    def rows(self, batch_rows: int = BATCH_ROWS) -> Iterator[TraceRow]:
        """The rows in file order, streamed in batches."""
        for batch in self._batches(batch_rows):
            try:
                yield from batch_rows_of(batch)
            except InputError as exc:  # a damaged batch: say which file
                raise self._damaged(str(exc)) from None

    def columns(self, batch_rows: int = BATCH_ROWS) -> Iterator[RowColumns]:
        """The rows in file order as :class:`~prefixplan.trace.columns.RowColumns`, a batch at a
        time (only the columns they hold are decoded)."""
        for batch in self._batches(batch_rows, ARROW_FIELDS):
            try:
                yield batch_columns_of(batch)
            except InputError as exc:
                raise self._damaged(str(exc)) from None


def batch_columns_of(batch: Any) -> RowColumns:
    """One record batch (of at least :data:`~prefixplan.trace.columns.ARROW_FIELDS`), checked by
    :func:`~prefixplan.trace.validate.check_batch`, as :class:`RowColumns`."""
    return RowColumns.of_arrow(batch)


def batch_rows_of(batch: Any) -> Iterator[TraceRow]:
    """The rows of one record batch."""
    n = batch.num_rows
    cols = {name: batch.column(name) for name in batch.schema.names}
    is_list = need_pyarrow().types.is_list
    plain = {f.name: cols[f.name].to_pylist() for f in batch.schema if not is_list(f.type)}  # the scalar fields
    flats = {name: arrow_ragged(cols[name], np.uint64) for name in _LISTS_U64}
    flats.update({name: arrow_ragged(cols[name], np.int32) for name in _LISTS_I32})
    flats["seg_kind"] = arrow_ragged(cols["seg_kind"], np.int8)
    flats["breakpoints"] = arrow_ragged(cols["breakpoints"], np.int64)
    flats["boundaries"] = arrow_ragged(cols["boundaries"], np.int64)
    names = cols["seg_name"].to_pylist()
    route = cols["route_units"].to_pylist()

    def part(name: str, i: int) -> np.ndarray:
        return flats[name].row(i)

    for i in range(n):
        yield TraceRow(
            index=int(plain["index"][i]),
            time=plain["time"][i],
            source=str(plain["source"][i]),
            line=int(plain["line"][i]),
            namespace=str(plain["namespace"][i]),
            model=plain["model"][i],
            format=str(plain["format"][i]),
            tenant=plain["tenant"][i],
            prompt_tokens=int(plain["prompt_tokens"][i]),
            output_tokens=int(plain["output_tokens"][i]),
            token_scale=int(plain["token_scale"][i]),
            units=int(plain["units"][i]),
            keys_units=int(plain["keys_units"][i]),
            block_keys=part("block_keys", i),
            seg_kind=part("seg_kind", i),
            seg_start=part("seg_start", i),
            seg_end=part("seg_end", i),
            seg_index=part("seg_index", i),
            seg_hash=part("seg_hash", i),
            seg_names=tuple(names[i] or ()),
            chunk_start=part("chunk_start", i),
            chunk_end=part("chunk_end", i),
            chunk_msg=part("chunk_msg", i),
            chunk_hash=part("chunk_hash", i),
            chunk_chars=part("chunk_chars", i),
            breakpoints=tuple(int(x) for x in part("breakpoints", i)),
            boundaries=tuple(int(x) for x in part("boundaries", i)),
            boundary_keys=tuple(int(x) for x in part("boundary_keys", i)),
            route_units=None if route[i] is None else tuple(int(x) for x in route[i]),
            gw_key=plain["gw_key"][i],
            gw_key_tokens=int(plain["gw_key_tokens"][i]),
            exact=bool(plain["exact"][i]),
            logged_cached_tokens=plain["logged_cached_tokens"][i],
        )
