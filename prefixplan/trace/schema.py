"""The trace file's format: its columns (schema v1), metadata key and constants, shared by the
writer (:mod:`prefixplan.trace.writer`) and the reader (:mod:`prefixplan.trace.parquet`)."""

from __future__ import annotations

from typing import Any

from prefixplan.errors import UsageError

FORMAT = "prefixplan-trace"
VERSION = 1
META_KEY = b"prefixplan.trace"
BATCH_ROWS = 4096
PARQUET_MAGIC = b"PAR1"


def arrow_schema() -> Any:
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


def need_pyarrow() -> Any:
    try:
        import pyarrow
    except ImportError:  # pragma: no cover - a dependency
        raise UsageError("trace files need pyarrow", hint="pip install pyarrow") from None
    return pyarrow
