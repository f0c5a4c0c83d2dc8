"""What the analysis keeps of every request between its first pass and the ranking: compact
columns (numpy-backed arrays, strings interned), never one Python object per request.

Per request: arrival time, namespace, model, format, source and line, tenant (as a 64-bit hash;
anonymous requests have none), prompt tokens, units and scale, exactness, the logged cached
tokens, and where its segments and document chunks begin in their flat columns (about 90 bytes a
request). These columns go to temporary files as they grow and are mapped when read
(:mod:`prefixplan.trace.storage.mapped`): resident only while a pass reads them.

The segments and chunks themselves (18 and 4 a request on the benchmark log, about 260 bytes) are
read in two ways only: all of them once, a slice of requests at a time (the token accounting, the
document report), and a few requests' worth for the candidates a record shows. So they live in
:class:`~prefixplan.trace.storage.spill.SpillColumn` columns that move to temporary files past a small
budget, and each segment's hash, message index and name in a
:class:`~prefixplan.trace.storage.spill.RaggedU64`: memory for them stays the same whatever the log's size.
"""

from __future__ import annotations

import hashlib

import numpy as np

from prefixplan.core.types import SEGMENT_KINDS, Chunk, Segment, SegmentHash
from prefixplan.trace.columns import Labels, RowColumns
from prefixplan.trace.rows import TraceRow
from prefixplan.trace.storage.mapped import SPILL_EVERY, ColumnWriter, drop_resident, is_mapped, mapped_copy
from prefixplan.trace.storage.spill import RaggedU64, SpillColumn

_ANON = 0


def tenant_hash(tenant: str | None) -> int:
    """64-bit identity of a tenant (0 = anonymous: every such request counts as its own)."""
    if not tenant:
        return _ANON
    h = int.from_bytes(hashlib.blake2b(tenant.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "little")
    return h or 1


class Interned:
    """Strings to small ints and back."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}
        self.names: list[str] = []

    def id(self, name: str) -> int:
        i = self.ids.get(name)
        if i is None:
            i = self.ids[name] = len(self.names)
            self.names.append(name)
        return i


def _interned(names: Interned, labels: Labels, default: str | None = None) -> np.ndarray:
    """The ids of a batch's string column (None as ``default``), given in order of first row as
    :meth:`Interned.id` of each row would."""
    codes = labels.codes
    id_of_code = np.zeros(len(labels.values), dtype=np.int64)
    for i in sorted(np.unique(codes, return_index=True)[1].tolist()):
        value = labels.values[int(codes[i])]
        id_of_code[int(codes[i])] = names.id(str(default if value is None else value))
    return id_of_code[codes]


_COLUMNS: dict[str, tuple[type, type]] = {
    # column: (dtype of its array, dtype of the numpy column)
    "time": (np.float64, np.float64),
    "has_time": (np.int8, np.int8),
    "ns": (np.int32, np.int32),
    "model": (np.int32, np.int32),
    "format": (np.int32, np.int32),
    "source": (np.int32, np.int32),
    "line": (np.int64, np.int64),
    "tenant": (np.uint64, np.uint64),
    "prompt": (np.int64, np.int64),
    "scale": (np.int32, np.int64),
    "units": (np.int64, np.int64),
    "exact": (np.int8, np.int8),
    "cached": (np.int64, np.int64),
    "seg_off": (np.int64, np.int64),
    "chunk_off": (np.int64, np.int64),
}

RAGGED: dict[str, type] = {
    # flat columns of every request's segments (seg_off) and document chunks (chunk_off)
    "seg_kind": np.int8,
    "seg_start": np.int32,
    "seg_end": np.int32,
    "chunk_start": np.int32,
    "chunk_end": np.int32,
    "chunk_msg": np.int32,
    "chunk_hash": np.uint64,
    "chunk_chars": np.int32,
}
RAGGED_BUDGET = 4 * 2**20  # bytes of each ragged column kept in memory before it moves to disk


class RowStore:
    """Columns of the rows seen so far (module docstring), in input order."""

    def __init__(self, ragged_budget: int | None = None) -> None:
        if ragged_budget is None:
            ragged_budget = RAGGED_BUDGET
        self.namespaces = Interned()
        self.models = Interned()
        self.formats = Interned()
        self.sources = Interned()
        self.names = Interned()
        # per-request columns: to temporary files as they grow, mapped when read (trace.storage.mapped)
        self._cols = {name: ColumnWriter(dtype) for name, (dtype, _) in _COLUMNS.items()}
        self._cols["seg_off"].append(0)
        self._cols["chunk_off"].append(0)
        self._rows = 0
        self._ragged = {name: SpillColumn(dtype, ragged_budget) for name, dtype in RAGGED.items()}
        # hash, message index and name of each segment: read back only for the few requests shown
        # (a candidate's representative), so they wait on disk past a small budget
        self._seg_detail = RaggedU64(16 * 2**20)
        self._frozen: dict[str, np.ndarray] | None = None
        self._released = False

    def __len__(self) -> int:
        return self._rows

    def add(self, row: TraceRow) -> None:
        if self._released:
            raise RuntimeError("RowStore used after release()")
        if self._frozen is not None:
            self._thaw()
        cols = self._cols
        cols["time"].append(row.time if row.time is not None else 0.0)
        cols["has_time"].append(row.time is not None)
        cols["ns"].append(self.namespaces.id(row.namespace))
        cols["model"].append(self.models.id(row.model or "-"))
        cols["format"].append(self.formats.id(row.format))
        cols["source"].append(self.sources.id(row.source))
        cols["line"].append(int(row.line))
        cols["tenant"].append(tenant_hash(row.tenant))
        cols["prompt"].append(int(row.prompt_tokens))
        cols["scale"].append(int(row.token_scale))
        cols["units"].append(int(row.units))
        cols["exact"].append(bool(row.exact))
        cols["cached"].append(-1 if row.logged_cached_tokens is None else int(row.logged_cached_tokens))
        ragged = self._ragged
        for name in ("seg_kind", "seg_start", "seg_end"):
            ragged[name].append(getattr(row, name))
        n_segs = len(row.seg_names)
        detail = np.empty(2 * n_segs, dtype=np.uint64)
        detail[0::2] = np.asarray(row.seg_hash, dtype=np.uint64)
        index = np.asarray(row.seg_index, dtype=np.int32).view(np.uint32).astype(np.uint64)
        names = np.fromiter((0 if n is None else self.names.id(n) + 1 for n in row.seg_names), np.uint64, n_segs)
        detail[1::2] = (index << np.uint64(32)) | names
        self._seg_detail.append(detail)
        cols["seg_off"].append(len(ragged["seg_kind"]))
        if row.chunk_start.shape[0]:
            for name in ("chunk_start", "chunk_end", "chunk_msg", "chunk_hash", "chunk_chars"):
                ragged[name].append(getattr(row, name))
        cols["chunk_off"].append(len(ragged["chunk_start"]))
        self._rows += 1
        if not self._rows % SPILL_EVERY:
            for col in cols.values():
                col.spill()

    def add_columns(self, batch: RowColumns) -> None:
        """Add a batch of rows at once: the same columns as :meth:`add` of each row."""
        if self._released:
            raise RuntimeError("RowStore used after release()")
        if self._frozen is not None:
            self._thaw()
        if not batch.n:
            return
        cols = self._cols
        cols["time"].extend(batch.time)
        cols["has_time"].extend(batch.has_time)
        cols["ns"].extend(_interned(self.namespaces, batch.namespace))
        cols["model"].extend(_interned(self.models, batch.model, "-"))
        cols["format"].extend(_interned(self.formats, batch.format))
        cols["source"].extend(_interned(self.sources, batch.source))
        cols["line"].extend(batch.line)
        cols["tenant"].extend(batch.tenant.mapped(tenant_hash, np.uint64))
        cols["prompt"].extend(batch.prompt_tokens)
        cols["scale"].extend(batch.token_scale)
        cols["units"].extend(batch.units)
        cols["exact"].extend(batch.exact)
        cols["cached"].extend(batch.cached)
        ragged = self._ragged
        segs_before = len(ragged["seg_kind"])
        for name in ("seg_kind", "seg_start", "seg_end"):
            ragged[name].append(getattr(batch, name).values)
        n_segs = batch.seg_kind.lengths
        detail = np.empty(2 * int(n_segs.sum()), dtype=np.uint64)
        detail[0::2] = batch.seg_hash.values.astype(np.uint64, copy=False)
        index = batch.seg_index.values.astype(np.int32, copy=False).view(np.uint32).astype(np.uint64)
        ids = self.names.id
        names = batch.seg_names.mapped(lambda n: 0 if n is None else ids(n) + 1, np.uint64)
        detail[1::2] = (index << np.uint64(32)) | names
        self._seg_detail.extend(detail, 2 * n_segs)
        cols["seg_off"].extend(segs_before + np.cumsum(n_segs))
        chunks_before = len(ragged["chunk_start"])
        for name in ("chunk_start", "chunk_end", "chunk_msg", "chunk_hash", "chunk_chars"):
            ragged[name].append(getattr(batch, name).values)
        cols["chunk_off"].extend(chunks_before + np.cumsum(batch.chunk_start.lengths))
        self._rows += batch.n

    def ragged(self, name: str, start: int, stop: int) -> np.ndarray:
        """Entries ``start`` up to ``stop`` of the flat column ``name`` (one of :data:`RAGGED`;
        request ``i``'s segments are ``seg_off[i]`` up to ``seg_off[i + 1]``, its chunks the same
        by ``chunk_off``)."""
        return self._ragged[name].read(start, stop)

    def owners(self, offsets: str, lo: int, hi: int) -> np.ndarray:
        """The request of each entry of requests ``lo`` up to ``hi`` in the flat columns that
        ``offsets`` (``seg_off`` or ``chunk_off``) indexes."""
        off = self.columns()[offsets]
        return np.repeat(np.arange(lo, hi), np.diff(off[lo : hi + 1]))

    def ragged_size(self, name: str) -> int:
        """Entries in the flat column ``name``."""
        return len(self._ragged[name])

    def columns(self) -> dict[str, np.ndarray]:
        """Every per-request column as a numpy array. The columns move into numpy (no second copy is kept);
        a later :meth:`add` moves them back."""
        if self._released:
            raise RuntimeError("RowStore used after release()")
        if self._frozen is None:
            frozen: dict[str, np.ndarray] = {}
            for name, (dtype, out) in _COLUMNS.items():
                col = self._cols[name].finish()
                frozen[name] = mapped_copy(col, out) if out is not dtype else col
                del col
            frozen["has_time"] = frozen["has_time"].view(bool)
            frozen["exact"] = frozen["exact"].view(bool)
            self._frozen = frozen
        return self._frozen

    def drop_resident(self) -> None:
        """Hand back the resident pages of the file-backed columns (between passes)."""
        if self._frozen is not None:
            drop_resident(*self._frozen.values())

    def _thaw(self) -> None:
        frozen, self._frozen = self._frozen, None
        assert frozen is not None
        for name, (dtype, _) in _COLUMNS.items():
            self._cols[name].extend(np.asarray(frozen[name]).astype(dtype, copy=False))

    def segments(self, i: int) -> tuple[Segment, ...]:
        """The segments of request ``i`` (input order) as :class:`Segment` records."""
        c = self.columns()
        a, b = int(c["seg_off"][i]), int(c["seg_off"][i + 1])
        kinds, starts, ends = (self.ragged(name, a, b).tolist() for name in ("seg_kind", "seg_start", "seg_end"))
        names = self.names.names
        detail = self._seg_detail.get(i)
        hashes = detail[0::2].tolist()
        index = (detail[1::2] >> np.uint64(32)).astype(np.uint32).view(np.int32).tolist()
        name_ids = (detail[1::2] & np.uint64(0xFFFFFFFF)).astype(np.int64).tolist()
        return tuple(
            Segment(
                SEGMENT_KINDS[kinds[k]],
                starts[k],
                ends[k],
                SegmentHash(f"{hashes[k]:016x}"),
                index[k],
                names[name_ids[k] - 1] if name_ids[k] else None,
            )
            for k in range(b - a)
        )

    def chunks(self, i: int) -> tuple[Chunk, ...]:
        """The document chunks of request ``i``."""
        c = self.columns()
        a, b = int(c["chunk_off"][i]), int(c["chunk_off"][i + 1])
        if a == b:
            return ()
        hashes, starts, ends, msgs, chars = (
            self.ragged(name, a, b).tolist()
            for name in ("chunk_hash", "chunk_start", "chunk_end", "chunk_msg", "chunk_chars")
        )
        return tuple(
            Chunk(SegmentHash(f"{hashes[k]:016x}"), starts[k], ends[k], msgs[k], chars[k]) for k in range(b - a)
        )

    def release(self) -> None:
        """Drop every column (memory and temporary files): the store is done with. The per-request
        columns are freed even where a caller still holds the dict :meth:`columns` returned."""
        if self._frozen is not None:
            self._frozen.clear()
        self._frozen = None
        for writer in self._cols.values():
            writer.close()
        for col in self._ragged.values():
            col.close()
        self._seg_detail.close()
        self._released = True

    def nbytes(self) -> int:
        """Bytes in memory (what waits on disk not counted)."""
        ragged = sum(col.nbytes for col in self._ragged.values())
        if self._frozen is not None:
            return ragged + sum(int(v.nbytes) for v in self._frozen.values() if not is_mapped(v))
        return ragged + sum(col.nbytes for col in self._cols.values())
