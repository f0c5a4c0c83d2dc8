"""Checks that a trace file holds what a trace writer writes, before any of it is used.

A trace is read without its log, so nothing else would notice a damaged one: a flipped byte, a
column of another type, ``keys_units`` 0 or a ``NaN`` time would give wrong hit rates, or a crash
deep in a cache model. :class:`~prefixplan.trace.parquet.TraceFile` runs :func:`parse_meta` and
:func:`check_meta` on the footer, :func:`check_schema` on the columns, and :func:`check_batch` on
every record batch it reads (vectorised: a few passes over the batch's buffers). Each raises
:class:`TraceDamage` with the field named; the reader reports it as a damaged trace (exit 2).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from typing import Any

import numpy as np

from prefixplan.core.types import SEGMENT_KINDS
from prefixplan.logs.limits import clip
from prefixplan.trace.blockhash import BLOCK_SCHEME

MAX_META_DEPTH = 32
"""Nesting of the metadata JSON (a writer nests 4 deep)."""
MAX_TOKENS = 2**40
"""Largest prompt, output or unit count of one request (a log reader refuses more)."""
MAX_TIME = 1e11
"""Largest arrival time in seconds, either side of the epoch (log readers read larger numbers as
milliseconds, microseconds or nanoseconds)."""

NOT_NULL = (
    "index",
    "source",
    "line",
    "namespace",
    "format",
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
    "breakpoints",
    "boundaries",
    "boundary_keys",
    "gw_key_tokens",
    "exact",
)
"""Columns a writer never leaves null (``time``, ``model``, ``tenant``, ``route_units``,
``gw_key`` and ``logged_cached_tokens`` may be)."""
_SAME_LENGTHS = (
    ("seg_kind", "seg_start", "seg_end", "seg_index", "seg_hash", "seg_name"),
    ("chunk_start", "chunk_end", "chunk_msg", "chunk_hash", "chunk_chars"),
    ("boundaries", "boundary_keys"),
)
_LABELS = ("source", "namespace", "model", "format")  # dictionary-encoded by the writer
_BREAKER_FIELDS: dict[str, tuple[type, ...]] = {
    "kind": (str,),
    "pattern": (str,),
    "requests": (int,),
    "variants": (int,),
    "char_offset": (int, type(None)),
    "line": (int, type(None)),
    "column": (int, type(None)),
    "token_offset": (int,),
    "tail_tokens": (int,),
    "cost_tokens": (int,),
    "example": (str,),
    "preview": (str,),
    "tenants": (int,),
    "withheld": (bool,),
}


class TraceDamage(Exception):
    """What is wrong with a trace file (the reader names the file)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


# -- the footer --------------------------------------------------------------------------------


def parse_meta(raw: bytes) -> Any:
    """The metadata JSON, nested at most :data:`MAX_META_DEPTH` deep."""
    try:
        meta = json.loads(raw)
    except RecursionError:
        raise TraceDamage(f"metadata nested deeper than {MAX_META_DEPTH} levels") from None
    except ValueError as exc:
        raise TraceDamage(f"metadata is not JSON ({clip(exc)})") from None
    stack: list[tuple[Any, int]] = [(meta, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_META_DEPTH:
            raise TraceDamage(f"metadata nested deeper than {MAX_META_DEPTH} levels")
        if isinstance(value, dict):
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value)
    return meta


def _is_int(value: Any) -> bool:
    return type(value) is int


def _need(ok: bool, field: str, what: str, value: Any) -> None:
    if not ok:
        raise TraceDamage(f"metadata {field}: expected {what}, found {clip(json.dumps(value, default=str), 80)}")


def _mapping_of(meta: Mapping[str, Any], field: str, values: tuple[type, ...], *, optional: bool = True) -> None:
    value = meta.get(field)
    if value is None and optional:
        return
    ok = isinstance(value, dict) and all(
        isinstance(k, str) and isinstance(v, values) and not (isinstance(v, bool) and bool not in values)
        for k, v in value.items()
    )
    _need(ok, field, f"an object of {'/'.join(t.__name__ for t in values)} values", value)


def check_meta(meta: Mapping[str, Any], num_rows: int) -> None:
    """The fields a reader uses, with the types and ranges a writer gives them (the format,
    version, key scheme and segment kinds are checked by the reader)."""
    size = meta.get("block_size")
    _need(isinstance(size, int) and not isinstance(size, bool) and size >= 1, "block_size", "a positive integer", size)
    requests = meta.get("requests")
    if requests is not None:
        _need(_is_int(requests) and requests == num_rows, "requests", f"the file's {num_rows} rows", requests)
    failures = meta.get("render_failures")
    if failures is not None:
        _need(_is_int(failures) and failures >= 0, "render_failures", "a count", failures)
    _mapping_of(meta, "granularity", (str, int, float, bool, type(None), list, dict))
    inputs = meta.get("inputs")
    if inputs is not None:
        paths = inputs.get("paths") if isinstance(inputs, dict) else None
        ok = isinstance(inputs, dict) and (
            paths is None or (isinstance(paths, list) and all(isinstance(p, str) for p in paths))
        )
        _need(ok, "inputs", "an object whose paths are strings", inputs)
    _check_line_errors(meta.get("line_errors"))
    tokenizers = meta.get("tokenizers")
    if tokenizers is not None:
        ok = isinstance(tokenizers, list) and all(_tokenizer_ok(t) for t in tokenizers)
        _need(ok, "tokenizers", "a list of tokenizer objects", tokenizers)
    text = meta.get("text")
    if text is not None:
        _need(isinstance(text, dict), "text", "an object", text)
        _check_text(text)


def _check_line_errors(errors: Any) -> None:
    if errors is None:
        return
    _need(isinstance(errors, dict), "line_errors", "an object", errors)
    for key in ("count", "lines_read", "requests_read"):
        value = errors.get(key)
        _need(value is None or (_is_int(value) and value >= 0), f"line_errors.{key}", "a count", value)
    _mapping_of(errors, "by_reason", (int,))
    samples = errors.get("samples")
    ok = samples is None or (
        isinstance(samples, list)
        and all(
            isinstance(s, dict)
            and isinstance(s.get("source"), str)
            and _is_int(s.get("line"))
            and isinstance(s.get("reason"), str)
            for s in samples
        )
    )
    _need(ok, "line_errors.samples", "a list of {source, line, reason}", samples)


def _tokenizer_ok(t: Any) -> bool:
    if not isinstance(t, dict):
        return False
    strings = all(t.get(k) is None or isinstance(t.get(k), str) for k in ("spec", "label", "fingerprint", "suggested"))
    models = t.get("log_models")
    probe = t.get("probe_ids")
    return (
        strings
        and (models is None or (isinstance(models, list) and all(isinstance(m, str) for m in models)))
        and (probe is None or (isinstance(probe, list) and all(_is_int(i) and 0 <= i < 2**32 for i in probe)))
        and all(t.get(k) is None or isinstance(t.get(k), bool) for k in ("exact", "matches_log_model"))
    )


def _check_text(text: Mapping[str, Any]) -> None:
    previews = text.get("previews")
    ok = previews is None or (
        isinstance(previews, dict)
        and all(
            isinstance(p, list) and len(p) == 3 and isinstance(p[0], str) and isinstance(p[1], str) and _is_int(p[2])
            for p in previews.values()
        )
    )
    _need(ok, "text.previews", "an object of [kind, text, tokens]", previews)
    _mapping_of(text, "heads", (str,))
    _mapping_of(text, "parts", (str,))
    for h, b64 in (text.get("parts") or {}).items():
        try:
            base64.b64decode(b64, validate=True)
        except (binascii.Error, ValueError):
            raise TraceDamage(f"metadata text.parts.{clip(h, 40)}: not base64") from None
    _mapping_of(text, "engine_ids", (int,))
    _mapping_of(text, "spec_of", (str,))
    _mapping_of(text, "rag_whatif", (str, int, float, type(None)))
    breakers = text.get("breakers")
    ok = breakers is None or (isinstance(breakers, list) and all(_breaker_ok(b) for b in breakers))
    _need(ok, "text.breakers", "a list of breaker objects", breakers)


def _breaker_ok(b: Any) -> bool:
    if not isinstance(b, dict):
        return False
    for key, types in _BREAKER_FIELDS.items():
        value = b.get(key)
        if value is None and type(None) not in types and key not in ("tenants", "withheld"):
            return False
        if value is not None and (not isinstance(value, types) or (isinstance(value, bool) and bool not in types)):
            return False
    return True


def check_schema(schema: Any, expected: Any) -> None:
    """Every column of ``expected`` is in ``schema`` with its type (a string column may be
    dictionary-encoded or not)."""
    import pyarrow as pa

    have = {f.name: f.type for f in schema}
    missing = [f.name for f in expected if f.name not in have]
    if missing:
        raise TraceDamage(f"trace columns missing: {', '.join(missing)}")
    for field in expected:
        got = have[field.name]
        if got == field.type:
            continue
        if field.name in _LABELS and (pa.types.is_string(got) or pa.types.is_large_string(got)):
            continue
        if field.name in _LABELS and pa.types.is_dictionary(got) and pa.types.is_string(got.value_type):
            continue
        raise TraceDamage(f"column {field.name} is {clip(got, 60)}, expected {field.type}")


# -- the rows ----------------------------------------------------------------------------------


def check_batch(batch: Any, block_size: int) -> None:
    """One record batch of a trace file (any subset of its columns): buffers consistent, no null
    where a writer writes none, counts in range, list columns of one row the same length, offsets
    and kinds within the row's prompt."""
    import pyarrow as pa

    try:
        batch.validate(full=True)
    except (ValueError, pa.ArrowException) as exc:
        raise TraceDamage(f"inconsistent column data ({clip(exc)})") from None
    names = set(batch.schema.names)
    for name in NOT_NULL:
        if name in names and batch.column(name).null_count:
            raise TraceDamage(f"column {name} has nulls")
    ints = {name: _ints(batch.column(name)) for name in names if pa.types.is_integer(batch.schema.field(name).type)}
    _check_counts(ints)
    if "time" in names:
        time = batch.column("time").drop_null().to_numpy(zero_copy_only=False)
        if time.size and not bool(np.all(np.isfinite(time) & (np.abs(time) < MAX_TIME))):
            raise TraceDamage(f"column time holds NaN, infinity or a time past ±{MAX_TIME:g} s")
    if "token_scale" in ints and "keys_units" in ints:
        want = np.maximum(1, block_size // ints["token_scale"])
        if not np.array_equal(ints["keys_units"], want):
            raise TraceDamage(f"column keys_units differs from block_size {block_size} / token_scale")
    units = ints.get("units")
    lists = {
        name: _offsets_values(name, batch.column(name))
        for name in names
        if pa.types.is_list(batch.schema.field(name).type)
    }
    for name in ("block_keys", "boundary_keys"):
        keys = lists[name][1] if name in lists else None
        if keys is not None and keys.size and not bool(np.all(keys & np.uint64(1))):
            # keys of the scheme are odd: an even one (0 marks an empty index slot) is damage
            raise TraceDamage(f"{name} holds an even value, which no key of scheme {BLOCK_SCHEME} is")
    for group in _SAME_LENGTHS:
        present = [name for name in group if name in lists]
        for name in present[1:]:
            if not np.array_equal(lists[name][0], lists[present[0]][0]):
                raise TraceDamage(f"columns {present[0]} and {name} differ in length in a row")
    blocks = lists.get("block_keys")
    keys_units = ints.get("keys_units")
    if blocks is not None and units is not None and keys_units is not None:
        _need_rows(np.array_equal(np.diff(blocks[0]), units // keys_units), "block_keys", "units / keys_units keys")
    if "seg_kind" in lists:
        kinds = lists["seg_kind"][1]
        if kinds.size and (int(kinds.min()) < 0 or int(kinds.max()) >= len(SEGMENT_KINDS)):
            raise TraceDamage(f"column seg_kind outside 0..{len(SEGMENT_KINDS) - 1}")
    if units is not None:
        _check_spans(lists, units)


def _need_rows(ok: bool, column: str, what: str) -> None:
    if not ok:
        raise TraceDamage(f"column {column} does not hold {what} in a row")


def _check_counts(ints: Mapping[str, np.ndarray]) -> None:
    for name in ("index", "line", "prompt_tokens", "output_tokens", "units", "gw_key_tokens", "logged_cached_tokens"):
        values = ints.get(name)
        if values is not None and values.size and (int(values.min()) < 0 or int(values.max()) > MAX_TOKENS):
            raise TraceDamage(f"column {name} outside 0..2^40")
    scale = ints.get("token_scale")
    if scale is not None and scale.size and (int(scale.min()) < 1 or int(scale.max()) > MAX_TOKENS):
        raise TraceDamage("column token_scale outside 1..2^40")
    if "gw_key_tokens" in ints and "units" in ints and bool(np.any(ints["gw_key_tokens"] > ints["units"])):
        raise TraceDamage("column gw_key_tokens past the prompt's units")


def _check_spans(lists: Mapping[str, tuple[np.ndarray, np.ndarray]], units: np.ndarray) -> None:
    """Span offsets within ``0..units`` of their row, starts before ends, boundaries rising."""
    for start, end in (("seg_start", "seg_end"), ("chunk_start", "chunk_end")):
        if start not in lists or end not in lists:
            continue
        offsets, lo = lists[start]
        hi = lists[end][1]
        limit = np.repeat(units, np.diff(offsets))
        if lo.size and not bool(np.all((lo >= 0) & (lo <= hi) & (hi <= limit))):
            raise TraceDamage(f"columns {start}/{end} outside 0..units of their row, or ending before they start")
    for name, low in (("breakpoints", 0), ("boundaries", 1)):
        if name not in lists:
            continue
        offsets, values = lists[name]
        limit = np.repeat(units, np.diff(offsets))
        if values.size and not bool(np.all((values >= low) & (values <= limit))):
            raise TraceDamage(f"column {name} outside {low}..units of its row")
    if "boundaries" in lists:
        offsets, values = lists["boundaries"]
        rising = np.diff(values) > 0
        same_row = np.ones(max(values.size - 1, 0), dtype=bool)
        starts = offsets[1:-1]
        starts = starts[(starts > 0) & (starts < values.size)]
        same_row[starts - 1] = False
        if not bool(np.all(rising | ~same_row)):
            raise TraceDamage("column boundaries not rising within a row")
    if "chunk_chars" in lists and lists["chunk_chars"][1].size and int(lists["chunk_chars"][1].min()) < 0:
        raise TraceDamage("column chunk_chars below 0")


def _ints(arr: Any) -> np.ndarray:
    """An integer column as int64 (nulls as 0: null columns are refused above, or may be null)."""
    if arr.null_count:
        arr = arr.fill_null(0)
    return np.asarray(arr.to_numpy(zero_copy_only=False), dtype=np.int64)


def _offsets_values(name: str, arr: Any) -> tuple[np.ndarray, np.ndarray]:
    """A list column's offsets (from 0) and values (int64 for integers; uint64 kept)."""
    import pyarrow as pa

    offsets = np.asarray(arr.offsets.to_numpy(zero_copy_only=False), dtype=np.int64)
    child = arr.values.slice(int(offsets[0]), int(offsets[-1] - offsets[0]))
    if child.null_count and name not in ("seg_name", "route_units"):
        raise TraceDamage(f"column {name} holds a null item")
    if pa.types.is_integer(child.type):
        dtype = np.uint64 if child.type == pa.uint64() else np.int64
        values = np.asarray(child.fill_null(0).to_numpy(zero_copy_only=False), dtype=dtype)
    else:
        values = np.zeros(len(child), dtype=np.int64)
    return offsets - offsets[0], values
