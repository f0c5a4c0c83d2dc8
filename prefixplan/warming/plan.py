"""Warm plans: which prefixes to send, in which order, and what they cost.

Selection rules:

* ``top=N`` takes the N best-ranked candidates of an analysis record; ``keys`` takes the named
  ``name@vN`` keys (from the record, else from the store's stored token ids).
* Nesting: warming a prefix also caches every prefix of it, so of each chain of selected nested
  prefixes only the deepest is sent, once; the others are listed in its ``covers``.
* ``budget_bytes``: choose the ancestor-closed set of candidates that maximises reused tokens
  (the sum of ``marginal_tokens``, which never double-counts a parent) while the KV memory of the
  union of their tokens (``ceil(len/B)*B`` tokens per chain times KV bytes per token) fits. It is
  solved exactly as a tree knapsack over the candidates' nesting forest.
* Candidates whose token ids were withheld (privacy) and that no store lookup can supply are
  skipped with that reason, as are prefixes shorter than one cache block.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from prefixplan.analysis.record import CandidatePart, ExampleRef, TokenizerInfo
from prefixplan.errors import UsageError
from prefixplan.keys import parse_key_ref
from prefixplan.savings.prefill import PrefillProfile, load_profile, profile_json
from prefixplan.warming.prompts import PromptForm

DEFAULT_BLOCK_SIZE = 16
MAX_DP_UNITS = 200_000


@dataclass(frozen=True, slots=True)
class WarmItem:
    """One prefix to send to every replica."""

    rank: int
    name: str
    key: str | None  # "name@vN" when the prefix is a registered key
    version: int | None
    token_ids: tuple[int, ...] = field(repr=False)
    namespace: str | None = None
    model: str | None = None
    label: str | None = None
    token_hash: str | None = None
    covers: tuple[int, ...] = ()  # ranks of selected ancestors this item caches too
    value_tokens: int = 0  # reused tokens of the chain (sum of marginals of item + covers)
    form: PromptForm | None = field(default=None, repr=False)  # request form (recipes), for chat warming
    example: ExampleRef | None = field(default=None, repr=False)  # where a logged request is
    parts: tuple[CandidatePart, ...] = field(default=(), repr=False)  # the analysis record's parts

    @property
    def length(self) -> int:
        return len(self.token_ids)

    @property
    def record_key(self) -> str:
        """The store's ``key`` column: ``name@vN``, else ``name`` (unregistered candidate)."""
        return self.key or self.name

    def to_dict(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "name": self.name,
            "key": self.key,
            "version": self.version,
            "tokens": self.length,
            "namespace": self.namespace,
            "model": self.model,
            "label": self.label,
            "token_hash": self.token_hash,
            "covers": list(self.covers),
            "value_tokens": self.value_tokens,
            "form": self.form.mode if self.form else ("example" if self.example else None),
        }


@dataclass(frozen=True, slots=True)
class WarmPlan:
    """What ``warm`` will send; ``items`` in send order (most valuable first)."""

    items: tuple[WarmItem, ...]
    selected: tuple[int, ...]  # ranks selected, including covered ancestors
    skipped: tuple[tuple[int, str], ...] = ()  # (rank, reason)
    block_size: int = DEFAULT_BLOCK_SIZE
    tokenizer: TokenizerInfo | None = None
    budget_bytes: float | None = None
    kv_bytes_per_token: float | None = None
    memory_tokens: int = 0  # block-aligned tokens resident once all items are warm
    value_tokens: int = 0

    @property
    def memory_bytes(self) -> float | None:
        return self.memory_tokens * self.kv_bytes_per_token if self.kv_bytes_per_token else None

    def to_dict(self, profile: PrefillProfile | None = None) -> dict[str, Any]:
        profile = profile or load_profile(None)
        est = estimate_prefill(self, profile)
        return {
            "block_size": self.block_size,
            "items": [
                dict(item.to_dict(), est_prefill_s=round(t, 4)) for item, t in zip(self.items, est, strict=False)
            ],
            "selected": list(self.selected),
            "skipped": [{"rank": r, "reason": why} for r, why in self.skipped],
            "memory_tokens": self.memory_tokens,
            "memory_bytes": self.memory_bytes,
            "budget_bytes": self.budget_bytes,
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "value_tokens": self.value_tokens,
            "est_prefill_s": round(sum(est), 4),
            "profile": profile_json(profile),
        }


@dataclass(frozen=True, slots=True)
class WarmCandidate:
    """A prefix that may be warmed, from whichever source (analysis, store keys, recipes).

    ``value`` is what warming it saves (the analysis' marginal reusable tokens; 0 when unknown);
    ``parent`` the rank of the nesting parent; ``form`` the request form (recipes, chat warming);
    ``example``/``parts`` where an analysis candidate's representative request is, to rebuild its
    chat request; ``skip_reason`` why the source could not supply it.
    """

    rank: int
    name: str
    key: str | None
    token_ids: tuple[int, ...] | None = field(repr=False)
    length: int
    value: int = 0
    namespace: str | None = None
    model: str | None = None
    label: str | None = None
    token_hash: str | None = None
    parent: int | None = None
    form: PromptForm | None = field(default=None, repr=False)
    example: ExampleRef | None = field(default=None, repr=False)
    parts: tuple[CandidatePart, ...] = field(default=(), repr=False)
    skip_reason: str | None = None


@dataclass(frozen=True, slots=True)
class WarmSource:
    """What a plan is made from: candidates, the tokenizer their ids come from, the block size."""

    candidates: tuple[WarmCandidate, ...]
    tokenizer: TokenizerInfo | None = None
    block_size: int | None = None
    origin: str = "analysis"


def _parents(cands: dict[int, WarmCandidate]) -> dict[int, int | None]:
    """Nesting parent of each candidate: the record's ``parent`` when valid, else the longest
    other candidate whose ids are a proper prefix (same namespace)."""
    parents: dict[int, int | None] = {}
    by_len = sorted(cands.values(), key=lambda c: c.length)
    for c in cands.values():
        if c.parent is not None and c.parent in cands and c.parent != c.rank:
            parents[c.rank] = c.parent
            continue
        best: WarmCandidate | None = None
        if c.token_ids is not None:
            for d in by_len:
                if d.length >= c.length or d.token_ids is None or d.namespace != c.namespace:
                    continue
                if c.token_ids[: d.length] == d.token_ids and (best is None or d.length > best.length):
                    best = d
        parents[c.rank] = best.rank if best else None
    # Break any cycle a malformed record might contain.
    for start in list(parents):
        seen = {start}
        cur = parents[start]
        while cur is not None:
            if cur in seen:
                parents[start] = None
                break
            seen.add(cur)
            cur = parents.get(cur)
    return parents


def _parent_aligned(aligned: Mapping[int, int], parent: int | None) -> int:
    """Block-aligned length of a chain parent (0 for a root)."""
    return aligned[parent] if parent is not None else 0


def _ancestors(rank: int, parents: Mapping[int, int | None]) -> list[int]:
    out = []
    cur = parents.get(rank)
    while cur is not None:
        out.append(cur)
        cur = parents.get(cur)
    return out


def _aligned_up(n: int, block: int) -> int:
    return -(-n // block) * block


def select_within_budget(
    values: Mapping[int, int],
    costs: Mapping[int, int],
    parents: Mapping[int, int | None],
    capacity: int,
) -> set[int]:
    """Exact tree knapsack: the ancestor-closed subset maximising the sum of ``values`` with the
    sum of ``costs`` at most ``capacity`` (all integers >= 0).

    Nodes are visited in preorder; skipping a node skips its subtree, taking it continues into
    its children, so every chosen set is ancestor-closed. O(nodes * capacity), numpy rows.
    """
    import numpy as np

    nodes = sorted(values)
    children: dict[int | None, list[int]] = {}
    for n in nodes:
        p = parents.get(n)
        children.setdefault(p if p in values else None, []).append(n)
    order: list[int] = []
    end: dict[int, int] = {}

    def visit(n: int) -> None:
        order.append(n)
        for ch in sorted(children.get(n, [])):
            visit(ch)
        end[n] = len(order)

    for root in sorted(children.get(None, [])):
        visit(root)
    cap = max(0, int(capacity))
    n_order = len(order)
    neg = -(10**18)
    dp = np.zeros((n_order + 1, cap + 1), dtype=np.int64)
    take = np.zeros((n_order, cap + 1), dtype=bool)
    for i in range(n_order - 1, -1, -1):
        node = order[i]
        skip = dp[end[node]]
        cost = int(costs[node])
        with_node = np.full(cap + 1, neg, dtype=np.int64)
        if cost <= cap:
            with_node[cost:] = dp[i + 1][: cap + 1 - cost] + int(values[node])
        take[i] = with_node > skip
        dp[i] = np.where(take[i], with_node, skip)
    chosen: set[int] = set()
    i, w = 0, cap
    while i < n_order:
        node = order[i]
        if take[i, w]:
            chosen.add(node)
            w -= int(costs[node])
            i += 1
        else:
            i = end[node]
    return chosen


def plan_warm(
    source: WarmSource,
    top: int | None = None,
    *,
    keys: Sequence[str] | None = None,
    budget_gb: float | None = None,
    kv_bytes_per_token: float | None = None,
    block_size: int | None = None,
) -> WarmPlan:
    """Choose what to warm from ``source`` (selection rules in the module docstring).

    Args:
        source: the candidates (an analysis, registered keys or rendered recipes).
        top: take the ``top`` best-ranked candidates (None: all, or those named by ``keys``).
        keys: ``name@vN`` (or ``name``) keys to warm instead of a top-N.
        budget_gb: KV memory budget in GB (1e9 bytes); needs ``kv_bytes_per_token``.
        kv_bytes_per_token: KV bytes per token of the served model
            (:mod:`prefixplan.savings.kvsize`).
        block_size: cache block size for alignment and memory (default: the source's).

    Raises:
        UsageError: bad arguments, unknown keys, or a budget without KV bytes per token.
    """
    if top is not None and top < 1:
        raise UsageError(f"--top must be >= 1, got {top}")
    block = int(block_size or source.block_size or DEFAULT_BLOCK_SIZE)
    if block < 1:
        raise UsageError(f"block size must be >= 1, got {block}", hint="vLLM uses 16, SGLang 1 (its page size)")
    kv_bpt = kv_bytes_per_token
    all_cands = {c.rank: c for c in source.candidates}
    parents = _parents(all_cands)

    skipped: list[tuple[int, str]] = []
    if keys:
        pool: list[int] = []
        for k in keys:
            name, ver = parse_key_ref(k)
            hits = [
                c.rank
                for c in all_cands.values()
                if c.key == k
                or (c.key and ver is None and parse_key_ref(c.key)[0] == name)
                or (ver is None and c.name == name)
            ]
            if not hits:
                raise UsageError(f"key {k} is not in the analysis record", hint="see prefixplan keys list")
            pool.extend(hits[:1])
    else:
        ranked = sorted(all_cands)
        pool = ranked[:top] if top else ranked

    usable: list[int] = []
    for r in pool:
        c = all_cands[r]
        if c.skip_reason:
            skipped.append((r, c.skip_reason))
        elif c.token_ids is None:
            skipped.append((r, "token ids withheld (privacy) and not in the store"))
        elif c.length < block:
            skipped.append((r, f"shorter than one cache block ({c.length} < {block} tokens)"))
        else:
            usable.append(r)

    usable_set = set(usable)
    closure: set[int] = set(usable)
    for r in usable:
        closure.update(_ancestors(r, parents))

    def tree_parent(r: int) -> int | None:
        for a in _ancestors(r, parents):
            if a in closure:
                return a
        return None

    tparents = {r: tree_parent(r) for r in closure}
    aligned = {r: _aligned_up(all_cands[r].length, block) for r in closure}
    budget_bytes: float | None = None
    if budget_gb is not None:
        if budget_gb <= 0:
            raise UsageError(f"--budget must be > 0 GB, got {budget_gb}")
        if not kv_bpt:
            raise UsageError(
                "--budget needs the KV bytes per token",
                hint="pass --kv-bytes-per-token N (2 x layers x kv_heads x head_dim x dtype bytes) or --model-config",
            )
        budget_bytes = budget_gb * 1e9
        capacity_tokens = int(budget_bytes // float(kv_bpt))
        unit = block * max(1, math.ceil((capacity_tokens // block) / MAX_DP_UNITS))
        # An ancestor that is not usable itself (withheld ids, shorter than a block) is only
        # taken along with a usable descendant: it carries no value of its own.
        values = {r: max(0, all_cands[r].value) if r in usable_set else 0 for r in closure}
        costs = {r: -(-(aligned[r] - _parent_aligned(aligned, tparents.get(r))) // unit) for r in closure}
        chosen = select_within_budget(values, costs, tparents, capacity_tokens // unit)
        for r in sorted(usable_set - chosen):
            skipped.append((r, f"over the KV budget of {budget_gb:g} GB"))
        # keep what a chosen usable prefix needs: itself and the ancestors it covers
        selected = {a for r in chosen & usable_set for a in (r, *_ancestors(r, parents)) if a in chosen}
    else:
        selected = set(usable)

    # Deepest selected prefix of each chain: no selected descendant.
    has_child = {a for r in selected for a in _ancestors(r, parents) if a in selected}
    items: list[WarmItem] = []
    for r in sorted(selected):
        if r in has_child:
            continue
        c = all_cands[r]
        covers = tuple(sorted(a for a in _ancestors(r, parents) if a in selected))
        ids = c.token_ids
        assert ids is not None
        name, ver = parse_key_ref(c.key) if c.key else (c.name, None)
        items.append(
            WarmItem(
                rank=r,
                name=name,
                key=c.key,
                version=ver,
                token_ids=ids,
                namespace=c.namespace,
                model=c.model,
                label=c.label,
                token_hash=c.token_hash,
                covers=covers,
                value_tokens=sum(all_cands[x].value for x in (r, *_ancestors(r, parents)) if x in closure),
                form=c.form,
                example=c.example,
                parts=c.parts,
            )
        )
    chain_nodes = set(selected) | {a for r in selected for a in _ancestors(r, parents) if a in closure}
    memory_tokens = sum(aligned[r] - _parent_aligned(aligned, tparents.get(r)) for r in chain_nodes)
    return WarmPlan(
        items=tuple(items),
        selected=tuple(sorted(selected)),
        skipped=tuple(sorted(skipped)),
        block_size=block,
        tokenizer=source.tokenizer,
        budget_bytes=budget_bytes,
        kv_bytes_per_token=float(kv_bpt) if kv_bpt else None,
        memory_tokens=memory_tokens,
        value_tokens=sum(all_cands[r].value for r in chain_nodes),
    )


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def estimate_prefill(plan: WarmPlan, profile: PrefillProfile | None = None) -> list[float]:
    """Estimated prefill seconds of each item when sent in order on one cold replica
    (an item reuses the block-aligned prefix it shares with items sent before it)."""
    profile = profile or load_profile(None)
    out: list[float] = []
    sent: list[tuple[int, ...]] = []
    for item in plan.items:
        shared = max((_common_prefix(item.token_ids, s) for s in sent), default=0)
        cached = (shared // plan.block_size) * plan.block_size
        out.append(float(profile.seconds(item.length + 1 - cached, cached)))
        sent.append(item.token_ids)
    return out
