"""What isolation costs (``simulate --isolate-by tenant``): the engines' ``cache_salt`` per tenant.

vLLM and SGLang take a per-request ``cache_salt`` into the first block's key: requests with
different salts share no block. Three runs of the headline cache model (same policy, capacity
and TTL) over the same rows:

* **shared**: as the log is (no salt): the simulation's headline run;
* **salted**: every block key of a request mixed with its tenant's salt, so only requests of one
  tenant share (requests without a tenant form one group);
* **salt after the shared prefix**: keys of the blocks that lie inside the request's leading
  system / tool prefix stay unsalted, the rest is salted: what a salt boundary placed after the
  shared, non-user-authored prefix would give.

Which part of a prompt is safe to share comes from the span kinds of the trace: the leading run
of ``template``, ``system`` and ``tool`` segments (up to the first user, assistant, tool-result or
raw segment) holds nothing a user wrote. The leading prefixes shared by two or more tenants are
listed with their tokens, requests and tenants.

Salting a block key is a bijection of (key, salt) (a 64-bit mix), so a salted replay equals a
replay of the tokens with a per-tenant salt block in front (tested), without rendering again.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from prefixplan.core.types import SEGMENT_KINDS
from prefixplan.simulation.batch import service_times
from prefixplan.simulation.fleet import simulate_fleet
from prefixplan.simulation.models import run_model
from prefixplan.simulation.replay import default_priorities, policy_spec
from prefixplan.simulation.spec import CacheSpec, parse_ttl
from prefixplan.trace.blocks import TraceBuilder
from prefixplan.trace.requests import request_of_row

if TYPE_CHECKING:
    from collections.abc import Sequence

    from prefixplan.core.granularity import Granularity
    from prefixplan.simulation.config import SimConfig
    from prefixplan.simulation.fleet import FleetModel, FleetRequest
    from prefixplan.simulation.result import SimResult
    from prefixplan.trace.blocks import BlockTrace
    from prefixplan.trace.rows import TraceRow

SAFE_KINDS = frozenset(SEGMENT_KINDS.index(k) for k in ("template", "system", "tool"))
"""Span kinds nobody's user wrote: chat-template tokens, system prompts, tool schemas."""
NAMED_KINDS = frozenset(SEGMENT_KINDS.index(k) for k in ("system", "tool"))
TENANT_FIELD = "the log's tenant id (tenant, tenant_id, user, user_id or metadata.user_id)"
TOP_PREFIXES = 10
_C1 = np.uint64(0xBF58476D1CE4E5B9)
_C2 = np.uint64(0x94D049BB133111EB)


def salt_of(tenant: str | None) -> np.uint64:
    """A tenant's 64-bit salt (requests without a tenant share one)."""
    digest = hashlib.blake2b(b"cache_salt\0" + (tenant or "").encode(), digest_size=8).digest()
    return np.uint64(int.from_bytes(digest, "little"))


def salted_keys(keys: np.ndarray, salt: np.uint64) -> np.ndarray:
    """Block keys mixed with ``salt``: a bijection for a given salt; odd, as every block key."""
    with np.errstate(over="ignore"):
        z = np.asarray(keys, dtype=np.uint64) ^ salt
        z = (z ^ (z >> np.uint64(30))) * _C1
        z = (z ^ (z >> np.uint64(27))) * _C2
        return (z ^ (z >> np.uint64(31))) | np.uint64(1)


def safe_prefix(row: TraceRow) -> tuple[int, tuple[int, ...], str]:
    """(tokens, identity, label) of the row's leading template / system / tool spans."""
    end, ids, tools, system = 0, [], 0, False
    for kind, stop, h in zip(row.seg_kind.tolist(), row.seg_end.tolist(), row.seg_hash.tolist(), strict=True):
        if kind not in SAFE_KINDS:
            break
        end = int(stop)
        if kind in NAMED_KINDS:
            ids.append(int(h))
            system = system or SEGMENT_KINDS[kind] == "system"
            tools += SEGMENT_KINDS[kind] == "tool"
    parts = (["system"] if system else []) + ([f"{tools} tool{'s' if tools != 1 else ''}"] if tools else [])
    return end * max(1, int(row.token_scale)), tuple(ids), " + ".join(parts)


@dataclass(frozen=True, slots=True)
class FleetInputs:
    """What the fleet run of a simulation took: its model, the routing input of every request in
    input order, and the service times (trace order)."""

    model: FleetModel
    requests: Sequence[FleetRequest]
    service_s: np.ndarray | None


@dataclass
class _Prefix:
    label: str
    ident: str  # 8 hex digits of the spans' text hashes
    tokens: int
    requests: int
    tenants: set[str | None]


class IsolationTraces:
    """Two block traces fed beside a simulation's: keys salted per tenant, and salted only after
    the leading system / tool prefix; plus which such prefixes tenants share."""

    def __init__(self, granularity: Granularity) -> None:
        self.salted = TraceBuilder(granularity, index_singletons=False)
        self.boundary = TraceBuilder(granularity, index_singletons=False)
        self.prefixes: dict[tuple[str, tuple[int, ...]], _Prefix] = {}
        self.tenants: set[str] = set()
        self.without_tenant = 0

    def add_row(self, row: TraceRow) -> None:
        req = request_of_row(row)
        salt = salt_of(row.tenant)
        if row.tenant is None:
            self.without_tenant += 1
        else:
            self.tenants.add(row.tenant)
        keys = np.asarray(req.block_keys, dtype=np.uint64)
        mixed = salted_keys(keys, salt)
        safe, ident, label = safe_prefix(row)
        ends = (np.arange(keys.shape[0], dtype=np.int64) + 1) * max(1, int(req.keys_units)) * max(1, req.block_scale)
        self.salted.add(replace(req, block_keys=mixed))
        self.boundary.add(replace(req, block_keys=np.where(ends <= safe, keys, mixed)))
        if ident:
            entry = self.prefixes.setdefault((row.namespace, ident), _Prefix(label, _ident(ident), safe, 0, set()))
            entry.requests += 1
            entry.tenants.add(row.tenant)

    def result(self, config: SimConfig, result: SimResult, by: str, fleet: FleetInputs | None = None) -> dict[str, Any]:
        """The isolation section of the result (module docstring)."""
        head = result.run(result.headline)
        ttl = parse_ttl(config.cache.ttl)
        if head.capacity_tokens is None:
            spec = CacheSpec("lru", ttl_s=ttl)
        else:
            spec = replace(policy_spec(config, head.policy, head.capacity_tokens, ttl), pins=())
        salted_trace, boundary_trace = self.salted.finish(), self.boundary.finish()
        salted = _hits(salted_trace, spec, config, head.policy)
        boundary = _hits(boundary_trace, spec, config, head.policy)
        shared = head.hit_tokens
        total = head.prompt_tokens

        def rate(x: int) -> float:
            return x / total if total else 0.0

        prefixes = sorted(
            (p for p in self.prefixes.values() if len(p.tenants) > 1),
            key=lambda p: (-p.tokens * (p.requests - 1), -p.tokens),
        )
        return {
            "by": by,
            "field": TENANT_FIELD if by in ("user", "tenant") else f"the log record's {by}",
            "run": head.label,
            "tenants": len(self.tenants),
            "requests_without_tenant": self.without_tenant,
            "prompt_tokens": total,
            "hit_tokens": {"shared": shared, "salted": salted, "salt_after_shared_prefix": boundary},
            "hit_rate_tokens": {
                "shared": rate(shared),
                "salted": rate(salted),
                "salt_after_shared_prefix": rate(boundary),
            },
            "isolation_cost_tokens": shared - salted,
            "salt_boundary_returns_tokens": boundary - salted,
            "cross_tenant_beyond_prefix_tokens": shared - boundary,
            "shared_prefixes": [
                {
                    "label": p.label,
                    "id": p.ident,
                    "tokens": p.tokens,
                    "requests": p.requests,
                    "tenants": len(p.tenants),
                    "safe": True,
                }
                for p in prefixes[:TOP_PREFIXES]
            ],
            "shared_prefixes_total": len(prefixes),
            **({"fleet": _fleet(result, fleet, salted_trace, boundary_trace)} if fleet and result.fleet else {}),
        }


def _fleet(result: SimResult, fleet: FleetInputs, salted: BlockTrace, boundary: BlockTrace) -> dict[str, Any]:
    """The three hit counts on the fleet under its first router: each replica's cache keyed with
    the salt; the router routes on the prompt as logged (it does not see the salt)."""
    first = result.fleet[0]
    model = replace(fleet.model, routers=(first.policy,))

    def hits(trace: BlockTrace) -> int:
        rows = [fleet.requests[i] for i in trace.order.tolist()]
        service = fleet.service_s if fleet.service_s is not None else np.zeros(trace.n_requests)
        return int(simulate_fleet(trace, rows, model, service)[0].cached_tokens)

    return {
        "router": first.policy,
        "replicas": first.replicas,
        "hit_tokens": {
            "shared": first.cached_tokens,
            "salted": hits(salted),
            "salt_after_shared_prefix": hits(boundary),
        },
    }


def _ident(hashes: tuple[int, ...]) -> str:
    data = b"".join(h.to_bytes(8, "little") for h in hashes)
    return hashlib.blake2b(data, digest_size=4).hexdigest()


def _hits(trace: BlockTrace, spec: CacheSpec, config: SimConfig, policy: str) -> int:
    work = config.workload
    service = (
        service_times(trace, work.batch_window, work.prefill_tps, work.decode_tps, work.default_output)
        if spec.ttl_s is not None
        else None
    )
    prios = default_priorities(trace, config) if policy == "priority" else None
    out = run_model(trace, spec, priorities=prios, service_s=service)
    return int((out.hit_blocks * trace.block_tokens).sum())
