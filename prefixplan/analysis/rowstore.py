"""What the analysis keeps of every request between its first pass and the ranking: compact
columns (numpy-backed arrays, strings interned), never one Python object per request.

Per request: arrival time, namespace, model, format, source and line, tenant (as a 64-bit hash;
anonymous requests have none), prompt tokens, units and scale, exactness, the logged cached
tokens; and flat arrays of its segment spans and document chunks with per-request offsets.
"""

from __future__ import annotations

import hashlib
from array import array

import numpy as np

from prefixplan.core.types import SEGMENT_KINDS, Chunk, Segment, SegmentHash
from prefixplan.trace.rows import TraceRow

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


def _np(a: array, dtype: type) -> np.ndarray:
    return np.frombuffer(a, dtype=dtype).copy() if len(a) else np.zeros(0, dtype=dtype)


class RowStore:
    """Columns of the rows seen so far (module docstring), in input order."""

    def __init__(self) -> None:
        self.namespaces = Interned()
        self.models = Interned()
        self.formats = Interned()
        self.sources = Interned()
        self.names = Interned()
        self._time = array("d")
        self._has_time = array("b")
        self._ns = array("i")
        self._model = array("i")
        self._format = array("i")
        self._source = array("i")
        self._line = array("q")
        self._tenant = array("Q")
        self._prompt = array("q")
        self._scale = array("i")
        self._units = array("q")
        self._exact = array("b")
        self._cached = array("q")
        self._seg_off = array("q", [0])
        self._seg_kind = array("b")
        self._seg_start = array("i")
        self._seg_end = array("i")
        self._seg_index = array("i")
        self._seg_hash = array("Q")
        self._seg_name = array("i")
        self._chunk_off = array("q", [0])
        self._chunk_start = array("i")
        self._chunk_end = array("i")
        self._chunk_msg = array("i")
        self._chunk_hash = array("Q")
        self._chunk_chars = array("i")
        self._frozen: dict[str, np.ndarray] | None = None

    def __len__(self) -> int:
        return len(self._ns)

    def add(self, row: TraceRow) -> None:
        self._frozen = None
        self._time.append(row.time if row.time is not None else 0.0)
        self._has_time.append(row.time is not None)
        self._ns.append(self.namespaces.id(row.namespace))
        self._model.append(self.models.id(row.model or "-"))
        self._format.append(self.formats.id(row.format))
        self._source.append(self.sources.id(row.source))
        self._line.append(int(row.line))
        self._tenant.append(tenant_hash(row.tenant))
        self._prompt.append(int(row.prompt_tokens))
        self._scale.append(int(row.token_scale))
        self._units.append(int(row.units))
        self._exact.append(bool(row.exact))
        self._cached.append(-1 if row.logged_cached_tokens is None else int(row.logged_cached_tokens))
        self._seg_kind.frombytes(np.ascontiguousarray(row.seg_kind, dtype=np.int8).tobytes())
        self._seg_start.frombytes(np.ascontiguousarray(row.seg_start, dtype=np.int32).tobytes())
        self._seg_end.frombytes(np.ascontiguousarray(row.seg_end, dtype=np.int32).tobytes())
        self._seg_index.frombytes(np.ascontiguousarray(row.seg_index, dtype=np.int32).tobytes())
        self._seg_hash.frombytes(np.ascontiguousarray(row.seg_hash, dtype=np.uint64).tobytes())
        self._seg_name.extend(-1 if n is None else self.names.id(n) for n in row.seg_names)
        self._seg_off.append(len(self._seg_kind))
        self._chunk_start.frombytes(np.ascontiguousarray(row.chunk_start, dtype=np.int32).tobytes())
        self._chunk_end.frombytes(np.ascontiguousarray(row.chunk_end, dtype=np.int32).tobytes())
        self._chunk_msg.frombytes(np.ascontiguousarray(row.chunk_msg, dtype=np.int32).tobytes())
        self._chunk_hash.frombytes(np.ascontiguousarray(row.chunk_hash, dtype=np.uint64).tobytes())
        self._chunk_chars.frombytes(np.ascontiguousarray(row.chunk_chars, dtype=np.int32).tobytes())
        self._chunk_off.append(len(self._chunk_start))

    def columns(self) -> dict[str, np.ndarray]:
        """Every column as a numpy array (cached until the next :meth:`add`)."""
        if self._frozen is None:
            self._frozen = {
                "time": _np(self._time, np.float64),
                "has_time": _np(self._has_time, np.int8).astype(bool),
                "ns": _np(self._ns, np.int32),
                "model": _np(self._model, np.int32),
                "format": _np(self._format, np.int32),
                "source": _np(self._source, np.int32),
                "line": _np(self._line, np.int64),
                "tenant": _np(self._tenant, np.uint64),
                "prompt": _np(self._prompt, np.int64),
                "scale": _np(self._scale, np.int32).astype(np.int64),
                "units": _np(self._units, np.int64),
                "exact": _np(self._exact, np.int8).astype(bool),
                "cached": _np(self._cached, np.int64),
                "seg_off": _np(self._seg_off, np.int64),
                "seg_kind": _np(self._seg_kind, np.int8),
                "seg_start": _np(self._seg_start, np.int32).astype(np.int64),
                "seg_end": _np(self._seg_end, np.int32).astype(np.int64),
                "seg_index": _np(self._seg_index, np.int32),
                "seg_hash": _np(self._seg_hash, np.uint64),
                "seg_name": _np(self._seg_name, np.int32),
                "chunk_off": _np(self._chunk_off, np.int64),
                "chunk_start": _np(self._chunk_start, np.int32).astype(np.int64),
                "chunk_end": _np(self._chunk_end, np.int32).astype(np.int64),
                "chunk_msg": _np(self._chunk_msg, np.int32),
                "chunk_hash": _np(self._chunk_hash, np.uint64),
                "chunk_chars": _np(self._chunk_chars, np.int32),
            }
        return self._frozen

    def segments(self, i: int) -> tuple[Segment, ...]:
        """The segments of request ``i`` (input order) as :class:`Segment` records."""
        c = self.columns()
        a, b = int(c["seg_off"][i]), int(c["seg_off"][i + 1])
        names = self.names.names
        return tuple(
            Segment(
                SEGMENT_KINDS[int(c["seg_kind"][j])],
                int(c["seg_start"][j]),
                int(c["seg_end"][j]),
                SegmentHash(f"{int(c['seg_hash'][j]):016x}"),
                int(c["seg_index"][j]),
                names[int(c["seg_name"][j])] if c["seg_name"][j] >= 0 else None,
            )
            for j in range(a, b)
        )

    def chunks(self, i: int) -> tuple[Chunk, ...]:
        """The document chunks of request ``i``."""
        c = self.columns()
        a, b = int(c["chunk_off"][i]), int(c["chunk_off"][i + 1])
        return tuple(
            Chunk(
                SegmentHash(f"{int(c['chunk_hash'][j]):016x}"),
                int(c["chunk_start"][j]),
                int(c["chunk_end"][j]),
                int(c["chunk_msg"][j]),
                int(c["chunk_chars"][j]),
            )
            for j in range(a, b)
        )

    def nbytes(self) -> int:
        return sum(a.buffer_info()[1] * a.itemsize for a in vars(self).values() if isinstance(a, array))
