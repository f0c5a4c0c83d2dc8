"""Request logs as tables: Parquet and CSV files, one request a row.

A row is read like one JSON log line whose keys are the row's fields, so every request format
and check of the JSON reader applies (:func:`prefixplan.logs.dispatch.parse_line`). Without a
column mapping the fields are the columns, by name. ``--columns FIELD=COLUMN,...`` names the
column of each field (:data:`FIELDS`); a column of a struct (Parquet) or of a JSON-valued cell is
reached with dots (``request.messages``). Fields not mapped are taken from a column of the same
name when there is one. Cells of JSON-valued fields (``messages``, ``tools``, ``request``...)
may hold JSON text, which is parsed; timestamps may be Parquet timestamps, numbers or text.

Parquet is read in record batches of :data:`BATCH_ROWS` rows and only the needed columns, CSV
row by row from a (possibly compressed) stream (:mod:`prefixplan.logs.csvtable`), so memory stays
bounded by a batch; a row over the per-record byte limit is a bad row. Rows are numbered from 1 in
Parquet; in CSV a row's number is the line it starts on (the header is line 1), like a JSON line's.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timezone
from decimal import Decimal
from typing import Any, BinaryIO

import numpy as np

from prefixplan.core.parquetio import iter_batches
from prefixplan.errors import UsageError
from prefixplan.logs.badline import BadLine
from prefixplan.logs.limits import MAX_RECORD_BYTES, clip
from prefixplan.logs.rowsize import row_bytes

TABLE_FORMATS = ("parquet", "csv")
"""Table containers; ``--log-format parquet|csv`` forces one (rows are still detected per row)."""
FIELDS = (
    "messages",
    "tools",
    "model",
    "timestamp",
    "user",
    "id",
    "prompt",
    "system",
    "max_tokens",
    "tenant",
    "lora",
    "cache_salt",
    "hash_ids",
    "input_length",
    "request",
    "response",
    "usage",
)
"""Request fields a ``--columns`` mapping may name (the keys of a JSON log line)."""
JSON_FIELDS = frozenset(
    {
        "messages",
        "tools",
        "functions",
        "request",
        "response",
        "body",
        "usage",
        "metadata",
        "hash_ids",
        "prompt_ids",
        "system",
        "tool_choice",
        "response_format",
        "chat_template_kwargs",
        "params",
    }
)
"""Fields whose text cells hold JSON (parsed when the text starts with ``{`` or ``[``)."""
INT_FIELDS = frozenset({"max_tokens", "max_completion_tokens", "input_length", "output_length"})
_WHOLE_FIELDS = INT_FIELDS | {"user", "tenant", "id"}
BATCH_ROWS = 256
TRACE_META_KEY = b"prefixplan.trace"
_EXTENSIONS = ((".parquet", "parquet"), (".pq", "parquet"), (".csv", "csv"))
_COMPRESSED = (".gz", ".gzip", ".zst", ".zstd")


def parse_columns(spec: str | Mapping[str, str] | Sequence[tuple[str, str]] | None) -> tuple[tuple[str, str], ...]:
    """``"messages=request.messages,timestamp=ts"`` (or a mapping) as ``((field, column), ...)``.

    Raises:
        UsageError: a part is not FIELD=COLUMN, or names a field prefixplan does not know.
    """
    if spec is None:
        return ()
    if isinstance(spec, str):
        pairs: list[tuple[str, str]] = []
        for part in spec.split(","):
            if not part.strip():
                continue
            field, sep, column = part.partition("=")
            if not sep or not field.strip() or not column.strip():
                raise UsageError(
                    f"--columns: {part.strip()!r} is not FIELD=COLUMN",
                    hint="e.g. --columns messages=request.messages,timestamp=ts",
                )
            pairs.append((field.strip(), column.strip()))
    else:
        items = spec.items() if isinstance(spec, Mapping) else spec
        pairs = [(str(f), str(c)) for f, c in items]
    seen: set[str] = set()
    for field, _ in pairs:
        if field not in FIELDS:
            raise UsageError(f"--columns: unknown field {field!r}", hint=f"fields: {', '.join(FIELDS)}")
        if field in seen:
            raise UsageError(f"--columns: field {field!r} is mapped twice")
        seen.add(field)
    return tuple(pairs)


def table_format(name: str, forced: str) -> str | None:
    """``"parquet"``/``"csv"`` when ``name`` is a table (forced, or by its extension), else None."""
    if forced in TABLE_FORMATS:
        return forced
    lower = name.split("?", 1)[0].lower()
    for ext in _COMPRESSED:
        if lower.endswith(ext):
            lower = lower[: -len(ext)]
            break
    for ext, kind in _EXTENSIONS:
        if lower.endswith(ext):
            return kind
    return None


# -- column plans ------------------------------------------------------------------------------


def column_plan(
    names: Sequence[str], columns: tuple[tuple[str, str], ...], source: str
) -> list[tuple[str, str, tuple[str, ...]]]:
    """(field, top-level column, path inside the cell) for each field a row is built from."""
    if not columns:
        return [(name, name, ()) for name in names]
    present = set(names)
    plan: list[tuple[str, str, tuple[str, ...]]] = []
    for field, spec in columns:
        if spec in present:
            plan.append((field, spec, ()))
            continue
        parts = spec.split(".")
        for cut in range(len(parts) - 1, 0, -1):
            top = ".".join(parts[:cut])
            if top in present:
                plan.append((field, top, tuple(parts[cut:])))
                break
        else:
            shown = ", ".join(names[:50]) + (", ..." if len(names) > 50 else "")
            raise UsageError(
                f"--columns {field}={spec}: {source} has no column {spec!r}",
                hint=f"its columns: {shown or '(none)'}",
            )
    mapped = {f for f, _ in columns}
    used = {top for _, top, _ in plan}
    plan += [(f, f, ()) for f in FIELDS if f in present and f not in mapped and f not in used]
    return plan


def _strip_nulls(value: Any) -> Any:
    """A Parquet struct's value without its null fields (a struct column has every key of every row)."""
    if isinstance(value, dict):
        return {k: _strip_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_strip_nulls(v) for v in value]
    return value


def _json_cell(field: str, text: str) -> Any:
    head = text.lstrip()[:1]
    if head not in ("{", "["):
        return text
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadLine(f"bad JSON: column {field!r}: {exc.msg} at column {exc.colno}") from None
    except ValueError as exc:  # an integer literal past Python's digit limit (4300 digits)
        raise BadLine(f"bad JSON: column {field!r}: {str(exc)[:200]}") from None
    except RecursionError:
        raise BadLine(f"nesting too deep: column {field!r}") from None


def _scalar(value: Any) -> Any:
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=timezone.utc)
        return value.timestamp()
    if isinstance(value, date):
        return datetime(value.year, value.month, value.day, tzinfo=timezone.utc).timestamp()
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, (bytes, bytearray)):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BadLine(f"invalid UTF-8: byte 0x{value[exc.start]:02x} at offset {exc.start}") from None
    return value


def _cell(field: str, value: Any, path: tuple[str, ...], arrow: bool) -> Any:
    """One field's value from its cell: nested path followed, JSON text parsed, types normalised."""
    parsed = False
    for key in path:
        if isinstance(value, str):
            value = _json_cell(field, value)
            parsed = True
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if isinstance(value, float) and field in _WHOLE_FIELDS and value.is_integer():
        return int(value)  # an integer column with nulls, stored as float (pandas)
    value = _scalar(value)
    if isinstance(value, str):
        if not value:
            return None
        if field in JSON_FIELDS:
            return _json_cell(field, value)
        if field == "prompt" and value.lstrip()[:1] == "[":
            try:
                ids = json.loads(value)
            except ValueError:
                return value
            return ids if isinstance(ids, list) and all(isinstance(i, int) for i in ids) else value
        if field in INT_FIELDS and value.strip().isdigit():
            return int(value)
        return value
    if arrow and not parsed and isinstance(value, (dict, list)):
        return _strip_nulls(value)
    return value


def row_object(plan: list[tuple[str, str, tuple[str, ...]]], cells: Mapping[str, Any], arrow: bool) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for field, top, path in plan:
        value = _cell(field, cells.get(top), path, arrow)
        if value is not None:
            obj[field] = value
    return obj


# -- readers -----------------------------------------------------------------------------------


class TableCorrupt(Exception):
    """The file is not readable as the table it claims to be (the rest of it is skipped)."""


@dataclass(slots=True)
class TableShape:
    """What a table reader learned of a file before its rows: its columns (None: not read)."""

    columns: int | None = None


def iter_parquet(
    raw: BinaryIO,
    source: str,
    columns: tuple[tuple[str, str], ...],
    max_row_bytes: int = MAX_RECORD_BYTES,
    shape: TableShape | None = None,
) -> Iterator[tuple[int, dict[str, Any] | BadLine]]:
    """(row number, row object or why it is bad) for each row of a Parquet file, in order. A row
    whose cells hold more than ``max_row_bytes`` is bad, measured from the column buffers before
    any of it becomes a Python object (:mod:`prefixplan.logs.rowsize`).

    Raises:
        TableCorrupt: not a Parquet file, or damaged.
        UsageError: ``columns`` names a column the file does not have; the file is a prefixplan trace.
    """
    try:
        import pyarrow.parquet as pq

        pf = pq.ParquetFile(raw)
        meta = pf.metadata.metadata or {}
        names = list(pf.schema_arrow.names)
    except (OSError, ValueError) as exc:  # pyarrow.ArrowInvalid is a ValueError
        raise TableCorrupt(f"not a readable Parquet file ({str(exc)[:200]})") from None
    if TRACE_META_KEY in meta:
        raise UsageError(
            f"{source} is a prefixplan trace file, not a request log",
            hint="give a trace file on its own, as a local path: prefixplan analyze TRACE.parquet",
        )
    plan = column_plan(names, columns, source)
    if shape is not None:
        shape.columns = len(names)
    needed = list(dict.fromkeys(top for _, top, _ in plan))
    row_no = 0
    try:
        for batch in iter_batches(pf, BATCH_ROWS, needed):
            arrays = [batch.column(name) for name in needed]
            sizes = row_bytes(arrays, batch.num_rows)
            keep = np.flatnonzero(sizes <= max_row_bytes)
            if keep.shape[0] < batch.num_rows:  # only the rows within the limit become Python values
                arrays = [a.take(keep) for a in arrays]
            data = {name: _values(a) for name, a in zip(needed, arrays, strict=True)}
            k = 0
            for i in range(batch.num_rows):
                row_no += 1
                if sizes[i] > max_row_bytes:
                    yield (
                        row_no,
                        BadLine(
                            f"record too large: row of {int(sizes[i]):,} bytes > max_line_bytes {max_row_bytes:,} (skipped)"
                        ),
                    )
                    continue
                yield row_no, _row_or_why(plan, {name: values[k] for name, values in data.items()})
                k += 1
    except (OSError, ValueError) as exc:  # pyarrow's errors are OSError or ValueError
        raise TableCorrupt(f"Parquet data damaged after row {row_no} ({clip(exc)})") from None


def _row_or_why(plan: list[tuple[str, str, tuple[str, ...]]], cells: Mapping[str, Any]) -> dict[str, Any] | BadLine:
    try:
        return row_object(plan, cells, True)
    except BadLine as exc:
        return exc
    except RecursionError:
        return BadLine("nesting too deep: a cell nested deeper than the reader allows")
    except (TypeError, ValueError, OverflowError) as exc:  # a cell of a type no field takes
        return BadLine(f"invalid record: {type(exc).__name__}: {clip(exc)}")


def _values(column: Any) -> list[Any]:
    """A column's values; nanosecond timestamps as their integer count (Python's datetime holds
    microseconds, and pyarrow refuses the conversion without pandas), read as epoch ns."""
    import pyarrow as pa

    if pa.types.is_timestamp(column.type) and column.type.unit == "ns":
        return column.cast(pa.int64()).to_pylist()
    return column.to_pylist()
