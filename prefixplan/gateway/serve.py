"""Run the gateway app on uvicorn (uvloop and httptools when installed)."""

from __future__ import annotations

import importlib.util
import logging

from prefixplan.core.extras import require
from prefixplan.gateway.config import GatewayConfig


def serve(config: GatewayConfig, *, host: str = "127.0.0.1", port: int = 8080, log_level: str = "warning") -> None:
    """Serve until interrupted (SIGINT/SIGTERM stop it cleanly: counters are flushed).

    Raises:
        UsageError: the ``gateway`` extra is not installed.
    """
    for module in ("starlette", "uvicorn", "prometheus_client", "orjson"):
        require(module, "gateway")
    import uvicorn

    from prefixplan.gateway.app import create_app

    for noisy in ("httpx", "httpcore"):  # one line per forwarded request otherwise
        logging.getLogger(noisy).setLevel(logging.WARNING)
    logging.basicConfig(
        level=getattr(logging, log_level.upper(), logging.WARNING), format="%(levelname)s %(name)s: %(message)s"
    )
    loop = "uvloop" if importlib.util.find_spec("uvloop") else "asyncio"
    http = "httptools" if importlib.util.find_spec("httptools") else "h11"
    uvicorn.run(
        create_app(config),
        host=host,
        port=port,
        loop=loop,
        http=http,
        log_level=log_level,
        access_log=False,
        timeout_graceful_shutdown=10,
    )


def run_gateway(
    *,
    endpoints: list[str],
    endpoints_file: str | None = None,
    api_key_env: str | None = None,
    host: str = "127.0.0.1",
    port: int = 8080,
    router: str = "cache-aware",
    recipes: str | None = None,
    lock: str | None = None,
    db: str | None = None,
    state: str | None = None,
    auto_version: bool = False,
    warm: bool = True,
    tokenizer: str | None = None,
    model: str | None = None,
    timeout: float = 300.0,
    retries: int = 2,
    max_body_bytes: int = 8 * 1024 * 1024,
    client_key_hashes: list[str] | None = None,
    client_keys_env: str | None = None,
    log_prompts: bool = False,
) -> None:
    """``prefixplan gateway``: build the configuration from option values and serve.

    ``recipes``/``lock`` default to ``./recipes`` and ``./prefixplan.lock`` when both exist.
    """
    from pathlib import Path

    from prefixplan.gateway.config import client_key_hashes as hashes
    from prefixplan.simulation.router import RouterConfig
    from prefixplan.warming.source import endpoints_from_options

    if recipes is None and Path("recipes").is_dir() and Path(lock or "prefixplan.lock").is_file():
        recipes = "recipes"
    config = GatewayConfig(
        endpoints=tuple(endpoints_from_options(endpoints, endpoints_file, api_key_env)),
        router=RouterConfig(policy=router),
        recipes=recipes,
        lock=lock,
        db=db,
        state=state,
        auto_version=auto_version,
        warm=warm,
        tokenizer=tokenizer,
        model=model,
        timeout=timeout,
        retries=retries,
        max_body_bytes=max_body_bytes,
        client_key_hashes=hashes(client_key_hashes or [], client_keys_env),
        log_prompts=log_prompts,
    )
    serve(config, host=host, port=port, log_level="info")
