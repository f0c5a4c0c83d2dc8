"""Share a workload without sharing prompts: a trace as Mooncake JSONL.

``prefixplan trace LOG --export mooncake -o out.jsonl`` writes one line per request in arrival
order, ``{"timestamp", "input_length", "output_length", "hash_ids"}`` as Mooncake's published
traces have them (timestamp in milliseconds from the first request). Each hash id stands for one
block of ``block_size`` tokens (default 512) and identifies the whole prefix up to it, as the
block keys do (:mod:`prefixplan.trace.blockhash`); a last partial block gets an id of its own.

Ids are small integers, as in Mooncake's traces: the n-th distinct block is ``(n * a + b) mod
2**32`` with ``a`` (odd) and ``b`` drawn from a per-export salt, a bijection on 32-bit integers.
So two exports of one log carry different ids, and an id says nothing about its text: it cannot
be matched against the blocks of a dictionary of public prompts. Requests from different
namespaces (models, adapters) never share an id. Replay tools that read Mooncake traces (its own,
NVIDIA aiperf, vLLM's benchmark suite) and ``prefixplan analyze``/``simulate`` read the file.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from prefixplan.errors import UsageError
from prefixplan.trace.requests import fill_times
from prefixplan.trace.rows import TraceRow
from prefixplan.trace.storage.u64index import U64Index

DEFAULT_BLOCK = 512


@dataclass(frozen=True, slots=True)
class ExportSummary:
    """What an export wrote."""

    path: Path
    requests: int
    blocks: int
    block_size: int


def _affine(salt: bytes) -> tuple[int, int]:
    digest = hashlib.blake2b(b"pp-mooncake-ids\x00" + salt, digest_size=16).digest()
    a = int.from_bytes(digest[:8], "little") & 0xFFFFFFFF | 1
    b = int.from_bytes(digest[8:], "little") & 0xFFFFFFFF
    return a, b


def _block_keys(row: TraceRow, block_size: int) -> np.ndarray:
    """Keys of the request's blocks of ``block_size`` tokens, plus its whole prompt's key when
    the last block is partial."""
    per_key = int(row.keys_units) * int(row.token_scale)
    if block_size % per_key:
        raise UsageError(
            f"the trace has block keys every {per_key} tokens: {block_size}-token blocks cannot be cut from them",
            hint=f"export with a multiple of {per_key} (--block-size), or render the log again",
        )
    step = block_size // per_key
    full = int(row.prompt_tokens) // block_size
    keys = np.asarray(row.block_keys, dtype=np.uint64)[step - 1 :: step][:full]
    if full * block_size < int(row.prompt_tokens) and row.boundaries and row.boundaries[-1] == row.units:
        keys = np.concatenate([keys, np.asarray(row.boundary_keys[-1:], dtype=np.uint64)])
    return keys


def export_mooncake(
    rows: Iterable[TraceRow],
    out: str | os.PathLike[str],
    *,
    block_size: int = DEFAULT_BLOCK,
    salt: bytes | None = None,
) -> ExportSummary:
    """Write ``rows`` (any order) as a Mooncake trace in arrival order (module docstring);
    ``salt`` defaults to a fresh random one (never stored)."""
    if block_size < 1:
        raise UsageError(f"--block-size must be >= 1, got {block_size}")
    a, b = _affine(salt if salt is not None else secrets.token_bytes(16))
    out_path = Path(out)
    if out_path.is_dir():
        raise UsageError(f"cannot write {out_path}: it is a folder")
    times: list[float] = []
    untimed: list[bool] = []
    offsets: list[tuple[int, int]] = []
    with tempfile.TemporaryFile(prefix="prefixplan-export-") as spill:
        # pass 1: each request's lengths and keys, spilled (the output is in arrival order)
        for row in rows:
            keys = _block_keys(row, block_size)
            head = np.asarray([row.prompt_tokens, row.output_tokens, keys.shape[0]], dtype=np.int64).tobytes()
            data = head + keys.tobytes()
            offsets.append((spill.tell(), len(data)))
            spill.write(data)
            times.append(float(row.time) if row.time is not None else float(row.index))
            untimed.append(row.time is None)
        spill.flush()
        arrival = fill_times(np.asarray(times, dtype=np.float64), np.asarray(untimed, dtype=bool))
        times = arrival.tolist()
        order = np.lexsort((np.arange(len(times)), arrival)) if times else np.zeros(0, dtype=np.int64)
        t0 = min(times) if times else 0.0
        index = U64Index()
        tmp = out_path.with_name(f".{out_path.name}.{os.getpid()}.tmp")
        try:
            out_path.parent.mkdir(parents=True, exist_ok=True)
            with open(tmp, "w", encoding="utf-8") as fh:
                for i in order:
                    start, size = offsets[int(i)]
                    data = os.pread(spill.fileno(), size, start)
                    prompt, output, n = (int(x) for x in np.frombuffer(data[:24], dtype=np.int64))
                    keys = np.frombuffer(data[24 : 24 + 8 * n], dtype=np.uint64)
                    ids = index.lookup(keys)
                    new = ids < 0
                    if new.any():
                        _, first = np.unique(keys[new], return_index=True)
                        index.insert_new(keys[new][np.sort(first)])  # in order of first appearance
                        ids = index.lookup(keys)
                    hashed = (ids.astype(np.uint64) * np.uint64(a) + np.uint64(b)) & np.uint64(0xFFFFFFFF)
                    line = {
                        "timestamp": round((times[int(i)] - t0) * 1000),
                        "input_length": prompt,
                        "output_length": output,
                        "hash_ids": [int(x) for x in hashed],
                    }
                    fh.write(json.dumps(line, separators=(",", ":")) + "\n")
            os.replace(tmp, out_path)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise UsageError(f"cannot write {out_path}: {exc.strerror or exc}") from exc
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
    return ExportSummary(out_path, len(times), len(index), block_size)
