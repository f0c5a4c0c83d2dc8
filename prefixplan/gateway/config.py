"""What ``prefixplan gateway`` is told: replicas, routing, keys, state, limits, client keys.

Client API keys are accepted as SHA-256 hashes (``--client-key-hash sha256:HEX``, safe to keep
in configuration) or read from an environment variable (``--client-keys-env NAME``, comma
separated) and hashed at start; the plain keys are never stored, printed or logged.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from prefixplan.engines.base import Endpoint
from prefixplan.errors import UsageError
from prefixplan.keys import DEFAULT_RETAIN_SECONDS
from prefixplan.simulation.router import RouterConfig

_HASH = re.compile(r"^sha256:[0-9a-f]{64}$")


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
    log_prompts: bool = False
    warm: bool = True  # warm new key versions in the background
    tokenizer: str | None = None  # renders prefixes for warming (default: vllm:<first replica>)
    model: str | None = None  # served model used by warming
    state_refresh_s: float = 1.0
    stats_interval_s: float = 5.0

    def __post_init__(self) -> None:
        if not self.endpoints:
            raise UsageError("the gateway needs replicas", hint="pass --endpoints FILE or --endpoint URL")
        if self.retries < 0 or self.max_body_bytes < 1 or self.timeout <= 0:
            raise UsageError("--retries must be >= 0, --max-body-bytes >= 1 and --timeout > 0")


def hash_client_key(key: str) -> str:
    """``sha256:<hex>`` of a client API key (what ``--client-key-hash`` takes)."""
    return "sha256:" + hashlib.sha256(key.encode("utf-8")).hexdigest()


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
