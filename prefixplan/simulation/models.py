"""Cache models replayed over a :class:`~prefixplan.trace.blocks.BlockTrace`.

Semantics shared by every capacity-bounded model (and by the reference oracles in the tests):

* Requests are replayed in arrival order (the rows of the trace: arrival time, ties in input
  order). A request first looks up its path: the reused prefix is the run of leading blocks
  that are cached (the cache is always prefix-closed), capped by the request's reusable
  blocks (full blocks, last-token rule).
* Then it evicts to make room for the blocks it lacks (*demand eviction*, as vLLM's free
  block queue and SGLang's radix cache): only unpinned leaf blocks not on its own path
  may go while it runs (its own blocks are in use), chosen by the policy key.
* It inserts the missing blocks and touches its whole path. A request longer than the
  cache then gives back its excess blocks by the same policy when it finishes, so the
  cache never holds more than its capacity between requests.

Policy keys (smallest evicted first; only leaves are evictable, so no ties can occur):
``lru`` last use; ``lfu`` (uses since insertion, last use); ``fifo`` insertion;
``priority`` (highest request priority since insertion, last use), as SGLang's
``--radix-eviction-policy priority``. "Last use" in a key is the arrival order of the last
request that looked the block up.

Time and TTL. Request ``r`` arrives at ``t_r`` and is served until ``f_r = t_r + s_r``
(``service_s``: :func:`prefixplan.simulation.batch.service_times`, the in-batch model's
estimate or a fixed ``--batch-window``; 0 when a model is given none). Its lookup happens at
``t_r``; it uses its blocks until ``f_r``.

* A block's *last-use time* ``L(b)`` is the latest finish among the requests that used it so
  far (every earlier arrival, including ones still in service): ``max f_u``. A block in use by
  a request still being served has ``L(b) > now``, so it cannot expire under that request.
* With a TTL, on each arrival at ``now``, every cached, unpinned block with
  ``L(b) < now - ttl`` has expired (is gone) before the lookup; ``now - L(b) <= ttl`` is
  alive. Every request using a block also uses its parent, so ``L(parent) >= L(child)``:
  expiry keeps the cache prefix-closed and a hit is always a run of leading blocks that are
  all alive (never blocks 6-10 of a prompt whose blocks 1-5 expired).
* At unbounded capacity this leaves no room for policy: block ``j`` of request ``r`` is reused
  iff blocks ``0..j`` all are, and some earlier arrival used it with ``max f_u >= t_r - ttl``.
  Every policy gives these hits (:func:`infinite_hits`).
* Service times do not change the eviction order (a key's "last use" stays the lookup
  order); without a TTL they change nothing.

LRU uses the Mattson stack-distance method on the compressed tree: one pass gives every
capacity and tier split at once. A node's blocks occupy consecutive stack depths
(deeper blocks are older), so the cached part of a node at capacity ``C`` is
``clip(C - depth_above, 0, weight)``. Tiers under LRU are the same stack cut into
consecutive ranges (GPU, then CPU, then disk): demotion on eviction and promotion on hit
preserve recency order, and a lower tier with free space is taken to hold the most recent
blocks of the tiers below it (a modelling simplification that only moves blocks between
lower tiers, never changes whether a block is cached). TTL expiry takes blocks out of the
stack; that is exact when it only ever removes the bottom of the stack, i.e. when finishes
are non-decreasing in arrival order (no service times, or a fixed batch window; see
:func:`~prefixplan.simulation.lru.stack_exact`), and at unbounded capacity. Otherwise (the
estimated service times differ per request) a block used recently can expire before an
older one and leave room the older one keeps, which no stack distance captures: LRU with a
TTL at a finite capacity then runs :class:`NodeCache` (once per tier boundary: the tiers
are one recency order, so GPU + tiers above a boundary are an LRU cache of that size).
LFU, FIFO and priority use :class:`NodeCache`; auto-promotion uses :class:`GenericCache`, a
block-level simulator.
"""

from __future__ import annotations

import hashlib
import importlib
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from prefixplan.errors import UsageError
from prefixplan.simulation.spec import (
    CacheOutcome,
    CacheSpec,
    capacity_blocks,
    choose_pins,
    infinite_hits,
)
from prefixplan.trace.blocks import BlockTrace
from prefixplan.trace.nodes import build_tree

__all__ = ["MODELS", "ModelRun", "model_kind", "run_model"]

MODELS: dict[str, str] = {
    "unbounded": "prefixplan.simulation.models:run_unbounded",
    "lru-stack": "prefixplan.simulation.models:run_lru_stack",
    "lru-nodes": "prefixplan.simulation.models:run_lru_nodes",
    "policy": "prefixplan.simulation.models:run_policy",
    "auto-promote": "prefixplan.simulation.models:run_auto_promote",
}
"""Cache model kind (:func:`model_kind`) -> ``module:function`` replaying it, imported on first use."""


@dataclass(frozen=True)
class ModelRun:
    """One replay: the trace, the spec, and what :func:`run_model` worked out for it."""

    trace: BlockTrace
    spec: CacheSpec
    reg_cap: float  # blocks of the regular (unpinned) partition
    pin_cap: int  # blocks of the pinned partition
    pins: list[int]
    priorities: np.ndarray | None
    service_s: np.ndarray | None
    stack_cache: dict | None


def model_kind(spec: CacheSpec) -> str:
    """Which model replays ``spec`` (a key of :data:`MODELS`)."""
    lru = spec.policy in ("lru", "infinite")
    if lru and spec.capacity_tokens is None and not spec.tiers:
        return "unbounded"
    if spec.auto_promote is not None:
        return "auto-promote"
    if lru:
        return "lru-stack"
    if spec.tiers:
        raise UsageError("tiers are modelled with LRU eviction only", hint="use --policy lru with tiers")
    return "policy"


def run_model(
    trace: BlockTrace,
    spec: CacheSpec,
    *,
    priorities: np.ndarray | None = None,
    service_s: np.ndarray | None = None,
    _stack_cache: dict | None = None,
) -> CacheOutcome:
    """Replay ``trace`` through one cache model (:data:`MODELS`).

    ``service_s``: seconds each request (row) is served after its arrival; a block's TTL
    counts from the latest finish of the requests that used it (0: from their arrivals).
    ``_stack_cache`` keeps LRU stacks between calls on the same trace.
    """
    if spec.policy == "infinite":
        spec = CacheSpec(policy="lru", ttl_s=spec.ttl_s)
    kind = model_kind(spec)
    if kind == "unbounded":
        return run_unbounded(ModelRun(trace, spec, math.inf, 0, [], priorities, service_s, _stack_cache))
    cap = capacity_blocks(trace, spec.capacity_tokens)
    if spec.pinned_fraction > 0 and math.isinf(cap):
        raise UsageError("a pinned partition needs a finite --capacity")
    pin_cap = math.floor(cap * spec.pinned_fraction) if spec.pinned_fraction > 0 else 0
    pins = choose_pins(trace, spec.pins, pin_cap) if (spec.pins and pin_cap and spec.auto_promote is None) else []
    reg_cap = cap - pin_cap
    if kind == "lru-stack" and not math.isinf(reg_cap) and not stack_exact_for(trace, spec, service_s):
        kind = "lru-nodes"  # a TTL the stack cannot replay exactly
    module, _, name = MODELS[kind].partition(":")
    replay: Callable[[ModelRun], CacheOutcome] = getattr(importlib.import_module(module), name)
    return replay(ModelRun(trace, spec, reg_cap, pin_cap, pins, priorities, service_s, _stack_cache))


def stack_exact_for(trace: BlockTrace, spec: CacheSpec, service_s: np.ndarray | None) -> bool:
    from prefixplan.simulation.lru import stack_exact

    return stack_exact(trace, spec.ttl_s, service_s)


def run_unbounded(run: ModelRun) -> CacheOutcome:
    """An unbounded LRU cache (with a TTL, if any): every block ever seen, until it expires."""
    return CacheOutcome(infinite_hits(run.trace, run.spec.ttl_s, run.service_s), {}, 0)


def run_lru_stack(run: ModelRun) -> CacheOutcome:
    """LRU by stack distances: one pass serves every capacity (and tiers below the GPU)."""
    from prefixplan.simulation.lru import LRUStack

    trace, spec = run.trace, run.spec
    tier_caps = tuple(capacity_blocks(trace, t.capacity_tokens) for t in spec.tiers)
    ttl_key = None
    if spec.ttl_s is not None:
        service = b"" if run.service_s is None else np.ascontiguousarray(run.service_s, dtype=np.float64).tobytes()
        ttl_key = (spec.ttl_s, hashlib.blake2b(service, digest_size=16).digest())
    key = (tuple(sorted(run.pins)), ttl_key)
    cache = run.stack_cache if run.stack_cache is not None else {}
    stack = cache.get(key)
    if stack is None:
        tree = build_tree(trace, extra_ends=run.pins)
        pinned_nodes = np.zeros(tree.n_nodes, dtype=bool)
        if run.pins:
            pinned_nodes[np.unique(tree.nodes_of(np.asarray(run.pins, dtype=np.int64)))] = True
        stack = cache[key] = LRUStack(trace, tree, pinned_nodes, ttl_s=spec.ttl_s, service_s=run.service_s)
    _, per_tier, evictions = stack.evaluate(run.reg_cap, tier_caps, spec.prewarm_pins)
    present = sum(per_tier)
    hits = np.minimum(present, trace.cap_blocks)
    tiers: dict[str, np.ndarray] = {}
    acc = np.minimum(per_tier[0], hits)
    for tier, amount in zip(spec.tiers, per_tier[1:], strict=False):
        nxt = np.minimum(acc + amount, hits)
        tiers[tier.name] = nxt - acc
        acc = nxt
    return CacheOutcome(hits, tiers, evictions, len(run.pins))


def run_lru_nodes(run: ModelRun) -> CacheOutcome:
    """LRU with a TTL where the stack is not exact: :class:`NodeCache` at the GPU capacity and at
    each lower tier's boundary (GPU + the tiers above it hold what an LRU cache of that size holds)."""
    from prefixplan.simulation.nodecache import NodeCache

    trace, spec = run.trace, run.spec
    tier_caps = tuple(capacity_blocks(trace, t.capacity_tokens) for t in spec.tiers)
    tree = None if run.pins else build_tree(trace)  # NodeCache cuts its own tree at the pins

    def replay(capacity: float) -> CacheOutcome:
        return NodeCache(
            trace,
            "lru",
            capacity,
            ttl_s=spec.ttl_s,
            pinned_blocks=run.pins,
            prewarm_pins=spec.prewarm_pins,
            tree=tree,
            service_s=run.service_s,
        ).run()

    gpu = replay(run.reg_cap)
    tiers: dict[str, np.ndarray] = {}
    acc = gpu.hit_blocks
    bound = run.reg_cap
    for tier, extra in zip(spec.tiers, tier_caps, strict=True):
        bound += extra
        nxt = replay(bound).hit_blocks
        tiers[tier.name] = nxt - acc
        acc = nxt
    return CacheOutcome(acc, tiers, gpu.evictions, gpu.pinned_blocks)


def run_policy(run: ModelRun) -> CacheOutcome:
    """LFU, FIFO or priority eviction over the trie's nodes (:class:`NodeCache`)."""
    from prefixplan.simulation.nodecache import NodeCache

    spec = run.spec
    return NodeCache(
        run.trace,
        spec.policy,
        run.reg_cap,
        ttl_s=spec.ttl_s,
        pinned_blocks=run.pins,
        priorities=run.priorities,
        prewarm_pins=spec.prewarm_pins,
        service_s=run.service_s,
    ).run()


def run_auto_promote(run: ModelRun) -> CacheOutcome:
    """Any policy with auto-promotion into a pinned partition (:class:`GenericCache`, block by block)."""
    from prefixplan.simulation.generic import GenericCache

    spec = run.spec
    if spec.tiers:
        raise UsageError("tiers are modelled with LRU eviction only", hint="use --policy lru with tiers")
    return GenericCache(
        run.trace,
        spec.policy,
        run.reg_cap,
        ttl_s=spec.ttl_s,
        pinned_blocks=run.pins,
        pinned_capacity=run.pin_cap,
        auto_promote=spec.auto_promote,
        priorities=run.priorities,
        prewarm_pins=spec.prewarm_pins,
        service_s=run.service_s,
    ).run()
