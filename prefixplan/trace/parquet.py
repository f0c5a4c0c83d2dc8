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

import contextlib
import io
import json
import os
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from prefixplan.core.blockhash import SCHEME
from prefixplan.core.parquetio import iter_batches
from prefixplan.core.types import SEGMENT_KINDS
from prefixplan.errors import InputError, UsageError
from prefixplan.logs.remote import filesystem, is_url, open_remote, shown, upload
from prefixplan.render.stream import SourceOptions
from prefixplan.trace.columns import ARROW_FIELDS, RowColumns, arrow_ragged
from prefixplan.trace.rows import TraceRow

FORMAT = "prefixplan-trace"
VERSION = 1
META_KEY = b"prefixplan.trace"
BATCH_ROWS = 4096
PARQUET_MAGIC = b"PAR1"

_LISTS_U64 = ("block_keys", "seg_hash", "chunk_hash", "boundary_keys")
_LISTS_I32 = ("seg_start", "seg_end", "seg_index", "chunk_start", "chunk_end", "chunk_msg", "chunk_chars")


def _schema() -> Any:
    import pyarrow as pa

    dict_str = pa.dictionary(pa.int32(), pa.string())
    fields = [
        ("index", pa.int64()),
        ("time", pa.float64()),
        ("source", dict_str),
        ("line", pa.int64()),
        ("namespace", dict_str),
        ("model", dict_str),
        ("format", dict_str),
        ("tenant", pa.string()),
        ("prompt_tokens", pa.int64()),
        ("output_tokens", pa.int64()),
        ("token_scale", pa.int32()),
        ("units", pa.int64()),
        ("keys_units", pa.int32()),
        ("block_keys", pa.list_(pa.uint64())),
        ("seg_kind", pa.list_(pa.int8())),
        ("seg_start", pa.list_(pa.int32())),
        ("seg_end", pa.list_(pa.int32())),
        ("seg_index", pa.list_(pa.int32())),
        ("seg_hash", pa.list_(pa.uint64())),
        ("seg_name", pa.list_(pa.string())),
        ("chunk_start", pa.list_(pa.int32())),
        ("chunk_end", pa.list_(pa.int32())),
        ("chunk_msg", pa.list_(pa.int32())),
        ("chunk_hash", pa.list_(pa.uint64())),
        ("chunk_chars", pa.list_(pa.int32())),
        ("breakpoints", pa.list_(pa.int32())),
        ("boundaries", pa.list_(pa.int32())),
        ("boundary_keys", pa.list_(pa.uint64())),
        ("route_units", pa.list_(pa.uint64())),
        ("gw_key", pa.string()),
        ("gw_key_tokens", pa.int32()),
        ("exact", pa.bool_()),
        ("logged_cached_tokens", pa.int64()),
    ]
    return pa.schema(fields)


def _pyarrow() -> Any:
    try:
        import pyarrow
    except ImportError:  # pragma: no cover - a dependency
        raise UsageError("trace files need pyarrow", hint="pip install pyarrow") from None
    return pyarrow


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
    except Exception:  # a damaged footer: TraceFile says what is wrong
        return True
    return META_KEY in meta


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


def _list(values: Sequence[np.ndarray], dtype: Any, pa_type: Any) -> Any:
    import pyarrow as pa

    lengths = np.fromiter((v.shape[0] for v in values), dtype=np.int32, count=len(values))
    offsets = np.zeros(len(values) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    flat = np.concatenate(values).astype(dtype, copy=False) if values else np.zeros(0, dtype=dtype)
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), pa.array(flat, pa_type))


def rows_to_batch(rows: Sequence[TraceRow]) -> Any:
    """One Arrow record batch of ``rows`` (schema :func:`_schema`)."""
    pa = _pyarrow()
    schema = _schema()

    def col(name: str) -> list[Any]:
        return [getattr(r, name) for r in rows]

    def dict_col(name: str) -> Any:
        return pa.array(col(name), pa.string()).dictionary_encode()

    def tuple_list(name: str, pa_type: Any, dtype: Any) -> Any:
        return _list([np.asarray(getattr(r, name), dtype=dtype) for r in rows], dtype, pa_type)

    route = [r.route_units for r in rows]
    route_arr = (
        pa.array([None if u is None else list(u) for u in route], pa.list_(pa.uint64()))
        if any(u is not None for u in route)
        else pa.nulls(len(rows), pa.list_(pa.uint64()))
    )
    arrays = [
        pa.array(col("index"), pa.int64()),
        pa.array(col("time"), pa.float64()),
        dict_col("source"),
        pa.array(col("line"), pa.int64()),
        dict_col("namespace"),
        dict_col("model"),
        dict_col("format"),
        pa.array(col("tenant"), pa.string()),
        pa.array(col("prompt_tokens"), pa.int64()),
        pa.array(col("output_tokens"), pa.int64()),
        pa.array(col("token_scale"), pa.int32()),
        pa.array(col("units"), pa.int64()),
        pa.array(col("keys_units"), pa.int32()),
        _list([r.block_keys for r in rows], np.uint64, pa.uint64()),
        _list([r.seg_kind for r in rows], np.int8, pa.int8()),
        _list([r.seg_start for r in rows], np.int32, pa.int32()),
        _list([r.seg_end for r in rows], np.int32, pa.int32()),
        _list([r.seg_index for r in rows], np.int32, pa.int32()),
        _list([r.seg_hash for r in rows], np.uint64, pa.uint64()),
        pa.array([list(r.seg_names) for r in rows], pa.list_(pa.string())),
        _list([r.chunk_start for r in rows], np.int32, pa.int32()),
        _list([r.chunk_end for r in rows], np.int32, pa.int32()),
        _list([r.chunk_msg for r in rows], np.int32, pa.int32()),
        _list([r.chunk_hash for r in rows], np.uint64, pa.uint64()),
        _list([r.chunk_chars for r in rows], np.int32, pa.int32()),
        tuple_list("breakpoints", pa.int32(), np.int32),
        tuple_list("boundaries", pa.int32(), np.int32),
        tuple_list("boundary_keys", pa.uint64(), np.uint64),
        route_arr,
        pa.array(col("gw_key"), pa.string()),
        pa.array(col("gw_key_tokens"), pa.int32()),
        pa.array(col("exact"), pa.bool_()),
        pa.array(col("logged_cached_tokens"), pa.int64()),
    ]
    # dictionary columns are encoded per batch; cast keeps the file schema's index type
    fixed = []
    for field, arr in zip(schema, arrays, strict=True):
        fixed.append(arr.cast(field.type) if arr.type != field.type else arr)
    return pa.RecordBatch.from_arrays(fixed, schema=schema)


class TraceWriter:
    """Writes rows to a Parquet trace file as they come (use as a context manager).

    The file is written under a temporary name and renamed on :meth:`close`, so a run that
    fails leaves no half-written trace behind.
    """

    def __init__(self, path: str | os.PathLike[str], meta: Mapping[str, Any]) -> None:
        _pyarrow()
        import pyarrow.parquet as pq

        target = os.fspath(path)
        self.url = target if is_url(target) else None  # written locally, then put in one piece
        if self.url is not None:
            filesystem(self.url)  # a missing extra is said now, not after rendering
            fd, tmp = tempfile.mkstemp(prefix=".prefixplan-trace-", suffix=".parquet")
            os.close(fd)
            self.path = Path(tmp)
            self._tmp = Path(tmp)
        else:
            self.path = Path(target)
            if self.path.is_dir():
                raise UsageError(
                    f"cannot write {self.path}: it is a folder", hint="give a file name, e.g. trace.parquet"
                )
            self._tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        self.meta = dict(meta)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._writer = pq.ParquetWriter(str(self._tmp), _schema(), compression="zstd")
        except OSError as exc:
            raise UsageError(f"cannot write {self.target}: {exc.strerror or exc}") from exc
        self._rows: list[TraceRow] = []
        self.count = 0
        self._closed = False

    @property
    def target(self) -> str:
        """Where the trace goes: the file, or the URL (without credentials)."""
        return shown(self.url) if self.url is not None else str(self.path)

    def write(self, row: TraceRow) -> None:
        self._rows.append(row)
        if len(self._rows) >= BATCH_ROWS:
            self._flush()

    def _flush(self) -> None:
        if self._rows:
            self._writer.write_batch(rows_to_batch(self._rows))
            self.count += len(self._rows)
            self._rows = []

    def close(self, extra_meta: Mapping[str, Any] | None = None) -> str:
        """Finish the file with its metadata (``extra_meta`` merged in); returns :attr:`target`."""
        if self._closed:
            return self.target
        try:
            self._flush()
            meta = {**self.meta, **(extra_meta or {}), "requests": self.count}
            self._writer.add_key_value_metadata({META_KEY: json.dumps(meta, ensure_ascii=False).encode()})
            self._writer.close()
        except BaseException as exc:
            # a full disk, a size limit: no half-written trace is left, hidden or not
            with contextlib.suppress(Exception):
                self.abort()
            if isinstance(exc, OSError):
                raise UsageError(f"cannot write {self.target}: {exc.strerror or exc}") from exc
            raise
        self._closed = True
        if self.url is not None:
            try:
                upload(str(self._tmp), self.url)
            finally:
                self._tmp.unlink(missing_ok=True)
            return self.target
        try:
            os.replace(self._tmp, self.path)
        except OSError as exc:
            raise UsageError(f"cannot write {self.path}: {exc.strerror or exc}") from exc
        return self.target

    def abort(self) -> None:
        """Drop the partial file."""
        if not self._closed:
            self._closed = True
            try:
                self._writer.close()
            finally:
                self._tmp.unlink(missing_ok=True)

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, exc_type: object, *_: object) -> None:
        if exc_type is not None:
            self.abort()
        else:
            self.close()


def base_meta(block_size: int, granularity: Mapping[str, Any]) -> dict[str, Any]:
    """The metadata every trace starts with."""
    from prefixplan import __version__

    return {
        "format": FORMAT,
        "version": VERSION,
        "hash": SCHEME,
        "block_size": int(block_size),
        "granularity": dict(granularity),
        "segment_kinds": list(SEGMENT_KINDS),
        "tool": f"prefixplan {__version__}",
    }


class TraceFile:
    """A trace file opened for reading: :attr:`meta` and :meth:`rows`."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        _pyarrow()
        import pyarrow.parquet as pq

        target = os.fspath(path)
        remote = is_url(target)
        self.path: Path | str = shown(target) if remote else Path(target)
        try:
            self._file = pq.ParquetFile(io.BufferedReader(open_remote(target)) if remote else target)
        except OSError as exc:
            raise InputError(f"{self.path}: cannot read the trace: {exc}") from exc
        except Exception as exc:  # pyarrow.ArrowInvalid for a damaged file
            raise InputError(f"{self.path}: not a readable Parquet file ({exc})") from exc
        raw = (self._file.metadata.metadata or {}).get(META_KEY)
        if raw is None:
            raise InputError(
                f"{self.path}: a Parquet file without prefixplan trace metadata",
                hint="write traces with prefixplan analyze/simulate --trace-out FILE",
            )
        try:
            meta = json.loads(raw)
        except ValueError as exc:
            raise InputError(f"{self.path}: damaged trace metadata ({exc})") from exc
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            raise InputError(f"{self.path}: not a prefixplan trace")
        version = meta.get("version")
        if type(version) is not int or version != VERSION:  # not True, not 1.0
            raise InputError(
                f"{self.path}: trace version {meta.get('version')!r}; this prefixplan reads version {VERSION}",
                hint="write the trace again with this version of prefixplan",
            )
        if meta.get("hash") != SCHEME:
            raise InputError(f"{self.path}: block keys of scheme {meta.get('hash')!r}; expected {SCHEME}")
        kinds = meta.get("segment_kinds")
        if kinds != list(SEGMENT_KINDS):
            raise InputError(f"{self.path}: segment kinds {kinds!r} differ from this prefixplan's")
        missing = [f.name for f in _schema() if f.name not in self._file.schema_arrow.names]
        if missing:
            raise InputError(f"{self.path}: trace columns missing: {', '.join(missing)}")
        self.meta: dict[str, Any] = meta

    @property
    def num_rows(self) -> int:
        return int(self._file.metadata.num_rows)

    def rows(self, batch_rows: int = BATCH_ROWS) -> Iterator[TraceRow]:
        """The rows in file order, streamed in batches."""
        for batch in iter_batches(self._file, batch_rows):
            try:
                yield from batch_rows_of(batch)
            except InputError as exc:  # a damaged batch: say which file
                raise InputError(f"{self.path}: {exc}", hint="write the trace again from its log") from None

    def columns(self, batch_rows: int = BATCH_ROWS) -> Iterator[RowColumns]:
        """The rows in file order as :class:`~prefixplan.trace.columns.RowColumns`, a batch at a
        time (only the columns they hold are decoded)."""
        for batch in iter_batches(self._file, batch_rows, ARROW_FIELDS):
            try:
                yield batch_columns_of(batch)
            except InputError as exc:
                raise InputError(f"{self.path}: {exc}", hint="write the trace again from its log") from None


def _odd_keys(name: str, keys: np.ndarray) -> None:
    if keys.size and not bool(np.all(keys & np.uint64(1))):
        # keys of the scheme are odd: an even one (0 marks an empty index slot) is damage
        raise InputError(f"{name} holds an even value, which no key of scheme {SCHEME} is: a damaged trace")


def batch_columns_of(batch: Any) -> RowColumns:
    """One record batch (of at least :data:`~prefixplan.trace.columns.ARROW_FIELDS`) as
    :class:`RowColumns`, its block keys checked."""
    cols = RowColumns.of_arrow(batch)
    _odd_keys("block_keys", cols.block_keys.values)
    return cols


def batch_rows_of(batch: Any) -> Iterator[TraceRow]:
    """The rows of one record batch."""
    n = batch.num_rows
    cols = {name: batch.column(name) for name in batch.schema.names}
    is_list = _pyarrow().types.is_list
    plain = {f.name: cols[f.name].to_pylist() for f in batch.schema if not is_list(f.type)}  # the scalar fields
    flats = {name: arrow_ragged(cols[name], np.uint64) for name in _LISTS_U64}
    for name in ("block_keys", "boundary_keys"):
        _odd_keys(name, flats[name].values)
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
