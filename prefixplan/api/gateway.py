"""``prefixplan gateway`` as one call: :class:`GatewayRequest` in, the OpenAI-compatible proxy
served until interrupted (docs/gateway.md); :func:`gateway_config` is the configuration it serves."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from prefixplan.gateway.config import GatewayConfig


@dataclass(frozen=True)
class GatewayRequest:
    """What ``prefixplan gateway`` is asked, as given: the replicas (URLs, or an endpoints file),
    where to listen, the routing policy, the recipes and lock (None: ``recipes/`` when it and the
    lock file exist), the store and shared state, warming, limits, and who the clients are (key
    hashes, an environment variable of keys, or a tenants file). Secrets are named, never held:
    ``*_env`` are environment variable names."""

    endpoints: tuple[str, ...] = ()
    endpoints_file: str | None = None
    api_key_env: str | None = None
    host: str = "127.0.0.1"
    port: int = 8080
    router: str = "cache-aware"
    recipes: str | None = None
    lock: str | None = None
    db: str | None = None
    state: str | None = None
    auto_version: bool = False
    warm: bool = True
    tokenizer: str | None = None
    model: str | None = None
    timeout: float = 300.0
    retries: int = 2
    max_body_bytes: int = 8 * 1024 * 1024
    client_key_hashes: tuple[str, ...] = ()
    client_keys_env: str | None = None
    tenants: str | None = None
    metrics_token_env: str | None = None
    header_timeout: float = 10.0
    body_timeout: float = 30.0
    max_uploads: int = 64
    log_prompts: bool = False
    rewarm: str = "pinned"
    rewarm_per_minute: int = 6
    router_weights: str | None = None
    log_level: str = "info"


def gateway_config(request: GatewayRequest) -> GatewayConfig:
    """The gateway's configuration for ``request``: replicas read, client keys hashed, the tenants
    file loaded, the ``/metrics`` token hashed.

    Raises:
        UsageError: no replica, a bad endpoints or tenants file, a missing environment variable,
            or limits out of range.
    """
    from pathlib import Path

    from prefixplan.gateway.config import GatewayConfig, client_key_hashes, metrics_token_hash
    from prefixplan.gateway.events import event_sources
    from prefixplan.gateway.rewarm import RewarmConfig
    from prefixplan.gateway.tenants import load_tenancy
    from prefixplan.routing.policies import RouterConfig, parse_weights
    from prefixplan.warming.source import endpoints_from_options

    recipes = request.recipes
    if recipes is None and Path("recipes").is_dir() and Path(request.lock or "prefixplan.lock").is_file():
        recipes = "recipes"
    endpoints = tuple(endpoints_from_options(request.endpoints, request.endpoints_file, request.api_key_env))
    sources = event_sources(request.endpoints_file, endpoints, request.model) if request.endpoints_file else ()
    weights: dict[str, Any] = dict(parse_weights(request.router_weights))  # floats, by field name
    return GatewayConfig(
        endpoints=endpoints,
        router=RouterConfig(policy=request.router or "cache-aware", **weights),
        kv_events=sources,
        rewarm=RewarmConfig(keys=request.rewarm, per_minute=request.rewarm_per_minute),
        recipes=recipes,
        lock=request.lock,
        db=request.db,
        state=request.state,
        auto_version=request.auto_version,
        warm=request.warm,
        tokenizer=request.tokenizer,
        model=request.model,
        timeout=request.timeout,
        retries=request.retries,
        max_body_bytes=request.max_body_bytes,
        client_key_hashes=client_key_hashes(request.client_key_hashes, request.client_keys_env),
        tenancy=load_tenancy(request.tenants) if request.tenants else None,
        metrics_token_hash=metrics_token_hash(request.metrics_token_env),
        header_timeout_s=request.header_timeout,
        body_timeout_s=request.body_timeout,
        max_bodies_in_flight=request.max_uploads,
        log_prompts=request.log_prompts,
    )


def run_gateway(request: GatewayRequest) -> None:
    """The ``prefixplan gateway`` command as one call: serve :func:`gateway_config` on
    ``request.host``:``request.port`` until interrupted (SIGINT/SIGTERM stop it cleanly).

    Raises:
        UsageError: see :func:`gateway_config`; or the ``gateway`` extra is not installed.
    """
    from prefixplan.gateway.serve import serve

    serve(gateway_config(request), host=request.host, port=request.port, log_level=request.log_level)
