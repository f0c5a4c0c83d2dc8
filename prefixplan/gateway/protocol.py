"""A bound on the time a connection may take to send a request's headers.

uvicorn closes a keep-alive connection that sends nothing, but a client that sends its headers a
byte at a time keeps a connection (and its buffers) forever. :func:`protocol_class` wraps
uvicorn's HTTP protocol (h11 or httptools) so that a connection with no request in progress --
new, or between two requests -- is closed when it has not completed a request's headers within
``header_timeout`` seconds. The body's time is bounded by the app (:mod:`prefixplan.gateway.bodies`).
"""

from __future__ import annotations

import asyncio
from typing import Any


def protocol_class(http: str, header_timeout: float) -> type[asyncio.Protocol]:
    """uvicorn's ``http`` protocol (``h11`` or ``httptools``) with the header timeout."""
    if http == "httptools":
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as base
    else:
        from uvicorn.protocols.http.h11_impl import H11Protocol as base  # type: ignore[assignment]
    step = min(1.0, header_timeout / 4)

    class HeaderTimeout(base):
        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._pp_seen: Any = None
            self._pp_since: float | None = self.loop.time()
            self._pp_timer = self.loop.call_later(step, self._pp_check)

        def _pp_check(self) -> None:
            if self.transport is None or self.transport.is_closing():
                return
            now = self.loop.time()
            cycle = self.cycle
            if cycle is not self._pp_seen:  # a request's headers arrived since the last look
                self._pp_seen = cycle
                self._pp_since = None
            if cycle is not None and not cycle.response_complete:
                self._pp_since = None  # a request in progress: its body and answer have their own bounds
            elif self._pp_since is None:
                self._pp_since = now  # waiting for the next request's headers from now on
            elif now - self._pp_since > header_timeout:
                self.transport.close()
                return
            self._pp_timer = self.loop.call_later(step, self._pp_check)

        def connection_lost(self, exc: Exception | None) -> None:
            timer = getattr(self, "_pp_timer", None)
            if timer is not None:
                timer.cancel()
            super().connection_lost(exc)

    HeaderTimeout.__name__ = f"HeaderTimeout{base.__name__}"
    return HeaderTimeout
