"""Run the gateway app on uvicorn (uvloop and httptools when installed)."""

from __future__ import annotations

import importlib.util
import logging
from typing import Any

from prefixplan.core.extras import require
from prefixplan.gateway.config import GatewayConfig


def uvicorn_config(app: Any, config: GatewayConfig, *, host: str, port: int, log_level: str = "warning") -> Any:
    """The uvicorn configuration of the gateway: uvloop and httptools when installed, the header
    timeout on every connection (:mod:`prefixplan.gateway.protocol`)."""
    import uvicorn

    from prefixplan.gateway.protocol import protocol_class

    loop = "uvloop" if importlib.util.find_spec("uvloop") else "asyncio"
    http = "httptools" if importlib.util.find_spec("httptools") else "h11"
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        loop=loop,
        http=protocol_class(http, config.header_timeout_s),
        log_level=log_level,
        access_log=False,
        timeout_graceful_shutdown=10,
        lifespan="on",
    )


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
    uvicorn.Server(uvicorn_config(create_app(config), config, host=host, port=port, log_level=log_level)).run()
