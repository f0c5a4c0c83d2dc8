"""Talking to the replicas: one pooled async httpx client per replica, usage parsing, retries.

A request is retried on another replica (at most ``retries`` times; a replica is tried again only
once every replica failed) when its replica refuses the connection, times out before answering,
or answers 5xx/429 before any byte was streamed to the client. Once streaming started the response is the client's,
whatever happens. API keys of replicas come from their ``api_key_env`` (never from files or
flags), are sent only in the ``Authorization`` header and never logged.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from prefixplan.engines.endpoint import Endpoint
from prefixplan.engines.fields import redact_forms, secret_forms

if TYPE_CHECKING:  # pragma: no cover
    import httpx

HOP_HEADERS = {"content-length", "transfer-encoding", "connection", "keep-alive", "content-encoding"}


@dataclass(frozen=True, slots=True)
class UpstreamFailure:
    """Why a replica could not serve a request (``retryable``: another replica may)."""

    kind: str  # refused | timeout | http_5xx | http_429
    detail: str
    retryable: bool = True


class Upstreams:
    """The replicas' HTTP clients (connection pools), created on the running event loop."""

    def __init__(self, endpoints: Sequence[Endpoint], *, timeout: float, connect_timeout: float = 5.0) -> None:
        import httpx

        self.endpoints = tuple(endpoints)
        self.labels = tuple(e.label for e in endpoints)
        # Idle connections are dropped before the engines' own keep-alive timeout (uvicorn: 5 s), so a
        # request is never written into a connection the server is closing.
        limits = httpx.Limits(max_connections=512, max_keepalive_connections=256, keepalive_expiry=4.0)
        self.clients: list[httpx.AsyncClient] = []
        self._headers: list[dict[str, str]] = []
        self._secrets: list[tuple[str, ...]] = []
        self._urls: dict[tuple[int, str], httpx.URL] = {}
        # A request built outside the client carries its timeout itself: httpx before 0.28 sends
        # such a request with no timeout at all (a slow replica was never abandoned).
        self._timeout = httpx.Timeout(timeout, connect=connect_timeout).as_dict()
        for e in endpoints:
            headers = dict(e.headers)
            secret = e.api_key()
            if secret:
                headers["Authorization"] = f"Bearer {secret}"
            self._headers.append(headers)
            self._secrets.append(secret_forms(secret))
            self.clients.append(
                httpx.AsyncClient(
                    base_url=e.base_url,
                    headers=headers,
                    timeout=httpx.Timeout(timeout, connect=connect_timeout),
                    verify=e.verify_tls,
                    limits=limits,
                    follow_redirects=False,
                )
            )

    async def aclose(self) -> None:
        for c in self.clients:
            await c.aclose()

    def build(self, replica: int, method: str, path: str, content: bytes | None) -> httpx.Request:
        """The request to ``replica`` (URL objects cached: merging URLs was a tenth of the CPU)."""
        import httpx

        url = self._urls.get((replica, path))
        if url is None:
            url = self._urls[(replica, path)] = httpx.URL(self.endpoints[replica].base_url + path)
        headers = dict(self._headers[replica])
        if content is not None:
            headers["content-type"] = "application/json"
        return httpx.Request(method, url, content=content, headers=headers, extensions={"timeout": self._timeout})

    def redact(self, replica: int, text: str) -> str:
        """``text`` (an error body, an exception's words) without any form of ``replica``'s key: a
        proxy in front of a replica may echo the ``Authorization`` header back."""
        return redact_forms(text, self._secrets[replica])

    def redactor(self, replica: int) -> Redactor:
        """A :class:`Redactor` of ``replica``'s key for one answer (body and headers)."""
        return Redactor(self._secrets[replica])

    async def send(self, replica: int, request: httpx.Request, *, stream: bool) -> httpx.Response | UpstreamFailure:
        """Send; a failure worth trying elsewhere comes back as :class:`UpstreamFailure` (the
        response is then closed). Any transport error counts (refused, reset, cut off, a proxy's
        error), including one while reading a 5xx answer's body."""
        import httpx

        try:
            resp = await self.clients[replica].send(request, stream=stream)
        except httpx.TimeoutException as err:
            return UpstreamFailure("timeout", f"timed out ({type(err).__name__})")
        except httpx.HTTPError as err:
            return UpstreamFailure("refused", self.redact(replica, f"{type(err).__name__}: {err}"))
        if resp.status_code >= 500 or resp.status_code == 429:
            kind = "http_429" if resp.status_code == 429 else "http_5xx"
            try:
                body = await resp.aread()
            except httpx.HTTPError as err:
                body = f"(body not read: {type(err).__name__})".encode()
            finally:
                await resp.aclose()
            # Redacted before it is cut to 200 characters: a key across the cut would leak its head.
            text = self.redact(replica, body[:65536].decode("utf-8", "replace"))[:200]
            return UpstreamFailure(kind, f"HTTP {resp.status_code}: {text}")
        return resp


class Redactor:
    """Replaces every form of a replica's key in what the replica answers, whatever the status:
    a whole body, or a stream chunk by chunk. A chunk's end that could be the start of a key is
    held back until the next chunk shows whether it is (usually nothing is held)."""

    def __init__(self, forms: Sequence[str]) -> None:
        self.forms = tuple(f.encode() for f in forms)
        self._tail = b""

    def body(self, data: bytes) -> bytes:
        for form in self.forms:
            if form in data:
                data = data.replace(form, b"***")
        return data

    def feed(self, chunk: bytes) -> bytes:
        if not self.forms:
            return chunk
        data = self.body(self._tail + chunk)
        hold = 0
        for form in self.forms:
            for k in range(min(len(form) - 1, len(data)), hold, -1):
                if data.endswith(form[:k]):
                    hold = k
                    break
        self._tail = data[len(data) - hold :] if hold else b""
        return data[: len(data) - hold] if hold else data

    def flush(self) -> bytes:
        out, self._tail = self._tail, b""
        return out

    def headers(self, headers: dict[str, str]) -> dict[str, str]:
        if not self.forms:
            return headers
        return {k: self.body(v.encode("latin-1", "replace")).decode("latin-1") for k, v in headers.items()}


def response_headers(resp: httpx.Response) -> dict[str, str]:
    """The replica's headers worth passing on (not hop-by-hop, not its length)."""
    return {k: v for k, v in resp.headers.items() if k.lower() not in HOP_HEADERS}


def usage_of(data: Any) -> tuple[int | None, int | None]:
    """``(prompt_tokens, cached_tokens)`` of a response's ``usage`` (None when absent)."""
    usage = data.get("usage") if isinstance(data, dict) else None
    if not isinstance(usage, dict):
        return None, None
    prompt = usage.get("prompt_tokens")
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    return (int(prompt) if isinstance(prompt, int) else None, int(cached) if isinstance(cached, int) else None)


class StreamUsage:
    """Finds the ``usage`` object in a server-sent event stream fed chunk by chunk."""

    def __init__(self) -> None:
        self._tail = b""
        self.prompt_tokens: int | None = None
        self.cached_tokens: int | None = None

    def feed(self, chunk: bytes) -> None:
        if b'"usage"' not in chunk and b"\n" in chunk and not self._tail:
            self._tail = chunk.rsplit(b"\n", 1)[1]
            return
        lines = (self._tail + chunk).split(b"\n")
        self._tail = lines.pop()[-65536:]
        for line in lines:
            if line.startswith(b"data:") and b'"usage"' in line:
                self._parse(line[5:].strip())

    def _parse(self, payload: bytes) -> None:
        import orjson

        try:
            prompt, cached = usage_of(orjson.loads(payload))
        except orjson.JSONDecodeError:
            return
        if prompt is not None:
            self.prompt_tokens, self.cached_tokens = prompt, cached
