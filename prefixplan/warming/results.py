"""What a warm run reports: options, per-replica pre-flight, per-item results, the fleet verdict
per key, and the whole report (JSON and exit code).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from prefixplan.warming.plan import WarmPlan

STATUSES = ("verified", "unverified", "failed", "skipped")


@dataclass(frozen=True, slots=True)
class WarmOptions:
    """How to run a plan."""

    engine: str = "auto"
    concurrency: int = 8
    timeout: float = 30.0
    retries: int = 2
    backoff: float = 0.5
    model: str | None = None
    block_size: int | None = None  # override the server's
    priority: int | None = None  # SGLang --radix-eviction-policy priority
    verify: bool = True
    suffix_tokens: int = 2
    via: str = "auto"  # auto | ids | chat: how prefixes are sent (see run_warm)
    cache_salt: str | None = None  # sent with every warm and probe request (a tenant's salt)
    salt_field: str = "cache_salt"  # vLLM's field; SGLang reads extra_key


@dataclass(frozen=True, slots=True)
class ReplicaInfo:
    """Pre-flight result of one replica."""

    endpoint: str
    engine: str | None = None
    model: str | None = None
    block_size: int | None = None
    block_size_source: str | None = None
    tokenizer_check: str = "unchecked"  # match | mismatch | unchecked: why
    error: str | None = None


@dataclass(frozen=True, slots=True)
class ItemResult:
    """One prefix on one replica."""

    endpoint: str
    rank: int
    key: str
    version: int | None
    tokens: int
    expected_cached: int
    status: str  # verified | unverified | failed | skipped
    cold_ttft_s: float | None = None
    warm_ttft_s: float | None = None
    cached_tokens: int | None = None
    cached_at_warmup: int | None = None
    method: str | None = None  # usage | metrics
    error: str | None = None
    via: str | None = None  # ids (exact token ids) | chat (a request the server renders)

    def to_dict(self) -> dict[str, Any]:
        return {f: getattr(self, f) for f in self.__dataclass_fields__}


@dataclass(frozen=True, slots=True)
class KeyVerdict:
    """Fleet verdict of one prefix."""

    rank: int
    key: str
    tokens: int
    status: str  # ready | partial | failed
    verified: int
    replicas: int
    errors: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class WarmReport:
    """Everything a warm run did."""

    plan: WarmPlan
    replicas: tuple[ReplicaInfo, ...]
    results: tuple[ItemResult, ...]
    keys: tuple[KeyVerdict, ...]
    status: str  # ready | partial | failed
    exit_code: int
    duration_s: float
    started: float = field(default_factory=time.time)

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "exit_code": self.exit_code,
            "duration_s": round(self.duration_s, 3),
            "replicas": [{f: getattr(r, f) for f in r.__dataclass_fields__} for r in self.replicas],
            "keys": [
                {f: (list(v) if isinstance(v := getattr(k, f), tuple) else v) for f in k.__dataclass_fields__}
                for k in self.keys
            ],
            "results": [r.to_dict() for r in self.results],
            "plan": self.plan.to_dict(),
        }
