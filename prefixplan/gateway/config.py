"""What ``prefixplan gateway`` is told: replicas, routing, keys, state, limits, tenants.

Client API keys are accepted as SHA-256 hashes (``--client-key-hash sha256:HEX``, safe to keep
in configuration) or read from an environment variable (``--client-keys-env NAME``, comma
separated) and hashed at start, or come with their tenants from a tenants file (``--tenants``,
:mod:`prefixplan.gateway.tenants`); the plain keys are never stored, printed or logged.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from prefixplan.engines.endpoint import Endpoint
from prefixplan.errors import UsageError
from prefixplan.gateway.rewarm import RewarmConfig
from prefixplan.gateway.tenants import Tenancy, hash_client_key, tenancy_from_keys
from prefixplan.keys import DEFAULT_RETAIN_SECONDS
from prefixplan.residency.subscriber import EventSource
from prefixplan.routing.policies import RouterConfig

_HASH = re.compile(r"^sha256:[0-9a-f]{64}$")
__all__ = ["GatewayConfig", "client_key_hashes"]


@dataclass(frozen=True, slots=True)
class GatewayConfig:
    """Everything the gateway app needs (no secrets: only hashes and env var names)."""

    endpoints: tuple[Endpoint, ...]
    router: RouterConfig = field(default_factory=RouterConfig)
    recipes: str | None = None
    lock: str | None = None
    db: str | None = None
    state: str | None = None  # redis://... (None: the SQLite store)
    auto_version: bool = False
    retain_seconds: int = DEFAULT_RETAIN_SECONDS
    timeout: float = 300.0
    retries: int = 2
    max_body_bytes: int = 8 * 1024 * 1024
    client_key_hashes: frozenset[str] = frozenset()
    tenancy: Tenancy | None = None  # --tenants FILE (else each client key is its own tenant)
    metrics_token_hash: str | None = None  # /metrics needs this bearer token (sha256) when set
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    max_bodies_in_flight: int = 64
    log_prompts: bool = False
    warm: bool = True  # warm new key versions in the background
    tokenizer: str | None = None  # renders prefixes for warming (default: vllm:<first replica>)
    model: str | None = None  # served model used by warming
    state_refresh_s: float = 1.0
    stats_interval_s: float = 5.0
    kv_events: tuple[EventSource, ...] = ()  # replicas whose KV events the gateway follows
    rewarm: RewarmConfig = field(default_factory=RewarmConfig)

    def __post_init__(self) -> None:
        if not self.endpoints:
            raise UsageError("the gateway needs replicas", hint="pass --endpoints FILE or --endpoint URL")
        if self.retries < 0 or self.max_body_bytes < 1 or self.timeout <= 0:
            raise UsageError("--retries must be >= 0, --max-body-bytes >= 1 and --timeout > 0")
        if self.header_timeout_s <= 0 or self.body_timeout_s <= 0 or self.max_bodies_in_flight < 1:
            raise UsageError("--header-timeout and --body-timeout must be > 0, --max-uploads >= 1")
        if self.tenancy is not None and self.client_key_hashes:
            raise UsageError(
                "--tenants names every client key: --client-key-hash / --client-keys-env cannot be added to it"
            )

    @property
    def tenants(self) -> Tenancy:
        """Who the clients are: the tenants file, or one tenant per client key (none: open)."""
        return self.tenancy if self.tenancy is not None else tenancy_from_keys(self.client_key_hashes)


def metrics_token_hash(env: str | None) -> str | None:
    """The hash of the ``/metrics`` bearer token held in environment variable ``env``.

    Raises:
        UsageError: ``env`` named but unset.
    """
    if not env:
        return None
    value = os.environ.get(env)
    if not value:
        raise UsageError(f"environment variable {env} (--metrics-token-env) is not set or empty")
    return hash_client_key(value)


def client_key_hashes(hashes: Sequence[str] = (), env: str | None = None) -> frozenset[str]:
    """Accepted client key hashes: ``hashes`` plus the keys in environment variable ``env``.

    Raises:
        UsageError: a malformed hash, or ``env`` named but unset.
    """
    out = set()
    for h in hashes:
        if not _HASH.match(h):
            raise UsageError(f"--client-key-hash {h[:20]}...: expected sha256:<64 hex>")
        out.add(h)
    if env:
        value = os.environ.get(env)
        if not value:
            raise UsageError(f"environment variable {env} (--client-keys-env) is not set or empty")
        out.update(hash_client_key(k.strip()) for k in value.split(",") if k.strip())
    return frozenset(out)
