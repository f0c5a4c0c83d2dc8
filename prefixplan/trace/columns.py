"""A batch of trace rows as columns: what the first pass of ``analyze`` stores per request.

Reading a trace file row by row built a :class:`~prefixplan.trace.rows.TraceRow` per request
and then took it apart again into the row store's and the block trace's columns: about a third
of ``analyze T.parquet`` on the benchmark trace went to those per-request objects.
:class:`RowColumns` carries a batch of requests the way the file stores it (one array per field,
list fields flat with offsets), made from an Arrow record batch of a trace file, from the packed
rows a render worker sends, or from rows; :meth:`~prefixplan.trace.blocks.TraceBuilder.add_columns`
and :meth:`~prefixplan.analysis.rowstore.RowStore.add_columns` take a whole batch at once.

Only the fields those two read are here (no breakpoints, boundary keys or routing units: a run
that needs them, the Anthropic model or a sink that sees every row, reads rows).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from prefixplan.errors import InputError
from prefixplan.trace.rows import TraceRow, pack_rows

ARROW_FIELDS = (
    "index",
    "time",
    "source",
    "line",
    "namespace",
    "model",
    "format",
    "tenant",
    "prompt_tokens",
    "output_tokens",
    "token_scale",
    "units",
    "keys_units",
    "block_keys",
    "seg_kind",
    "seg_start",
    "seg_end",
    "seg_index",
    "seg_hash",
    "seg_name",
    "chunk_start",
    "chunk_end",
    "chunk_msg",
    "chunk_hash",
    "chunk_chars",
    "exact",
    "logged_cached_tokens",
)
"""The trace file's columns (:mod:`prefixplan.trace.parquet`) that :meth:`RowColumns.of_arrow`
reads."""


_INT_FIELDS = ("index", "line", "prompt_tokens", "output_tokens", "token_scale", "units", "keys_units")
_LABEL_FIELDS = ("source", "namespace", "model", "format", "tenant")
RAGGED_FIELDS: dict[str, type] = {
    "block_keys": np.uint64,
    "seg_kind": np.int8,
    "seg_start": np.int32,
    "seg_end": np.int32,
    "seg_index": np.int32,
    "seg_hash": np.uint64,
    "chunk_start": np.int32,
    "chunk_end": np.int32,
    "chunk_msg": np.int32,
    "chunk_hash": np.uint64,
    "chunk_chars": np.int32,
}
"""The list fields of :class:`RowColumns` and their dtypes."""


@dataclass(frozen=True, slots=True)
class Ragged:
    """One list field of a batch: row ``i``'s values are ``values[offsets[i]:offsets[i + 1]]``."""

    offsets: np.ndarray  # int64, n + 1 entries, from 0
    values: np.ndarray

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def row(self, i: int) -> np.ndarray:
        """Row ``i``'s values."""
        return self.values[int(self.offsets[i]) : int(self.offsets[i + 1])]


@dataclass(frozen=True, slots=True)
class Labels:
    """A string field of a batch, dictionary-encoded: row ``i``'s value is ``values[codes[i]]``."""

    codes: np.ndarray  # int64
    values: Sequence[str | None]

    @classmethod
    def of(cls, items: Sequence[str | None]) -> Labels:
        index: dict[str | None, int] = {}
        codes = np.fromiter((index.setdefault(v, len(index)) for v in items), dtype=np.int64, count=len(items))
        return cls(codes, list(index))

    def mapped(self, fn: Callable[[str | None], int], dtype: type = np.int64) -> np.ndarray:
        """``fn(value)`` of every row, calling ``fn`` once per distinct value."""
        per_value: np.ndarray = np.fromiter((fn(v) for v in self.values), dtype=dtype, count=len(self.values))
        return per_value[self.codes] if per_value.shape[0] else np.zeros(0, dtype=dtype)


@dataclass(frozen=True, slots=True)
class RowColumns:
    """``n`` consecutive trace rows as columns (module docstring); fields as in
    :class:`~prefixplan.trace.rows.TraceRow`. ``time`` is 0 where ``has_time`` is False;
    ``cached`` is -1 where the log gave no cached-token count."""

    n: int
    index: np.ndarray
    time: np.ndarray
    has_time: np.ndarray
    source: Labels
    line: np.ndarray
    namespace: Labels
    model: Labels
    format: Labels
    tenant: Labels
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    token_scale: np.ndarray
    units: np.ndarray
    keys_units: np.ndarray
    exact: np.ndarray
    cached: np.ndarray
    block_keys: Ragged
    seg_kind: Ragged
    seg_start: Ragged
    seg_end: Ragged
    seg_index: Ragged
    seg_hash: Ragged
    seg_names: Labels  # flat, by seg_kind's offsets
    chunk_start: Ragged
    chunk_end: Ragged
    chunk_msg: Ragged
    chunk_hash: Ragged
    chunk_chars: Ragged

    @classmethod
    def _assemble(
        cls,
        n: int,
        ints: Callable[[str], np.ndarray],
        labels: Callable[[str], Labels],
        ragged: Callable[[str, type], Ragged],
        **rest: Any,
    ) -> RowColumns:
        """The columns of ``n`` rows from a source's readers of int, string and list fields
        (``rest``: the fields each source reads its own way)."""
        fields: dict[str, Any] = {name: ints(name) for name in _INT_FIELDS}
        fields.update({name: labels(name) for name in _LABEL_FIELDS})
        fields.update({name: ragged(name, dtype) for name, dtype in RAGGED_FIELDS.items()})
        return cls(n=n, **fields, **rest)

    @classmethod
    def of_arrow(cls, batch: Any) -> RowColumns:
        """One Arrow record batch of a trace file (at least :data:`ARROW_FIELDS`)."""
        col = batch.column
        time = col("time")
        names = col("seg_name")
        flat_names = names.flatten()
        if len(flat_names) != len(col("seg_kind").flatten()) or names.null_count:
            raise InputError("segment names and kinds differ in number: a damaged trace")
        return cls._assemble(
            batch.num_rows,
            lambda name: arrow_ints(col(name)),
            lambda name: _labels(col(name)),
            lambda name, dtype: arrow_ragged(col(name), dtype),
            time=np.asarray(time.fill_null(0.0).to_numpy(zero_copy_only=False), dtype=np.float64),
            has_time=np.asarray(time.is_valid().to_numpy(zero_copy_only=False), dtype=bool),
            exact=np.asarray(col("exact").fill_null(False).to_numpy(zero_copy_only=False), dtype=bool),
            cached=arrow_ints(col("logged_cached_tokens"), -1),
            seg_names=_labels(flat_names),
        )

    @classmethod
    def of_packed(cls, packed: Mapping[str, Any]) -> RowColumns:
        """The columns of rows packed by :func:`~prefixplan.trace.rows.pack_rows` (what a render
        worker sends), without a row object in between."""
        n = int(packed["n"])

        def values(name: str) -> list[Any]:
            kind, *data = packed.get(name, ("list", []))  # no rows: no fields
            if kind != "list":
                raise ValueError(f"packed rows: {name} is not a list field")
            return data[0]

        def ints(name: str, none: int = 0) -> np.ndarray:
            return np.fromiter((none if v is None else int(v) for v in values(name)), dtype=np.int64, count=n)

        def ragged(name: str, dtype: type) -> Ragged:
            kind, *data = packed.get(name, ("list", []))
            offsets = np.zeros(n + 1, dtype=np.int64)
            if kind == "flat":
                flat, lengths = data
                np.cumsum(lengths, out=offsets[1:])
                return Ragged(offsets, np.asarray(flat, dtype=dtype))
            parts: list[np.ndarray] = [np.asarray(v, dtype=dtype) for v in data[0]]
            np.cumsum([p.shape[0] for p in parts], out=offsets[1:])
            return Ragged(offsets, np.concatenate(parts) if parts else np.zeros(0, dtype=dtype))

        times = values("time")
        return cls._assemble(
            n,
            ints,
            lambda name: Labels.of(values(name)),
            ragged,
            time=np.fromiter((0.0 if t is None else float(t) for t in times), np.float64, n),
            has_time=np.fromiter((t is not None for t in times), bool, n),
            exact=np.fromiter((bool(v) for v in values("exact")), bool, n),
            cached=ints("logged_cached_tokens", -1),
            seg_names=Labels.of([name for names in values("seg_names") for name in names]),
        )

    @classmethod
    def of_rows(cls, rows: Sequence[TraceRow]) -> RowColumns:
        """The columns of ``rows`` (a render job run in this process; tests)."""
        return cls.of_packed(pack_rows(rows))


def _labels(arr: Any) -> Labels:
    """An Arrow string column (dictionary-encoded or not, nulls as None) as :class:`Labels`."""
    if not hasattr(arr, "dictionary"):
        arr = arr.dictionary_encode()
    values: list[str | None] = arr.dictionary.to_pylist()
    indices = arr.indices
    if indices.null_count:
        indices = indices.fill_null(len(values))
        values.append(None)
    return Labels(np.asarray(indices.to_numpy(zero_copy_only=False), dtype=np.int64), values)


def arrow_ragged(arr: Any, dtype: Any) -> Ragged:
    """An Arrow list column (a slice of one, too) as :class:`Ragged`."""
    offsets = np.asarray(arr.offsets.to_numpy(zero_copy_only=False), dtype=np.int64)
    values = np.asarray(arr.values.to_numpy(zero_copy_only=False), dtype=dtype)
    return Ragged(offsets - offsets[0], values[offsets[0] : offsets[-1]])


def arrow_ints(arr: Any, fill: int = 0) -> np.ndarray:
    """An Arrow integer column as int64 (nulls as ``fill``)."""
    if arr.null_count:
        arr = arr.fill_null(fill)
    return np.asarray(arr.to_numpy(zero_copy_only=False), dtype=np.int64)
