"""Run the gateway app on a real uvicorn server in a background thread (tests only)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def running_gateway(config: Any, **app_kwargs: Any) -> Iterator[tuple[str, Any]]:
    """Serve ``create_app(config)`` on 127.0.0.1 with the gateway's own uvicorn settings; yields (base
    URL, the app)."""
    import httpx
    import uvicorn

    from prefixplan.gateway.app import create_app
    from prefixplan.gateway.serve import uvicorn_config

    app = create_app(config, **app_kwargs)
    port = free_port()
    server = uvicorn.Server(uvicorn_config(app, config, host="127.0.0.1", port=port))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx.get(url + "/healthz", timeout=1).status_code == 200 and server.started:
                break
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("gateway did not start")
        time.sleep(0.05)
    try:
        yield url, app
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def gateway_of(app: Any) -> Any:
    """The running :class:`prefixplan.gateway.app.Gateway` of ``app``."""
    return app.state.holder["gateway"]


def wait_for(condition: Any, what: str = "", limit: float = 60.0) -> None:
    """Poll ``condition`` (never a fixed sleep): fail after ``limit`` seconds, a generous bound
    rather than a measure of speed."""
    deadline = time.monotonic() + limit
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or condition}")
        time.sleep(0.02)
