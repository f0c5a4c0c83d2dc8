"""The simulation input stream and its shared integer block trace.

:class:`SimRequest` is the input contract (independent of logs and tokenizers). A
:class:`TraceBuilder` turns the stream into a :class:`BlockTrace` once; every cache model
and every capacity then replays the same integer block ids.

Block identity. Block ``j`` of a request stands for the whole prefix
``tokens[:(j+1)*block]`` in its namespace (chained identity, as vLLM's block hashes).
Keys are 64-bit prefix hashes computed with numpy in one pass per request: each token is
mixed with a position-specific odd constant and the mixes are summed (mod 2**64), so the
key of every prefix length is a cumulative sum. Distinct keys get dense ids in order of
first appearance, so a block's parent always has a smaller id and the blocks a request
adds form a consecutive id range. Because identities are chained, the blocks seen before
form a prefix-closed set and a request is fully described by its deepest block id
(``end_block``) and its block count. Collision probability is about ``D**2 / 2**65`` for
``D`` distinct blocks (below 1e-6 for ten million blocks).
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from prefixplan.core.granularity import Granularity

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S31 = np.uint64(31)
_S29 = np.uint64(29)
_S33 = np.uint64(33)


@dataclass(frozen=True, slots=True)
class SimRequest:
    """One request as the simulator sees it.

    Attributes:
        time: arrival seconds (logs without times use the file index).
        namespace: cache namespace (model, LoRA, salt); namespaces never share blocks.
        tokens: uint32 token ids. For Mooncake traces one pseudo-token per block hash id.
        output_len: generated tokens (0 when unknown).
        breakpoints: Anthropic ``cache_control`` token offsets (prefix lengths), if any.
        block_scale: real tokens each entry of ``tokens`` stands for (Mooncake block size).
        index: position in the input stream.
        route_units: what a router sees of the request (``simulation.router.route_units``);
            None when no fleet is simulated.
        key: identity of the request's leading system/tool prefix (keyed routing), if any.
        key_tokens: that prefix's length in tokens (up to the first user message).
    """

    time: float
    namespace: str
    tokens: np.ndarray
    output_len: int = 0
    breakpoints: tuple[int, ...] = ()
    block_scale: int = 1
    index: int = 0
    route_units: tuple[int, ...] | None = None
    key: str | None = None
    key_tokens: int = 0


class PrefixHasher:
    """64-bit keys of every prefix of a token array (see module docstring)."""

    def __init__(self, seed: int = 0x5EED) -> None:
        self._rng = np.random.default_rng(seed)
        self._k = np.zeros(0, dtype=np.uint64)

    def _consts(self, n: int) -> np.ndarray:
        if self._k.shape[0] < n:
            grow = max(n, 2 * self._k.shape[0], 4096) - self._k.shape[0]
            extra = self._rng.integers(0, 2**63, size=grow, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
            self._k = np.concatenate([self._k, extra])
        return self._k[:n]

    @staticmethod
    def namespace_seed(namespace: str, block_scale: int = 1) -> np.uint64:
        digest = hashlib.blake2b(f"{namespace}\x00{block_scale}".encode(), digest_size=8).digest()
        return np.uint64(int.from_bytes(digest, "little"))

    def prefix_keys(self, tokens: np.ndarray, seed: np.uint64) -> np.ndarray:
        """Key of ``tokens[:i+1]`` at index ``i`` (uint64 array, same length)."""
        n = int(tokens.shape[0])
        with np.errstate(over="ignore"):
            x = (tokens.astype(np.uint64) + np.uint64(1)) * self._consts(n)
            x ^= x >> _S31
            x *= _M1
            x ^= x >> _S29
            p = np.cumsum(x, dtype=np.uint64)
            p += seed
            p ^= p >> _S33
            p *= _M2
            p ^= p >> _S33
        return p


@dataclass(slots=True)
class BlockTrace:
    """Integer block trace shared by all cache models (arrays indexed by request).

    Attributes:
        granularity: the reuse granularity the blocks were cut at.
        times: arrival seconds.
        prompt_tokens: real prompt tokens (``len(tokens) * block_scale``).
        output_tokens: output tokens per request.
        n_blocks: full blocks of each request (all are cached after it runs).
        cap_blocks: most blocks a request may reuse (full blocks; last-token rule).
        end_block: id of the deepest block (-1 for requests shorter than a block).
        known_blocks: leading blocks seen in earlier requests (the infinite-cache match).
        block_tokens: real tokens per block for each request.
        parent: parent block id of each block id (-1 for a namespace's first block).
        namespaces: namespace names; ``ns`` indexes them per request.
    """

    granularity: Granularity
    times: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    n_blocks: np.ndarray
    cap_blocks: np.ndarray
    end_block: np.ndarray
    known_blocks: np.ndarray
    block_tokens: np.ndarray
    parent: np.ndarray
    ns: np.ndarray
    namespaces: list[str]
    index: TraceBuilder

    @property
    def n_requests(self) -> int:
        return int(self.times.shape[0])

    @property
    def n_distinct_blocks(self) -> int:
        return int(self.parent.shape[0])

    def path_blocks(self, r: int) -> list[int]:
        """Block ids of request ``r``, root first (slow; for tests and small traces)."""
        out: list[int] = []
        b = int(self.end_block[r])
        parent = self.parent
        while b >= 0:
            out.append(b)
            b = int(parent[b])
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
        observer: optional callback ``(request, prefix_keys)`` called for every request
            with the key of every token prefix (used by the Anthropic breakpoint model).
    """

    def __init__(
        self,
        granularity: Granularity,
        observer: Callable[[SimRequest, np.ndarray], None] | None = None,
    ) -> None:
        self.granularity = granularity
        self.hasher = PrefixHasher()
        self.observer = observer
        self._ids: dict[int, int] = {}
        self._parent = array("q")
        self._ns_index: dict[str, int] = {}
        self._seeds: dict[tuple[str, int], np.uint64] = {}
        self._ns_scale: dict[str, int] = {}  # block scale of each namespace's first request
        self._times = array("d")
        self._ns = array("i")
        self._prompt = array("q")
        self._out = array("q")
        self._nb = array("i")
        self._cap = array("i")
        self._end = array("q")
        self._known = array("i")
        self._btok = array("i")

    def _seed(self, namespace: str, scale: int) -> np.uint64:
        key = (namespace, scale)
        seed = self._seeds.get(key)
        if seed is None:
            seed = self._seeds[key] = PrefixHasher.namespace_seed(namespace, scale)
        return seed

    def units_per_block(self, block_scale: int) -> int:
        """Entries of ``tokens`` per block: the block size is rounded down to whole
        trace blocks, and is never finer than one trace block."""
        return max(1, self.granularity.block_size // max(1, block_scale))

    def block_keys(self, tokens: np.ndarray, namespace: str, block_scale: int = 1) -> tuple[np.ndarray, np.ndarray]:
        """(prefix keys of every token, keys of the full blocks)."""
        scale = max(1, int(block_scale))
        bu = self.units_per_block(scale)
        keys = self.hasher.prefix_keys(np.asarray(tokens, dtype=np.uint32), self._seed(namespace, scale))
        nb = keys.shape[0] // bu
        return keys, keys[bu - 1 : nb * bu : bu]

    def _known_prefix(self, keys: list[int]) -> int:
        ids = self._ids
        lo, hi = 0, len(keys)  # answer in [lo, hi]
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if keys[mid - 1] in ids:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def resolve(self, tokens: np.ndarray, namespace: str, block_scale: int | None = None) -> list[int]:
        """Ids of the leading full blocks of ``tokens`` seen so far."""
        if block_scale is None:
            block_scale = self._ns_scale.get(namespace, 1)
        _, bkeys = self.block_keys(tokens, namespace, block_scale)
        keys = bkeys.tolist()
        known = self._known_prefix(keys)
        return [self._ids[k] for k in keys[:known]]

    def add(self, req: SimRequest) -> int:
        """Add one request; returns its number of leading blocks seen before."""
        scale = max(1, int(req.block_scale))
        tokens = np.asarray(req.tokens, dtype=np.uint32)
        keys_all, bkeys = self.block_keys(tokens, req.namespace, scale)
        if self.observer is not None:
            self.observer(req, keys_all)
        bu = self.units_per_block(scale)
        btok = bu * scale
        n_units = int(tokens.shape[0])
        n_real = n_units * scale
        nb = int(bkeys.shape[0])
        keys = bkeys.tolist()
        known = self._known_prefix(keys)
        ids = self._ids
        if nb == 0:
            end = -1
        elif known == nb:
            end = ids[keys[-1]]
        else:
            start = len(self._parent)
            new = nb - known
            ids.update(zip(keys[known:], range(start, start + new), strict=False))
            self._parent.append(ids[keys[known - 1]] if known else -1)
            self._parent.extend(range(start, start + new - 1))
            end = start + new - 1
        if self.granularity.last_token_rule:
            cap = max(0, (n_real - 1) // btok) if n_real > 0 else 0
        else:
            cap = nb
        ns = self._ns_index.setdefault(req.namespace, len(self._ns_index))
        self._ns_scale.setdefault(req.namespace, scale)
        self._times.append(float(req.time))
        self._ns.append(ns)
        self._prompt.append(n_real)
        self._out.append(int(req.output_len))
        self._nb.append(nb)
        self._cap.append(min(cap, nb))
        self._end.append(end)
        self._known.append(known)
        self._btok.append(btok)
        return known

    def finish(self) -> BlockTrace:
        """Freeze the arrays (the builder stays usable for :meth:`resolve`)."""

        def arr(a: array, dtype: type) -> np.ndarray:
            return np.frombuffer(a, dtype=dtype).copy() if len(a) else np.zeros(0, dtype=dtype)

        return BlockTrace(
            granularity=self.granularity,
            times=arr(self._times, np.float64),
            prompt_tokens=arr(self._prompt, np.int64),
            output_tokens=arr(self._out, np.int64),
            n_blocks=arr(self._nb, np.int32).astype(np.int64),
            cap_blocks=arr(self._cap, np.int32).astype(np.int64),
            end_block=arr(self._end, np.int64),
            known_blocks=arr(self._known, np.int32).astype(np.int64),
            block_tokens=arr(self._btok, np.int32).astype(np.int64),
            parent=arr(self._parent, np.int64),
            ns=arr(self._ns, np.int32),
            namespaces=list(self._ns_index),
            index=self,
        )


def build_trace(
    requests: Iterable[SimRequest],
    granularity: Granularity,
    observer: Callable[[SimRequest, np.ndarray], None] | None = None,
) -> BlockTrace:
    """Stream ``requests`` (any iterable of :class:`SimRequest`) into a :class:`BlockTrace`."""
    builder = TraceBuilder(granularity, observer)
    for req in requests:
        builder.add(req)
    return builder.finish()
