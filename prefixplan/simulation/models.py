"""Cache models replayed over a :class:`~prefixplan.simulation.trace.BlockTrace`.

Semantics shared by every capacity-bounded model (and by the reference oracles in the tests):

* A request first looks up its path: the reused prefix is the run of leading blocks that
  are cached (the cache is always prefix-closed), capped by the request's reusable blocks
  (full blocks, last-token rule).
* Then it evicts to make room for the blocks it lacks (*demand eviction*, as vLLM's free
  block queue and SGLang's radix cache): only unpinned leaf blocks not on its own path
  may go while it runs (its own blocks are in use), chosen by the policy key.
* It inserts the missing blocks and touches its whole path. A request longer than the
  cache then gives back its excess blocks by the same policy when it finishes, so the
  cache never holds more than its capacity between requests.

Policy keys (smallest evicted first; only leaves are evictable, so no ties can occur):
``lru`` last use; ``lfu`` (uses since insertion, last use); ``fifo`` insertion;
``priority`` (highest request priority since insertion, last use), as SGLang's
``--radix-eviction-policy priority``.

LRU uses the Mattson stack-distance method on the compressed tree: one pass gives every
capacity, tier split and TTL at once. A node's blocks occupy consecutive stack depths
(deeper blocks are older), so the cached part of a node at capacity ``C`` is
``clip(C - depth_above, 0, weight)``. Tiers under LRU are the same stack cut into
consecutive ranges (GPU, then CPU, then disk): demotion on eviction and promotion on hit
preserve recency order, and a lower tier with free space is taken to hold the most recent
blocks of the tiers below it (a modelling simplification that only moves blocks between
lower tiers, never changes whether a block is cached). TTL expiry removes the oldest
blocks, so it composes with the stack as an age test. LFU, FIFO, priority and
auto-promotion use :class:`GenericCache`, a block-level simulator.
"""

from __future__ import annotations

import math

import numpy as np

from prefixplan.errors import UsageError
from prefixplan.simulation.generic import GenericCache
from prefixplan.simulation.lru import LRUStack
from prefixplan.simulation.nodecache import NodeCache
from prefixplan.simulation.spec import (
    POLICIES,
    TTL_PRESETS,
    AutoPromote,
    CacheOutcome,
    CacheSpec,
    Tier,
    capacity_blocks,
    choose_pins,
    infinite_hits,
    parse_ttl,
)
from prefixplan.simulation.trace import BlockTrace
from prefixplan.simulation.tree import build_tree

__all__ = [
    "POLICIES",
    "TTL_PRESETS",
    "AutoPromote",
    "CacheOutcome",
    "CacheSpec",
    "GenericCache",
    "LRUStack",
    "NodeCache",
    "Tier",
    "capacity_blocks",
    "choose_pins",
    "infinite_hits",
    "parse_ttl",
    "run_model",
]


def run_model(
    trace: BlockTrace,
    spec: CacheSpec,
    *,
    priorities: np.ndarray | None = None,
    kv_bytes_per_token: float | None = None,
    _stack_cache: dict | None = None,
) -> CacheOutcome:
    """Replay ``trace`` through one cache model."""
    if spec.policy == "infinite":
        spec = CacheSpec(policy="lru", ttl_s=spec.ttl_s)
    if spec.capacity_tokens is None and spec.policy == "lru" and spec.ttl_s is None and not spec.tiers:
        return CacheOutcome(infinite_hits(trace), {}, 0)
    cap = capacity_blocks(trace, spec.capacity_tokens)
    pin_cap = math.floor(cap * spec.pinned_fraction) if spec.pinned_fraction > 0 and not math.isinf(cap) else 0
    if spec.pinned_fraction > 0 and math.isinf(cap):
        raise UsageError("a pinned partition needs a finite --capacity")
    reg_cap = cap - pin_cap
    pins = choose_pins(trace, spec.pins, pin_cap) if (spec.pins and pin_cap and spec.auto_promote is None) else []
    if spec.policy == "lru" and spec.auto_promote is None:
        key = tuple(sorted(pins))
        cache = _stack_cache if _stack_cache is not None else {}
        stack = cache.get(key)
        if stack is None:
            tree = build_tree(trace, extra_ends=pins)
            pinned_nodes = np.zeros(tree.n_nodes, dtype=bool)
            if pins:
                pinned_nodes[np.unique(tree.node_of_block[np.asarray(pins, dtype=np.int64)])] = True
            stack = cache[key] = LRUStack(trace, tree, pinned_nodes)
        tier_caps = tuple(capacity_blocks(trace, t.capacity_tokens) for t in spec.tiers)
        _, per_tier, evictions = stack.evaluate(reg_cap, tier_caps, spec.ttl_s, spec.prewarm_pins)
        present = sum(per_tier)
        hits = np.minimum(present, trace.cap_blocks)
        tiers: dict[str, np.ndarray] = {}
        acc = np.minimum(per_tier[0], hits)
        for tier, amount in zip(spec.tiers, per_tier[1:], strict=False):
            nxt = np.minimum(acc + amount, hits)
            tiers[tier.name] = nxt - acc
            acc = nxt
        return CacheOutcome(hits, tiers, evictions, len(pins))
    if spec.tiers:
        raise UsageError("tiers are modelled with LRU eviction only", hint="use --policy lru with tiers")
    if spec.auto_promote is None:
        return NodeCache(
            trace,
            spec.policy,
            reg_cap,
            ttl_s=spec.ttl_s,
            pinned_blocks=pins,
            priorities=priorities,
            prewarm_pins=spec.prewarm_pins,
        ).run()
    sim = GenericCache(
        trace,
        spec.policy,
        reg_cap,
        ttl_s=spec.ttl_s,
        pinned_blocks=pins,
        pinned_capacity=pin_cap,
        auto_promote=spec.auto_promote,
        priorities=priorities,
        prewarm_pins=spec.prewarm_pins,
    )
    return sim.run()
