"""What one cache model is (:class:`CacheSpec`: policy, capacity, TTL, pins, tiers) and the
block-level helpers every model shares (capacity in blocks, pin selection, unbounded hits)."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from prefixplan.errors import UsageError
from prefixplan.trace.blocks import BlockTrace

POLICIES = ("lru", "lfu", "fifo", "priority")
TTL_PRESETS = {"5m": 300.0, "1h": 3600.0, "24h": 86400.0}


def parse_ttl(value: str | float | None) -> float | None:
    """``5m``, ``1h``, ``24h``, ``90s`` or seconds -> seconds (None = no expiry)."""
    if value is None or value == "" or value == "none":
        return None
    text = str(value).strip().lower()
    if text in TTL_PRESETS:
        return TTL_PRESETS[text]
    from prefixplan.core.durations import parse_seconds

    try:
        return parse_seconds(text)
    except ValueError:
        raise UsageError(f"bad cache TTL {value!r}", hint="use 5m, 1h, 24h or seconds (>= 0)") from None


@dataclass(frozen=True, slots=True)
class Tier:
    """A lower cache tier (CPU memory, local disk) below the GPU cache.

    Attributes:
        name: label, e.g. ``cpu`` or ``disk``.
        capacity_tokens: tokens the tier holds.
        bandwidth_bytes_per_s: load bandwidth into GPU memory (0 = free).
        latency_s: fixed latency per request that loads from this tier.
    """

    name: str
    capacity_tokens: float
    bandwidth_bytes_per_s: float = 0.0
    latency_s: float = 0.0


@dataclass(frozen=True, slots=True)
class AutoPromote:
    """Auto-promotion into the pinned partition.

    A cached block is pinned once it was reused in at least ``min_hits`` requests during
    the last ``window_s`` seconds (and its parent is pinned, and the partition has room);
    a pinned block not reused for ``cold_after_s`` seconds goes back to the regular area.
    """

    min_hits: int = 3
    window_s: float = 3600.0
    cold_after_s: float = 3600.0


def human_tokens(tokens: float, bytes_per_token: float | None = None) -> str:
    """``305k tok``, ``1.5M tok``; with a KV size also the memory: ``305k tok (40 GB)``."""
    n = float(tokens)
    for scale, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if n >= scale:
            text = f"{n / scale:.3g}{unit} tok"
            break
    else:
        text = f"{n:.0f} tok"
    if bytes_per_token:
        gb = n * bytes_per_token / 1e9
        text += f" ({gb:.3g} GB)" if gb >= 0.01 else f" ({n * bytes_per_token / 1e6:.3g} MB)"
    return text


@dataclass(frozen=True, slots=True)
class CacheSpec:
    """One cache model.

    Attributes:
        policy: ``infinite``, ``lru``, ``lfu``, ``fifo`` or ``priority``.
        capacity_tokens: GPU cache capacity in tokens (None = unbounded).
        ttl_s: hosted-cache expiry after last use (None = none).
        pinned_fraction: share of the capacity reserved for pinned prefixes.
        pins: pinned prefixes as ``(namespace, token ids)``, admitted in order while they fit.
        auto_promote: promote hot blocks into the pinned partition instead of fixed pins.
        tiers: lower tiers (LRU only).
        prewarm_pins: pinned prefixes are resident from the start (warmed).
    """

    policy: str = "lru"
    capacity_tokens: float | None = None
    ttl_s: float | None = None
    pinned_fraction: float = 0.0
    pins: tuple[tuple[str, np.ndarray], ...] = field(default=(), compare=False)
    auto_promote: AutoPromote | None = None
    tiers: tuple[Tier, ...] = ()
    prewarm_pins: bool = False

    def label(
        self,
        total_tokens: float | None = None,
        pinned_share: float | None = None,
        running_share: float = 0.0,
        bytes_per_token: float | None = None,
    ) -> str:
        """Short human label, e.g. ``lru 1M tok (20% pinned / 60% lru / 20% running)`` or, with the KV
        size, ``lru 305k tok (40 GB) + cpu 1.53M tok (200 GB)``.

        ``total_tokens``, ``pinned_share`` and ``running_share`` describe the whole capacity
        when part of it is held by running requests (this spec then covers the cache part).
        """
        total = self.capacity_tokens if total_tokens is None else total_tokens
        pinned = self.pinned_fraction if pinned_share is None else pinned_share
        if self.policy == "infinite" or total is None:
            text = "infinite" if self.policy in ("infinite", "lru") else f"{self.policy} unbounded"
        else:
            text = f"{self.policy} {human_tokens(total, bytes_per_token)}"
        if pinned > 0 or running_share > 0:
            parts = []
            if pinned > 0:
                parts.append(f"{pinned:.0%} {'auto-promoted' if self.auto_promote else 'pinned'}")
            parts.append(f"{1 - pinned - running_share:.0%} {self.policy}")
            if running_share > 0:
                parts.append(f"{running_share:.0%} running")
            text += f" ({' / '.join(parts)})"
        for tier in self.tiers:
            text += f" + {tier.name} {human_tokens(tier.capacity_tokens, bytes_per_token)}"
        if self.ttl_s is not None:
            text += f", ttl {self.ttl_s:g}s"
        return text


@dataclass(slots=True)
class CacheOutcome:
    """Block-level outcome of one model (converted to tokens by the caller).

    Attributes:
        hit_blocks: reused blocks per request.
        tier_blocks: per lower tier, reused blocks per request loaded from it.
        evictions: blocks evicted from the GPU cache (demoted or dropped).
        pinned_blocks: blocks held by the pinned partition at the end.
    """

    hit_blocks: np.ndarray
    tier_blocks: dict[str, np.ndarray]
    evictions: int
    pinned_blocks: int = 0


def capacity_blocks(trace: BlockTrace, tokens: float | None) -> float:
    """Capacity in blocks (floor); ``inf`` when unbounded."""
    if tokens is None or math.isinf(tokens):
        return math.inf
    bt = int(trace.block_tokens.max()) if trace.n_requests else trace.granularity.block_size
    return float(int(tokens // max(1, bt)))


def choose_pins(trace: BlockTrace, pins: Sequence[tuple[str, np.ndarray]], budget_blocks: float) -> list[int]:
    """Block ids of the pinned prefixes that fit in ``budget_blocks`` (in order given)."""
    chosen: dict[int, None] = {}
    for namespace, tokens in pins:
        ids = trace.resolve(np.asarray(tokens, dtype=np.uint32), namespace)
        for b in ids:
            if b in chosen:
                continue
            if len(chosen) + 1 > budget_blocks:
                return list(chosen)
            chosen[b] = None
    return list(chosen)


ROWS_PER_STEP = 1 << 16
"""Requests the per-request replay loops turn into Python values at a time."""


def request_values(*columns: np.ndarray) -> Iterator[tuple[Any, ...]]:
    """``(row, value of each column...)`` for every request (row), as Python values a window of
    :data:`ROWS_PER_STEP` rows at a time: the replay loops run on Python values without a list
    over every request."""
    n = int(columns[0].shape[0]) if columns else 0
    step = ROWS_PER_STEP
    for lo in range(0, n, step):
        hi = min(n, lo + step)
        yield from zip(range(lo, hi), *(c[lo:hi].tolist() for c in columns), strict=True)


def finish_times(trace: BlockTrace, service_s: np.ndarray | None = None) -> np.ndarray:
    """When each request (row) stops using its blocks: arrival + ``service_s`` (0 when None)."""
    if service_s is None:
        return trace.times.astype(np.float64)
    service = np.asarray(service_s, dtype=np.float64)
    if service.shape != trace.times.shape:
        raise ValueError(f"service_s has {service.shape[0]} entries for {trace.n_requests} requests")
    return trace.times + service


def infinite_hits(trace: BlockTrace, ttl_s: float | None = None, service_s: np.ndarray | None = None) -> np.ndarray:
    """Reused blocks per request with an unbounded persistent cache (and a TTL).

    Without a TTL a request reuses every leading block an earlier arrival brought. With one, a
    block is reused only while it is alive: its last-use time, the latest finish (arrival +
    ``service_s``) of the earlier arrivals that used it, is at most ``ttl_s`` before the
    request arrives; the hit is the run of leading blocks that are all alive (see
    :mod:`prefixplan.simulation.models`).
    """
    known = np.minimum(trace.known_blocks, trace.cap_blocks)
    if ttl_s is None or math.isinf(ttl_s):
        return known
    from prefixplan.trace.nodes import build_tree

    tree = build_tree(trace)
    npar = tree.node_parent.tolist()
    weight = tree.weight.tolist()
    times = trace.times.tolist()
    finish = finish_times(trace, service_s).tolist()
    caps = trace.cap_blocks.tolist()
    last_use = [-math.inf] * tree.n_nodes
    hits = [0] * trace.n_requests
    for r, end in enumerate(tree.req_node.tolist()):
        if end < 0:
            continue
        path = []
        v = end
        while v >= 0:
            path.append(v)
            v = npar[v]
        limit = times[r] - ttl_s
        present = 0
        for v in reversed(path):  # root first: a hit is a run of leading alive nodes
            if last_use[v] < limit:
                break
            present += weight[v]
        hits[r] = min(present, caps[r])
        f = finish[r]
        for v in path:
            if f > last_use[v]:
                last_use[v] = f
    return np.asarray(hits, dtype=np.int64).reshape(-1)
