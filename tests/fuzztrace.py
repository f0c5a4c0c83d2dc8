"""Seeded damage to a valid trace file: bytes flipped at seeded offsets, one column or metadata
field changed to a value no writer writes.

Used by tests/test_fuzz_traces.py. Every mutation keeps the file a Parquet file whose footer names
the trace (so it is read as a trace); the reader must refuse it as damaged (exit 2) or read it
(exit 0: a flipped byte may land where nothing checks it, e.g. inside a key), never crash.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

META_KEY = b"prefixplan.trace"


def read_trace(path: Path) -> tuple[Any, dict[str, Any]]:
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(path)
    return pf.read(), json.loads(pf.metadata.metadata[META_KEY])


def write_trace(path: Path, table: Any, meta: dict[str, Any] | bytes, *, compression: str = "zstd") -> Path:
    """``table`` with ``meta`` (a dict as JSON, or raw bytes) as the trace metadata."""
    import pyarrow.parquet as pq

    raw = meta if isinstance(meta, bytes) else json.dumps(meta).encode()
    table = table.replace_schema_metadata(None)  # pyarrow puts the file's key-value metadata there
    with pq.ParquetWriter(path, table.schema, compression=compression) as out:
        out.write_table(table)
        out.add_key_value_metadata({META_KEY: raw})
    return path


def flip_bytes(src: Path, dst: Path, rng: random.Random, flips: int) -> Path:
    """``src`` with ``flips`` bytes XORed at seeded offsets of its data pages (the footer, which
    names the file a trace, is left alone: a damaged footer is its own case)."""
    data = bytearray(src.read_bytes())
    footer = int.from_bytes(data[-8:-4], "little") + 8
    for _ in range(flips):
        at = rng.randrange(4, len(data) - footer)
        data[at] ^= rng.randrange(1, 256)
    dst.write_bytes(bytes(data))
    return dst


def _replace(table: Any, name: str, array: Any) -> Any:
    return table.set_column(table.schema.get_field_index(name), name, array)


def _ints(table: Any, name: str, fn: Callable[[list[Any]], list[Any]]) -> Any:
    import pyarrow as pa

    col = table.column(name).combine_chunks()
    return _replace(table, name, pa.array(fn(col.to_pylist()), col.type))


def _lists(table: Any, name: str, fn: Callable[[list[Any]], list[Any]], value_type: Any = None) -> Any:
    import pyarrow as pa

    col = table.column(name).combine_chunks()
    return _replace(table, name, pa.array(fn(col.to_pylist()), value_type or col.type))


def _first_nonempty(rows: list[Any], change: Callable[[list[Any]], list[Any]]) -> list[Any]:
    out = list(rows)
    for i, row in enumerate(out):
        if row:
            out[i] = change(list(row))
            break
    return out


def _set(values: list[Any], at: int, value: Any) -> list[Any]:
    out = list(values)
    out[at % len(out)] = value
    return out


def _column_mutations() -> dict[str, Callable[[Any, random.Random], Any]]:
    import pyarrow as pa

    return {
        "negative prompt_tokens": lambda t, r: _ints(t, "prompt_tokens", lambda v: _set(v, r.randrange(len(v)), -5)),
        "keys_units 0": lambda t, r: _ints(t, "keys_units", lambda v: [0] * len(v)),
        "keys_units 3": lambda t, r: _ints(t, "keys_units", lambda v: [3] * len(v)),
        "token_scale 0": lambda t, r: _ints(t, "token_scale", lambda v: _set(v, r.randrange(len(v)), 0)),
        "units past the keys": lambda t, r: _ints(t, "units", lambda v: [u + 10_000 for u in v]),
        "time NaN": lambda t, r: _ints(t, "time", lambda v: _set(v, r.randrange(len(v)), float("nan"))),
        "time infinite": lambda t, r: _ints(t, "time", lambda v: _set(v, r.randrange(len(v)), float("inf"))),
        "time 1e300": lambda t, r: _ints(t, "time", lambda v: _set(v, r.randrange(len(v)), 1e300)),
        "null prompt_tokens": lambda t, r: _replace(t, "prompt_tokens", pa.nulls(len(t), pa.int64())),
        "null units": lambda t, r: _ints(t, "units", lambda v: _set(v, r.randrange(len(v)), None)),
        "null namespace": lambda t, r: _replace(t, "namespace", pa.nulls(len(t), pa.string())),
        "prompt_tokens as text": lambda t, r: _replace(
            t, "prompt_tokens", pa.array([str(x) for x in t.column("prompt_tokens").to_pylist()], pa.string())
        ),
        "exact as int": lambda t, r: _replace(t, "exact", pa.array([1] * len(t), pa.int64())),
        "seg_kind out of range": lambda t, r: _lists(
            t, "seg_kind", lambda v: _first_nonempty(v, lambda s: _set(s, 0, 99))
        ),
        "seg_kind negative": lambda t, r: _lists(t, "seg_kind", lambda v: _first_nonempty(v, lambda s: _set(s, 0, -1))),
        "seg_start short": lambda t, r: _lists(t, "seg_start", lambda v: _first_nonempty(v, lambda s: s[:-1])),
        "seg_end past units": lambda t, r: _lists(
            t, "seg_end", lambda v: _first_nonempty(v, lambda s: _set(s, -1, 2**30))
        ),
        "seg_start after seg_end": lambda t, r: _lists(
            t, "seg_start", lambda v: _first_nonempty(v, lambda s: _set(s, -1, 2**30))
        ),
        "seg_name short": lambda t, r: _lists(t, "seg_name", lambda v: _first_nonempty(v, lambda s: s[:-1])),
        "block_keys missing one": lambda t, r: _lists(t, "block_keys", lambda v: _first_nonempty(v, lambda s: s[:-1])),
        "block key even": lambda t, r: _lists(t, "block_keys", lambda v: _first_nonempty(v, lambda s: _set(s, 0, 2))),
        "boundaries falling": lambda t, r: _lists(
            t, "boundaries", lambda v: _first_nonempty(v, lambda s: s[::-1] + [1])
        ),
        "boundary_keys short": lambda t, r: _lists(t, "boundary_keys", lambda v: _first_nonempty(v, lambda s: s[:-1])),
        "null block key": lambda t, r: _lists(
            t, "block_keys", lambda v: _first_nonempty(v, lambda s: _set(s, 0, None))
        ),
        "chunk_end negative": lambda t, r: _lists(t, "chunk_end", lambda v: [[-1] * len(s) for s in v]),
        "index negative": lambda t, r: _ints(t, "index", lambda v: _set(v, 0, -1)),
        "gw_key_tokens past units": lambda t, r: _ints(t, "gw_key_tokens", lambda v: [2**30] * len(v)),
        "line huge": lambda t, r: _ints(t, "line", lambda v: _set(v, 0, 2**62)),
        "column dropped": lambda t, r: t.drop_columns([r.choice(["units", "seg_kind", "time", "block_keys"])]),
    }


def _deep(levels: int) -> Any:
    value: Any = 1
    for _ in range(levels):
        value = [value]
    return value


META_MUTATIONS: dict[str, Callable[[dict[str, Any]], dict[str, Any] | bytes]] = {
    "block_size 0": lambda m: {**m, "block_size": 0},
    "block_size -16": lambda m: {**m, "block_size": -16},
    "block_size text": lambda m: {**m, "block_size": "16"},
    "block_size float": lambda m: {**m, "block_size": 16.5},
    "block_size null": lambda m: {**m, "block_size": None},
    "requests wrong": lambda m: {**m, "requests": int(m.get("requests") or 0) + 7},
    "line_errors a list": lambda m: {**m, "line_errors": [1, 2]},
    "line_errors count text": lambda m: {**m, "line_errors": {"count": "many"}},
    "tokenizers an object": lambda m: {**m, "tokenizers": {"spec": "x"}},
    "tokenizer probe ids text": lambda m: {**m, "tokenizers": [{"spec": "x", "probe_ids": "1,2"}]},
    "text previews a list": lambda m: {**m, "text": {"previews": [1, 2, 3]}},
    "text parts not base64": lambda m: {**m, "text": {"parts": {"a": "%%%"}}},
    "text breakers of numbers": lambda m: {**m, "text": {"breakers": [1, 2]}},
    "granularity a string": lambda m: {**m, "granularity": "vllm"},
    "inputs paths numbers": lambda m: {**m, "inputs": {"paths": [1, 2]}},
    "version text": lambda m: {**m, "version": "1" * 100_000},
    "hash huge": lambda m: {**m, "hash": "x" * 1_000_000},
    "format missing": lambda m: {k: v for k, v in m.items() if k != "format"},
    "nested 100k deep": lambda m: (
        json.dumps({**m, "inputs": "@"}).encode().replace(b'"@"', b"[" * 100_000 + b"]" * 100_000)
    ),
    "nested 40 deep": lambda m: {**m, "inputs": {"paths": [], "x": _deep(40)}},
    "not JSON": lambda m: b"{not json",
    "not an object": lambda m: b"[1, 2]",
}


def column_mutations() -> dict[str, Callable[[Any, random.Random], Any]]:
    """Named changes of one column each (pyarrow is imported when called)."""
    return _column_mutations()


def _mooncake_log(path: Path, n: int, seed: int) -> Path:
    rng = random.Random(seed)
    with open(path, "w") as f:
        for i in range(n):
            shared = list(range(1, 1 + rng.randrange(1, 8)))
            own = [rng.randrange(1000, 2**32) for _ in range(rng.randrange(0, 4))]
            length = 512 * len(shared + own) - rng.randrange(0, 100)
            f.write(
                json.dumps({"timestamp": i * 10, "input_length": length, "output_length": 10, "hash_ids": shared + own})
                + "\n"
            )
    return path


def _chat_log(path: Path, n: int, seed: int) -> Path:
    from tests.fuzzlog import write_fuzz_log

    write_fuzz_log(path, n, seed=seed, kind="chat", bad_fraction=0.0)
    return path


def make_traces(folder: Path) -> dict[str, Path]:
    """Two small valid traces written by ``prefixplan trace``: ``chat`` (segments, tools; the
    default tokenizer) and ``mooncake`` (hash-id blocks), their metadata made the same on every
    machine (the input's path is its name), so a seed damages the same bytes everywhere."""
    import pyarrow as pa

    from prefixplan.cli.app import main

    out = {}
    for name, log in (
        ("chat", _chat_log(folder / "chat.jsonl", 40, 3)),
        ("mooncake", _mooncake_log(folder / "mc.jsonl", 60, 4)),
    ):
        raw = folder / f"{name}.raw.parquet"
        assert main(["trace", str(log), "--out", str(raw), "-q"]) == 0
        table, meta = read_trace(raw)
        meta["inputs"] = {"paths": [log.name]}
        source = table.schema.field("source")
        names = pa.array([log.name] * len(table), pa.string()).dictionary_encode().cast(source.type)
        table = table.set_column(table.schema.get_field_index("source"), source, names)
        out[name] = write_trace(folder / f"{name}.parquet", table, meta)
    return out
