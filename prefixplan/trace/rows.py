"""One trace row per request: what every stage after rendering needs, and nothing more.

A :class:`TraceRow` is a rendered request reduced to its arrival time, namespace, tenant,
lengths, the prefix keys of its full blocks (:mod:`prefixplan.trace.blockhash`) at the trace's
block size, and its segment spans; no token ids and no text. Rows are what the render workers
send back, what ``--trace-out`` writes as Parquet (:mod:`prefixplan.trace.parquet`) and what
``simulate`` and ``analyze`` read from a trace file instead of re-rendering the log.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np

from prefixplan.core.types import SEGMENT_KINDS, Chunk, Prompt, Request, Segment, SegmentHash, TokenIds
from prefixplan.logs.dispatch import RECONSTRUCTED_FORMATS
from prefixplan.routing.content import request_route_bytes, route_units
from prefixplan.trace.blockhash import BlockHasher, SharedPrefixSums, namespace_seed
from prefixplan.trace.spans import breakpoint_offsets, key_prefix

KIND_CODE = {k: i for i, k in enumerate(SEGMENT_KINDS)}
_EMPTY_U64 = np.zeros(0, dtype=np.uint64)
_EMPTY_I32 = np.zeros(0, dtype=np.int32)
_EMPTY_I8 = np.zeros(0, dtype=np.int8)
_EMPTY_IDS = TokenIds(np.zeros(0, dtype=np.uint32))


@dataclass(slots=True)
class TraceRow:
    """One request of a trace (module docstring).

    Attributes:
        index: position in the input stream (0-based).
        time: arrival seconds, None when the log has none.
        source, line: where the request came from (re-rendering a representative request).
        namespace, model, format, tenant: as :class:`~prefixplan.core.types.Request` has them.
        prompt_tokens: real prompt tokens (a Mooncake line's ``input_length`` when given).
        output_tokens: generated tokens (0 when unknown).
        token_scale: real tokens per unit (Mooncake hash ids: the trace block size).
        units: entries of the rendered prompt (token ids, or hash ids).
        keys_units: units per block key.
        block_keys: prefix keys of the full blocks (uint64), ``keys_units`` units each.
        seg_kind/seg_start/seg_end/seg_index/seg_hash/seg_names: segment spans (kind codes of
            ``SEGMENT_KINDS``, unit offsets, message or tool index, text hash as uint64, tool
            name or None).
        chunk_start/chunk_end/chunk_msg/chunk_hash/chunk_chars: recurring-document candidates.
        breakpoints: Anthropic ``cache_control`` offsets (units).
        boundaries/boundary_keys: prefix lengths where segments end (and the end), with keys.
        route_units: what a content-aware router sees (None when not computed).
        gw_key/gw_key_tokens: the leading system/tool prefix's identity and length (routing).
        exact: the rendering is exact (not an approximation, nor a request rebuilt from spans).
        logged_cached_tokens: the engine's cached-token count from the log, when logged.
    """

    index: int
    time: float | None
    source: str
    line: int
    namespace: str
    model: str | None
    format: str
    tenant: str | None
    prompt_tokens: int
    output_tokens: int
    token_scale: int
    units: int
    keys_units: int
    block_keys: np.ndarray
    seg_kind: np.ndarray
    seg_start: np.ndarray
    seg_end: np.ndarray
    seg_index: np.ndarray
    seg_hash: np.ndarray
    seg_names: tuple[str | None, ...]
    chunk_start: np.ndarray
    chunk_end: np.ndarray
    chunk_msg: np.ndarray
    chunk_hash: np.ndarray
    chunk_chars: np.ndarray
    breakpoints: tuple[int, ...]
    boundaries: tuple[int, ...]
    boundary_keys: tuple[int, ...]
    route_units: tuple[int, ...] | None
    gw_key: str | None
    gw_key_tokens: int
    exact: bool
    logged_cached_tokens: int | None


REFERENCE_UNITS = -1
"""``units`` of a reference row: a request not rendered in this pass because an earlier pass
rendered it as it is (:meth:`RowMaker.reference`); its tokens and keys are that pass's row of the
same source and line (:mod:`prefixplan.analysis.earlier`)."""

_ROW_FIELDS = tuple(f.name for f in fields(TraceRow))
_ARRAY_FIELDS = frozenset(f.name for f in fields(TraceRow) if f.type in ("np.ndarray", np.ndarray))


def pack_rows(rows: Sequence[TraceRow]) -> dict[str, Any]:
    """Rows as columns, for sending between processes: each array field (by its annotation)
    concatenated with the rows' lengths when its arrays share a dtype, every other field a list.
    Pickling a row's eleven small arrays one by one cost as much as a sixth of rendering the row;
    a batch's columns pickle as a few buffers."""
    packed: dict[str, Any] = {"n": len(rows)}
    if not rows:
        return packed
    for name in _ROW_FIELDS:
        values = [getattr(r, name) for r in rows]
        if name in _ARRAY_FIELDS and len({(v.dtype, v.ndim) for v in values}) == 1 and values[0].ndim == 1:
            lengths = np.fromiter((v.shape[0] for v in values), dtype=np.int64, count=len(values))
            packed[name] = ("flat", np.concatenate(values), lengths)
        else:
            packed[name] = ("list", values)
    return packed


def unpack_rows(packed: dict[str, Any]) -> list[TraceRow]:
    """The rows :func:`pack_rows` packed (array fields as views of one buffer per field)."""
    n = int(packed["n"])
    if not n:
        return []
    columns: list[Sequence[Any]] = []
    for name in _ROW_FIELDS:
        kind, *data = packed[name]
        if kind == "flat":
            flat, lengths = data
            columns.append(np.split(flat, np.cumsum(lengths)[:-1]))
        else:
            columns.append(data[0])
    return [TraceRow(*values) for values in zip(*columns, strict=True)]


def hash_u64(text_hash: str) -> int:
    """A 16-hex-digit segment hash as an integer (and back with ``f"{n:016x}"``)."""
    return int(text_hash, 16)


def hashes_u64(hashes: Sequence[str]) -> np.ndarray:
    """:func:`hash_u64` of each of ``hashes`` (uint64 array): 16-hex-digit hashes in one call."""
    joined = "".join(hashes)
    if len(joined) == 16 * len(hashes):
        try:
            raw = bytes.fromhex(joined)
        except ValueError:
            raw = b""
        if len(raw) == 8 * len(hashes):
            return np.frombuffer(raw, dtype=">u8").astype(np.uint64)
    return np.fromiter(map(hash_u64, hashes), dtype=np.uint64, count=len(hashes))


def _segment_columns(segs: Sequence[Segment]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Kind codes, starts, ends, indices and hashes of ``segs`` (a row's ``seg_*`` arrays)."""
    if not segs:
        return _EMPTY_I8, _EMPTY_I32, _EMPTY_I32, _EMPTY_I32, _EMPTY_U64
    cols = np.array([(KIND_CODE[s.kind], s.start, s.end, s.index) for s in segs], dtype=np.int32).T.copy()
    return cols[0].astype(np.int8), cols[1], cols[2], cols[3], hashes_u64([s.text_hash for s in segs])


def _chunk_columns(chunks: Sequence[Chunk]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Starts, ends, message indices, hashes and characters of ``chunks`` (``chunk_*`` arrays)."""
    if not chunks:
        return _EMPTY_I32, _EMPTY_I32, _EMPTY_I32, _EMPTY_U64, _EMPTY_I32
    cols = np.array([(c.start, c.end, c.message_index, c.chars) for c in chunks], dtype=np.int32).T.copy()
    return cols[0], cols[1], cols[2], hashes_u64([c.text_hash for c in chunks]), cols[3]


class RowMaker:
    """Turns rendered prompts into rows at one block size (in real tokens)."""

    def __init__(self, block_size: int, *, routing: bool = False) -> None:
        if block_size < 1:
            raise ValueError(f"block size must be >= 1, got {block_size}")
        self.block_size = int(block_size)
        self.routing = routing
        self.hasher = BlockHasher()
        self._sums = SharedPrefixSums(self.hasher)
        self._seeds: dict[tuple[str, int], int] = {}

    def _seed(self, namespace: str, scale: int) -> int:
        seed = self._seeds.get((namespace, scale))
        if seed is None:
            seed = self._seeds[(namespace, scale)] = namespace_seed(namespace, scale)
        return seed

    def row(self, prompt: Prompt, index: int) -> TraceRow:
        """The row of ``prompt``, the ``index``-th request of the stream."""
        req = prompt.request
        scale = max(1, int(prompt.token_scale or 1))
        ku = max(1, self.block_size // scale)
        tokens = prompt.tokens
        n = int(tokens.shape[0])
        seed = self._seed(req.namespace, scale)
        sums = self._sums(np.asarray(tokens, dtype=np.uint32))  # keys made only where read
        nb = n // ku
        segs = prompt.segments
        breakpoints = breakpoint_offsets(prompt)
        bounds = {b for b in breakpoints if 0 < b <= n}
        bounds.update(s.end for s in segs if 0 < s.end <= n)
        if n:
            bounds.add(n)
        boundaries = tuple(sorted(bounds))
        block_keys, boundary_keys = self.hasher.keys_of_sums(sums, seed, ku, boundaries)
        units: tuple[int, ...] | None = None
        gw_key, gw_tokens = None, 0
        if self.routing:
            if req.messages is not None or req.prompt is not None or req.prompt_ids is not None:
                value = req.prompt if req.prompt is not None else (list(req.prompt_ids) if req.prompt_ids else None)
                units = tuple(route_units(request_route_bytes(req.messages, req.tools, value)))
            gw_key, gw_tokens = key_prefix(prompt)
        seg_cols = _segment_columns(segs)
        chunk_cols = _chunk_columns(prompt.chunks)
        return TraceRow(
            index=index,
            time=req.time,
            source=req.source,
            line=req.line_no,
            namespace=req.namespace,
            model=req.model,
            format=req.format,
            tenant=req.tenant,
            prompt_tokens=prompt.n_tokens,
            output_tokens=int(req.output_length or 0),
            token_scale=scale,
            units=n,
            keys_units=ku,
            block_keys=block_keys if nb else _EMPTY_U64,
            seg_kind=seg_cols[0],
            seg_start=seg_cols[1],
            seg_end=seg_cols[2],
            seg_index=seg_cols[3],
            seg_hash=seg_cols[4],
            seg_names=tuple(s.name for s in segs),
            chunk_start=chunk_cols[0],
            chunk_end=chunk_cols[1],
            chunk_msg=chunk_cols[2],
            chunk_hash=chunk_cols[3],
            chunk_chars=chunk_cols[4],
            breakpoints=breakpoints,
            boundaries=boundaries,
            boundary_keys=tuple(boundary_keys.tolist()),
            route_units=units,
            gw_key=gw_key,
            gw_key_tokens=int(gw_tokens),
            exact=bool(prompt.exact) and req.format not in RECONSTRUCTED_FORMATS,
            logged_cached_tokens=req.logged_cached_tokens,
        )

    def reference(self, req: Request, index: int) -> TraceRow:
        """The row of ``req`` as the ``index``-th request without rendering it: what the request
        itself says (time, source and line, namespace, lengths it logs) and no tokens, keys or
        spans; ``units`` is :data:`REFERENCE_UNITS`."""
        return replace(self.row(Prompt(req, _EMPTY_IDS, ()), index), units=REFERENCE_UNITS)


def row_segments(row: TraceRow) -> tuple[Segment, ...]:
    """A row's segment spans as :class:`Segment` records."""
    return tuple(
        Segment(
            SEGMENT_KINDS[int(k)],
            int(a),
            int(b),
            SegmentHash(f"{int(h):016x}"),
            int(i),
            name,
        )
        for k, a, b, i, h, name in zip(
            row.seg_kind, row.seg_start, row.seg_end, row.seg_index, row.seg_hash, row.seg_names, strict=True
        )
    )
