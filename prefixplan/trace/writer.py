"""Writing trace files: :class:`~prefixplan.trace.rows.TraceRow` records as Parquet (schema v1,
:mod:`prefixplan.trace.schema`), a batch at a time, under a temporary name renamed when complete."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from prefixplan.core.types import SEGMENT_KINDS
from prefixplan.errors import UsageError
from prefixplan.logs.remote import filesystem, is_url, shown, upload
from prefixplan.trace.blockhash import BLOCK_SCHEME
from prefixplan.trace.rows import TraceRow
from prefixplan.trace.schema import BATCH_ROWS, FORMAT, META_KEY, VERSION, arrow_schema, need_pyarrow


def _list(values: Sequence[np.ndarray], dtype: Any, pa_type: Any) -> Any:
    import pyarrow as pa

    lengths = np.fromiter((v.shape[0] for v in values), dtype=np.int32, count=len(values))
    offsets = np.zeros(len(values) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    flat = np.concatenate(values).astype(dtype, copy=False) if values else np.zeros(0, dtype=dtype)
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), pa.array(flat, pa_type))


def rows_to_batch(rows: Sequence[TraceRow]) -> Any:
    """One Arrow record batch of ``rows`` (schema :func:`_schema`)."""
    pa = need_pyarrow()
    schema = arrow_schema()

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
        need_pyarrow()
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
            self._writer = pq.ParquetWriter(str(self._tmp), arrow_schema(), compression="zstd")
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
    from prefixplan.version import __version__

    return {
        "format": FORMAT,
        "version": VERSION,
        "hash": BLOCK_SCHEME,
        "block_size": int(block_size),
        "granularity": dict(granularity),
        "segment_kinds": list(SEGMENT_KINDS),
        "tool": f"prefixplan {__version__}",
    }
