"""``prefixplan gateway``: the OpenAI-compatible proxy that serves ``prefix_key`` (docs/gateway.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from prefixplan.cli import options as o
from prefixplan.cli.help import PlainCommand

RecipesDir = Annotated[Optional[Path], o.RECIPES_OPTION]
LockFile = Annotated[Optional[Path], o.LOCK_OPTION]
RouterWeights = Annotated[
    Optional[str],
    typer.Option(
        "--router-weights",
        metavar="NAME=VALUE,...",
        help="Weights of --router residency: prefill (per uncached token, 1), request (per request in "
        "flight, 256), bytes_per_token (4).",
    ),
]
Rewarm = Annotated[
    str,
    typer.Option(
        "--rewarm",
        metavar="WHICH",
        help="Keys re-warmed when the KV events show them evicted: pinned (recipes with pin: true), all, off.",
    ),
]
RewarmPerMinute = Annotated[
    int, typer.Option("--rewarm-per-minute", metavar="N", help="At most N re-warms in any minute, fleet-wide.")
]


def register(app: typer.Typer) -> None:
    app.command("gateway", cls=PlainCommand)(gateway)


def gateway(
    endpoints_file: o.EndpointsFile = None,
    endpoint: o.Endpoint = None,
    api_key_env: o.ApiKeyEnv = None,
    host: o.Host = "127.0.0.1",
    port: o.Port = 8080,
    router: o.Router = "cache-aware",
    router_weights: RouterWeights = None,
    recipes: RecipesDir = None,
    lock: LockFile = None,
    db: o.Db = None,
    state: o.State = None,
    auto_version: o.AutoVersion = False,
    warm: o.Warm = True,
    tokenizer: o.Tokenizer = None,
    model: o.Model = None,
    timeout: o.Timeout = 300.0,
    retries: o.Retries = 2,
    max_body_bytes: o.MaxBodyBytes = 8 * 1024 * 1024,
    client_key_hash: o.ClientKeyHash = None,
    client_keys_env: o.ClientKeysEnv = None,
    tenants: o.Tenants = None,
    metrics_token_env: o.MetricsTokenEnv = None,
    header_timeout: o.HeaderTimeout = 10.0,
    body_timeout: o.BodyTimeout = 30.0,
    max_uploads: o.MaxUploads = 64,
    log_prompts: o.LogPrompts = False,
    rewarm: Rewarm = "pinned",
    rewarm_per_minute: RewarmPerMinute = 6,
) -> None:
    """Serve an OpenAI-compatible API in front of the replicas: prefix_key expansion and
    registration per tenant, cache-aware routing, two-phase warming, /metrics."""
    from prefixplan.api import GatewayRequest, run_gateway

    request = GatewayRequest(
        endpoints=tuple(endpoint or ()),
        endpoints_file=str(endpoints_file) if endpoints_file else None,
        api_key_env=api_key_env,
        host=host,
        port=port,
        router=router or "cache-aware",
        recipes=str(recipes) if recipes else None,
        lock=str(lock) if lock else None,
        db=str(db) if db else None,
        state=state,
        auto_version=auto_version,
        warm=warm,
        tokenizer=tokenizer,
        model=model,
        timeout=timeout,
        retries=retries,
        max_body_bytes=max_body_bytes,
        client_key_hashes=tuple(client_key_hash or ()),
        client_keys_env=client_keys_env,
        tenants=str(tenants) if tenants else None,
        metrics_token_env=metrics_token_env,
        header_timeout=header_timeout,
        body_timeout=body_timeout,
        max_uploads=max_uploads,
        log_prompts=log_prompts,
        rewarm=rewarm,
        rewarm_per_minute=rewarm_per_minute,
        router_weights=router_weights,
    )
    run_gateway(request)
