"""The shared integer block trace of a request stream (used by the cache models and the analysis).

The input is a stream of :class:`~prefixplan.trace.requests.SimRequest`. A
:class:`TraceBuilder` turns the stream into a :class:`BlockTrace` once; every cache model
and every capacity then replays the same integer block ids.

Replay order. Every model replays requests in one order: arrival time, ties in input order
(stable). Requests may come in any file order (agent logs are often written at completion);
:meth:`TraceBuilder.finish` sorts them, and the rows of a :class:`BlockTrace` are arrivals
(``order`` maps each row back to its position in the input).

Block identity. Block ``j`` of a request stands for the whole prefix ``tokens[:(j+1)*block]``
in its namespace (chained identity, as vLLM's block hashes): its key is the ``pp-prefix-1``
prefix key (:mod:`prefixplan.trace.blockhash`) of that prefix. A request either brings its
tokens (keys are computed here) or its keys at a finer block size that divides this one (a
trace file). Distinct keys get dense ids in order of first arrival, so a block's parent always
has a smaller id and the blocks a request adds form a consecutive id range. Because identities
are chained, the blocks seen before form a prefix-closed set and a request is fully described by
its deepest block id (``end_block``) and its block count. The blocks a request brings extend
one path, so their parents are implicit: each is the block one id lower, except the first,
whose parent is the request's deepest known block (``attach``). Nothing is kept per block: a
block's parent and depth follow from its request's ``block_start``, ``known_blocks`` and
``attach`` (:meth:`BlockTrace.parents_of`, :meth:`BlockTrace.depths_of`). Ids are assigned by
:mod:`prefixplan.trace.blockids` (a key index built in parts, blocks seen once left out of it
with ``index_singletons=False``: then :meth:`TraceBuilder.resolve` finds only blocks that occur
in at least two requests, and some seen once).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace

import numpy as np

from prefixplan.core.granularity import Granularity
from prefixplan.errors import UsageError
from prefixplan.trace.blockhash import BlockHasher, namespace_seed
from prefixplan.trace.blockids import INDEX_BUDGET, assign_ids, coarser_keys_error, index_sizes, runs_of
from prefixplan.trace.columns import RowColumns
from prefixplan.trace.idscan import ArrivalPass
from prefixplan.trace.requests import SimRequest, fill_times, request_boundaries
from prefixplan.trace.storage.mapped import SPILL_EVERY, ColumnWriter, drop_resident, mapped_copy, mapped_gather
from prefixplan.trace.storage.spill import DEFAULT_BUDGET, RaggedU64
from prefixplan.trace.storage.u64index import SplitIndex, U64Index

KeyObserver = Callable[["SimRequest", Mapping[int, int]], None]
"""Called once per request in replay order with its prefix keys at its boundaries
(prefix length in units -> key): the Anthropic breakpoint model."""


@dataclass(slots=True)
class BlockTrace:
    """Integer block trace shared by all cache models (arrays indexed by arrival row).

    Attributes:
        granularity: the reuse granularity the blocks were cut at.
        times: arrival seconds (non-decreasing).
        order: input position of each row (rows are arrivals; see module docstring).
        prompt_tokens: real prompt tokens.
        output_tokens: output tokens per request.
        n_blocks: full blocks of each request (all are cached after it runs).
        cap_blocks: most blocks a request may reuse (full blocks; last-token rule).
        end_block: id of the deepest block (-1 for requests shorter than a block).
        known_blocks: leading blocks seen in earlier requests (the infinite-cache match).
        block_tokens: real tokens per block for each request.
        namespaces: namespace names; ``ns`` indexes them per request.
        unit_tokens: real tokens per unit of each row (Mooncake hash ids: the trace block size).
        block_start: per row, the id of the first block it brought: ids are handed out in
            arrival order, so row ``r`` brought ids ``block_start[r]`` up to
            ``block_start[r + 1]`` (a block's first row is found by a binary search here, not
            kept per block: :meth:`first_rows`).
        attach: per row, the parent of the first block it brought: its deepest block known on
            arrival (-1 when it brought none or starts a namespace's path). The other blocks it
            brought have the block one id lower as parent.
        distinct_blocks: distinct block ids (all rows' blocks together).
    """

    granularity: Granularity
    times: np.ndarray
    order: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    n_blocks: np.ndarray
    cap_blocks: np.ndarray
    end_block: np.ndarray
    known_blocks: np.ndarray
    block_tokens: np.ndarray
    ns: np.ndarray
    namespaces: list[str]
    index: TraceBuilder
    unit_tokens: np.ndarray
    block_start: np.ndarray
    attach: np.ndarray
    distinct_blocks: int

    @property
    def n_requests(self) -> int:
        return int(self.times.shape[0])

    @property
    def n_distinct_blocks(self) -> int:
        return int(self.distinct_blocks)

    def first_rows(self, blocks: np.ndarray) -> np.ndarray:
        """The row (arrival) that brought each of ``blocks`` first."""
        return runs_of(self.block_start, blocks)

    def brought(self) -> np.ndarray:
        """Blocks each row brought (int64 per row)."""
        return np.diff(np.append(self.block_start, self.distinct_blocks))

    def parents_of(self, blocks: np.ndarray) -> np.ndarray:
        """Parent block id of each of ``blocks`` (-1 for a namespace's first block)."""
        blocks = np.asarray(blocks, dtype=np.int64)
        rows = self.first_rows(blocks)
        return np.where(blocks == self.block_start[rows], self.attach[rows], blocks - 1)

    def depths_of(self, blocks: np.ndarray) -> np.ndarray:
        """Depth of each of ``blocks`` (1 for a namespace's first block)."""
        blocks = np.asarray(blocks, dtype=np.int64)
        rows = self.first_rows(blocks)
        return self.known_blocks[rows] + 1 + (blocks - self.block_start[rows])

    @property
    def parent(self) -> np.ndarray:
        """:meth:`parents_of` every block id (8 bytes per block: for small traces and tests)."""
        out = np.arange(-1, self.distinct_blocks - 1, dtype=np.int64)
        firsts = self.brought() > 0
        out[self.block_start[firsts]] = self.attach[firsts]
        return out

    @property
    def block_depth(self) -> np.ndarray:
        """:meth:`depths_of` every block id (8 bytes per block: for small traces and tests)."""
        return self.depths_of(np.arange(self.distinct_blocks, dtype=np.int64))

    @property
    def block_first_row(self) -> np.ndarray:
        """:meth:`first_rows` of every block id (8 bytes per block: for small traces and tests)."""
        return self.first_rows(np.arange(self.n_distinct_blocks, dtype=np.int64))

    def columns(self) -> tuple[np.ndarray, ...]:
        """Every per-request column."""
        return (
            self.times,
            self.order,
            self.prompt_tokens,
            self.output_tokens,
            self.n_blocks,
            self.cap_blocks,
            self.end_block,
            self.known_blocks,
            self.block_tokens,
            self.ns,
            self.unit_tokens,
            self.block_start,
            self.attach,
        )

    def drop_resident(self) -> None:
        """Hand back the resident pages of the file-backed columns (:mod:`prefixplan.trace.storage.mapped`):
        call between passes; the next pass reads them in again."""
        drop_resident(*self.columns())

    def rows_of_inputs(self) -> np.ndarray:
        """Row of each input position (the inverse of ``order``)."""
        inv = np.empty_like(self.order)
        inv[self.order] = np.arange(self.order.shape[0])
        return inv

    def path_blocks(self, r: int) -> list[int]:
        """Block ids of row ``r``, root first (slow; for tests and small traces)."""
        out: list[int] = []
        b = int(self.end_block[r])
        while b >= 0:  # one run of consecutive ids per row that brought blocks of the path
            row = int(self.first_rows(np.array([b]))[0])
            first = int(self.block_start[row])
            out.extend(range(b, first - 1, -1))
            b = int(self.attach[row])
        out.reverse()
        return out

    def resolve(self, tokens: np.ndarray, namespace: str, block_scale: int | None = None) -> list[int]:
        """Ids of the leading full blocks of ``tokens`` that occur in the trace (``block_scale``
        defaults to the one the namespace's requests used: Mooncake hash ids)."""
        return self.index.resolve(tokens, namespace, block_scale)


class TraceBuilder:
    """Streams :class:`SimRequest` records into a :class:`BlockTrace`.

    Args:
        granularity: block size in real tokens (and the last-token rule).
        observer: optional callback ``(request, keys at its boundaries)`` called for every
            request in replay order (the Anthropic breakpoint model).
        spill_bytes: memory for waiting block keys before they go to a temporary file.
        index_singletons: index blocks seen in one request only (module docstring); without
            them :meth:`resolve` finds only blocks of at least two requests.
        keys: where each request's block keys wait, in the order added (default: a store of
            its own, dropped by :meth:`finish`; one passed in is left to its owner: a later pass
            reads the keys of the requests it does not render again there).
    """

    def __init__(
        self,
        granularity: Granularity,
        observer: KeyObserver | None = None,
        *,
        spill_bytes: int = DEFAULT_BUDGET,
        index_singletons: bool = True,
        keys: RaggedU64 | None = None,
    ) -> None:
        self.granularity = granularity
        self.hasher = BlockHasher()
        self.observer = observer
        self.index_singletons = index_singletons
        self._index: U64Index | SplitIndex = U64Index()
        self._next_id = 0
        self._seeds: dict[tuple[str, int], int] = {}
        self._ns_index: dict[str, int] = {}
        self._ns_scale: dict[str, int] = {}  # block scale of each namespace's first request
        self._own_keys = keys is None
        self._keys = RaggedU64(spill_bytes) if keys is None else keys
        self._observed: list[tuple[SimRequest, dict[int, int]]] = []
        # per-request columns in input order: to temporary files as they grow (trace.storage.mapped)
        self._times = ColumnWriter(np.float64)
        self._untimed = ColumnWriter(np.int8)
        self._ns = ColumnWriter(np.int32)
        self._prompt = ColumnWriter(np.int64)
        self._out = ColumnWriter(np.int64)
        self._cap = ColumnWriter(np.int32)
        self._btok = ColumnWriter(np.int32)
        self._scale = ColumnWriter(np.int32)
        self._rows = 0
        self._finished = False
        # the block-id pass, made as batches of rows come in while they arrive in time order
        # (the parent works on it while workers render); else made by finish()
        self._arrivals = ArrivalPass(INDEX_BUDGET)

    def _seed(self, namespace: str, scale: int) -> int:
        key = (namespace, scale)
        seed = self._seeds.get(key)
        if seed is None:
            seed = self._seeds[key] = namespace_seed(namespace, scale)
        return seed

    def units_per_block(self, block_scale: int) -> int:
        """Entries of ``tokens`` per block: the block size is rounded down to whole
        trace blocks, and is never finer than one trace block."""
        return max(1, self.granularity.block_size // max(1, block_scale))

    def block_keys(self, tokens: np.ndarray, namespace: str, block_scale: int = 1) -> np.ndarray:
        """Keys of the full blocks of ``tokens`` at this granularity."""
        scale = max(1, int(block_scale))
        return self.hasher.block_keys(tokens, self._seed(namespace, scale), self.units_per_block(scale))

    def _request_keys(self, req: SimRequest, scale: int, bu: int) -> tuple[np.ndarray, dict[int, int] | None]:
        """(block keys at this granularity, keys at the boundaries when observed)."""
        if req.tokens is not None:
            tokens = np.asarray(req.tokens, dtype=np.uint32)
            if self.observer is None:
                return self.hasher.block_keys(tokens, self._seed(req.namespace, scale), bu), None
            keys = self.hasher.prefix_keys(tokens, self._seed(req.namespace, scale))
            nb = keys.shape[0] // bu
            bounds = req.boundaries or request_boundaries(int(tokens.shape[0]), req.breakpoints, ())
            return keys[bu - 1 : nb * bu : bu].copy(), {b: int(keys[b - 1]) for b in bounds if 0 < b <= keys.shape[0]}
        if req.block_keys is None:
            raise UsageError(f"request {req.index} has neither tokens nor block keys")
        ku = max(1, int(req.keys_units))
        if bu % ku:
            raise coarser_keys_error(ku * scale, bu * scale)
        step = bu // ku
        keys = np.asarray(req.block_keys, dtype=np.uint64)[step - 1 :: step]
        if self.observer is None:
            return np.ascontiguousarray(keys), None
        return np.ascontiguousarray(keys), dict(zip(req.boundaries, req.boundary_keys or (), strict=False))

    def add(self, req: SimRequest) -> None:
        """Add one request (any order: :meth:`finish` sorts by arrival)."""
        if self._finished:
            raise RuntimeError("TraceBuilder.add after finish")
        self._arrivals.stop()  # one request at a time: finish() makes the pass
        scale = max(1, int(req.block_scale))
        bu = self.units_per_block(scale)
        btok = bu * scale
        keys, at = self._request_keys(req, scale, bu)
        n_real = req.real_tokens
        nb = min(int(keys.shape[0]), n_real // btok)
        keys = keys[:nb]
        if self.granularity.last_token_rule:
            cap = max(0, (n_real - 1) // btok) if n_real > 0 else 0
        else:
            cap = nb
        ns = self._ns_index.setdefault(req.namespace, len(self._ns_index))
        self._ns_scale.setdefault(req.namespace, scale)
        self._keys.append(keys)
        if self.observer is not None:
            self._observed.append((req, at or {}))
        self._times.append(float(req.time))
        self._untimed.append(0 if req.timed else 1)
        self._ns.append(ns)
        self._prompt.append(n_real)
        self._out.append(int(req.output_len))
        self._cap.append(min(cap, nb))
        self._btok.append(btok)
        self._scale.append(scale)
        self._rows += 1
        if not self._rows % SPILL_EVERY:
            for col in self._columns():
                col.spill()

    def add_columns(self, cols: RowColumns) -> None:
        """Add a batch of trace rows at once: the same as :meth:`add` of each row's
        :func:`request_of_row`, with no per-request object (not with an observer, which is
        called per request)."""
        if self._finished:
            raise RuntimeError("TraceBuilder.add_columns after finish")
        if self.observer is not None:
            raise RuntimeError("TraceBuilder.add_columns with an observer: add each request")
        n = cols.n
        if not n:
            return
        scale = np.maximum(cols.token_scale, 1)
        bu = np.maximum(self.granularity.block_size // scale, 1)
        btok = bu * scale
        ku = np.maximum(cols.keys_units, 1)
        bad = np.flatnonzero(bu % ku)
        if bad.shape[0]:
            i = int(bad[0])
            raise coarser_keys_error(int(ku[i] * scale[i]), int(btok[i]))
        step = bu // ku
        lengths = cols.block_keys.lengths
        n_real = cols.prompt_tokens
        nb = np.minimum(lengths // step, n_real // btok)
        # a row's keys: every step-th of its block keys, its first nb of them
        flat = cols.block_keys.values
        owner = np.repeat(np.arange(n), lengths)
        pos = np.arange(flat.shape[0], dtype=np.int64) - cols.block_keys.offsets[:-1][owner]
        pos += 1
        row_step = step[owner]
        keep = (pos % row_step == 0) & (pos // row_step <= nb[owner])
        kept = flat[keep]
        self._keys.extend(kept, nb)
        self._arrivals.take(cols.time, cols.has_time, kept, nb)
        if self.granularity.last_token_rule:
            cap = np.where(n_real > 0, np.maximum((n_real - 1) // btok, 0), 0)
        else:
            cap = nb
        codes, names = cols.namespace.codes, cols.namespace.values
        ns_of_code = np.full(len(names), -1, dtype=np.int32)
        for i in sorted(np.unique(codes, return_index=True)[1].tolist()):  # in order of first request
            name = str(names[int(codes[i])])
            ns_of_code[int(codes[i])] = self._ns_index.setdefault(name, len(self._ns_index))
            self._ns_scale.setdefault(name, int(scale[i]))
        self._times.extend(np.where(cols.has_time, cols.time, cols.index.astype(np.float64)))
        self._untimed.extend(~cols.has_time)
        self._ns.extend(ns_of_code[codes])
        self._prompt.extend(n_real)
        self._out.extend(cols.output_tokens)
        self._cap.extend(np.minimum(cap, nb))
        self._btok.extend(btok)
        self._scale.extend(scale)
        self._rows += n

    def _columns(self) -> tuple[ColumnWriter, ...]:
        return (self._times, self._untimed, self._ns, self._prompt, self._out, self._cap, self._btok, self._scale)

    def resolve(self, tokens: np.ndarray, namespace: str, block_scale: int | None = None) -> list[int]:
        """Ids of the leading full blocks of ``tokens`` seen in the trace (after :meth:`finish`)."""
        if block_scale is None:
            block_scale = self._ns_scale.get(namespace, 1)
        keys = self.block_keys(np.asarray(tokens, dtype=np.uint32), namespace, block_scale)
        ids = self._index.lookup(keys)
        missing = np.flatnonzero(ids < 0)
        known = int(missing[0]) if missing.shape[0] else int(ids.shape[0])
        return [int(i) for i in ids[:known]]

    def finish(self) -> BlockTrace:
        """Sort by arrival and assign block ids (the builder stays usable for :meth:`resolve`)."""
        if self._finished:
            raise RuntimeError("TraceBuilder.finish called twice")
        self._finished = True
        times = self._times.finish()
        untimed = self._untimed.finish().astype(bool)
        filled = fill_times(times, untimed)
        if filled is not times:
            times = filled
            if self._observed:  # the Anthropic model reads each request's time
                self._observed = [
                    (replace(req, time=float(times[i])), at) if untimed[i] else (req, at)
                    for i, (req, at) in enumerate(self._observed)
                ]
        del untimed
        # arrival order, ties in input order (a stable sort)
        order = mapped_copy(np.argsort(times, kind="stable").astype(np.int64, copy=False))
        nb_in = self._keys.lengths()
        expected, filtered = index_sizes(self._keys, self.index_singletons)
        n_blocks = mapped_gather(nb_in, order)
        del nb_in
        ids = assign_ids(self._keys, order, n_blocks, expected, filtered, self._arrivals)
        self._index, self._next_id = ids.index, ids.distinct
        end, known, start, attach = ids.end, ids.known, ids.start, ids.attach
        del ids
        if self.observer is not None:
            for i in order.tolist():
                req, at = self._observed[i]
                self.observer(req, at)
            self._observed.clear()
        if self._own_keys:
            self._keys.close()
        # each column sorted into its own file-backed array, one column at a time
        sorted_times = mapped_gather(times, order)
        del times
        trace = BlockTrace(
            granularity=self.granularity,
            times=sorted_times,
            order=order,
            prompt_tokens=mapped_gather(self._prompt.finish(), order),
            output_tokens=mapped_gather(self._out.finish(), order),
            n_blocks=n_blocks,
            cap_blocks=mapped_gather(self._cap.finish(), order, np.int64),
            end_block=end,  # file-backed already (assign_ids)
            known_blocks=known,
            block_tokens=mapped_gather(self._btok.finish(), order, np.int64),
            ns=mapped_gather(self._ns.finish(), order),
            namespaces=list(self._ns_index),
            index=self,
            unit_tokens=mapped_gather(self._scale.finish(), order, np.int64),
            block_start=start,
            attach=attach,
            distinct_blocks=self._next_id,
        )
        del end, known, start, attach
        trace.drop_resident()
        return trace


def build_trace(
    requests: Iterable[SimRequest],
    granularity: Granularity,
    observer: KeyObserver | None = None,
) -> BlockTrace:
    """Stream ``requests`` (any iterable of :class:`SimRequest`) into a :class:`BlockTrace`."""
    builder = TraceBuilder(granularity, observer)
    for req in requests:
        builder.add(req)
    return builder.finish()
