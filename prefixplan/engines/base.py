"""The engine adapter protocol, its records, and the HTTP plumbing every adapter shares.

Errors: every failure of a request becomes an :class:`EngineRequestError` (an
:class:`~prefixplan.errors.EndpointError`) whose message names the endpoint and the reason
(``connection refused``, ``timed out after 5s``, ``HTTP 500: ...``, ``malformed JSON``,
``ignored max_tokens``) and which says whether retrying can help.

Secrets: an API key is read from the environment variable named by
:attr:`Endpoint.api_key_env` when the client is built, sent only as a header, and redacted
from every message this module produces. It is never part of a record or a ``repr``.

Retrying is :mod:`prefixplan.engines.retries`; reading reported counts and the forms a secret
may come back in is :mod:`prefixplan.engines.fields`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from prefixplan.core.probe import TOKENIZER_PROBE_TEXT  # noqa: F401  (re-exported for adapters' callers)
from prefixplan.engines.endpoint import (
    CacheCounters,
    Completion,
    Endpoint,
    ServerInfo,
)
from prefixplan.engines.fields import optional_count, redact_forms, secret_forms
from prefixplan.errors import EndpointError

if TYPE_CHECKING:  # pragma: no cover
    import httpx

    from prefixplan.engines.metrics import Sample

MAX_BODY_BYTES = 32 * 2**20
"""Largest answer read from a server (a metrics page is ~1 MiB); more is refused, not buffered."""


class EngineRequestError(EndpointError):
    """A request to an engine failed; ``kind`` says how and ``retryable`` if trying again may help."""

    def __init__(
        self, endpoint: str, reason: str, *, kind: str, retryable: bool = False, status: int | None = None
    ) -> None:
        super().__init__(f"{endpoint}: {reason}")
        self.endpoint = endpoint
        self.reason = reason
        self.kind = kind  # refused | timeout | http | malformed | protocol | unsupported
        self.retryable = retryable
        self.status = status  # the HTTP status when kind == "http"


GENERATION_PATHS = frozenset({"/v1/completions", "/v1/chat/completions", "/generate"})


@dataclass
class _Stream:
    """Accumulates one streamed response."""

    first_at: float | None = None
    chunks: int = 0
    usage: dict[str, Any] = field(default_factory=dict)


class EngineAdapter:
    """Common base of the adapters: HTTP with named errors, secret redaction, streaming.

    Subclasses set :attr:`engine` and implement :meth:`server_info`, :meth:`complete_ids`,
    :meth:`tokenize_text` and :meth:`cache_counters`.
    """

    engine: ClassVar[str] = "base"

    def __init__(
        self,
        endpoint: Endpoint,
        *,
        timeout: float = 30.0,
        model: str | None = None,
        block_size: int | None = None,
        transport: httpx.BaseTransport | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        import httpx

        self.endpoint = endpoint
        self.clock = clock  # measures TTFT and deadlines; tests inject a virtual one
        self.timeout = float(timeout)
        self._model = model
        self._block_size_override = block_size
        self.body_fields: dict[str, Any] = {}  # added to every generation request (cache_salt)
        self._secret = endpoint.api_key()
        self._secret_forms = secret_forms(self._secret)
        headers = dict(endpoint.headers)
        if self._secret:
            headers["Authorization"] = f"Bearer {self._secret}"
        self._client = httpx.Client(
            base_url=endpoint.base_url,
            headers=headers,
            timeout=httpx.Timeout(self.timeout),
            verify=endpoint.verify_tls,
            transport=transport,
            follow_redirects=False,
        )
        self._info: ServerInfo | None = None

    # -- lifecycle ----------------------------------------------------------------------
    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> EngineAdapter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.endpoint.label!r})"

    # -- errors -------------------------------------------------------------------------
    def redact(self, text: str) -> str:
        """``text`` with every form of the credentials this adapter sends replaced by ``***``: the
        key itself, ``Bearer <key>``, and the base64 forms a server may echo back."""
        return redact_forms(text, self._secret_forms)

    def _clean(self, value: Any) -> Any:
        """A decoded server answer with every string redacted (model names, error bodies, ...)."""
        if not self._secret_forms:
            return value
        if isinstance(value, str):
            return self.redact(value)
        if isinstance(value, list):
            return [self._clean(v) for v in value]
        if isinstance(value, dict):
            return {self.redact(k) if isinstance(k, str) else k: self._clean(v) for k, v in value.items()}
        return value

    def _error(
        self, reason: str, *, kind: str, retryable: bool = False, status: int | None = None
    ) -> EngineRequestError:
        return EngineRequestError(
            self.endpoint.label, self.redact(reason), kind=kind, retryable=retryable, status=status
        )

    def _transport_error(self, exc: Exception, path: str) -> EngineRequestError:
        import httpx

        if isinstance(exc, httpx.ConnectError):
            text = str(exc).lower()
            reason = "connection refused" if "refused" in text or "errno 111" in text else f"cannot connect ({exc})"
            return self._error(f"{reason} ({path})", kind="refused", retryable=True)
        if isinstance(exc, httpx.TimeoutException):
            return self._error(f"timed out after {self.timeout:g}s ({path})", kind="timeout", retryable=True)
        if isinstance(exc, httpx.RemoteProtocolError):
            return self._error(f"connection closed mid-response ({path}): {exc}", kind="refused", retryable=True)
        return self._error(f"request failed ({path}): {type(exc).__name__}: {exc}", kind="refused", retryable=True)

    def _check_status(self, resp: httpx.Response, path: str) -> None:
        if 300 <= resp.status_code < 400:
            from prefixplan.core.urls import display_url

            where = resp.headers.get("location") or ""
            target = display_url(str(resp.url.join(where))) if where else "an unnamed location"
            raise self._error(
                f"HTTP {resp.status_code} from {path}: redirected to {self.redact(target)}; redirects are not "
                "followed (credentials would go to another host): give the final URL as the endpoint",
                kind="http",
                retryable=False,
                status=resp.status_code,
            )
        if resp.status_code < 400:
            return
        body = ""
        try:
            for chunk in resp.iter_bytes():
                body += chunk.decode("utf-8", "replace")
                if len(body) > 4096:
                    break
        except Exception:  # the status is the error; a broken body adds nothing
            pass
        body = " ".join(self.redact(body).split())[:200]
        retryable = resp.status_code >= 500 or resp.status_code == 429
        raise self._error(
            f"HTTP {resp.status_code} from {path}" + (f": {body}" if body else ""),
            kind="http",
            retryable=retryable,
            status=resp.status_code,
        )

    # -- requests -----------------------------------------------------------------------
    def _deadline(self) -> float:
        return self.clock() + self.timeout

    def _read_body(self, resp: httpx.Response, path: str, deadline: float) -> bytes:
        """The whole body, or an error when it takes longer than the request's deadline or grows
        past :data:`MAX_BODY_BYTES` (a server that trickles or never ends)."""
        chunks: list[bytes] = []
        size = 0
        for chunk in resp.iter_bytes():
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                raise self._error(
                    f"answer from {path} larger than {MAX_BODY_BYTES // 2**20} MiB (stopped reading)", kind="malformed"
                )
            chunks.append(chunk)
            if self.clock() > deadline:
                raise self._error(
                    f"timed out after {self.timeout:g}s ({path}, the answer was still arriving)",
                    kind="timeout",
                    retryable=True,
                )
        return b"".join(chunks)

    def _request_body(self, method: str, path: str, body: Mapping[str, Any] | None = None) -> bytes:
        import httpx

        deadline = self._deadline()
        body = self._with_fields(path, body)
        try:
            with self._client.stream(method, path, json=body) as resp:
                self._check_status(resp, path)
                return self._read_body(resp, path, deadline)
        except httpx.HTTPError as exc:
            raise self._transport_error(exc, path) from None

    def _with_fields(self, path: str, body: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
        """``body`` with :attr:`body_fields` when ``path`` generates (the engine's cache salt
        applies to what is computed, not to ``/tokenize``)."""
        if not self.body_fields or body is None or path not in GENERATION_PATHS:
            return body
        return {**body, **self.body_fields}

    def request_json(self, method: str, path: str, body: Mapping[str, Any] | None = None) -> Any:
        """One request whose answer must be JSON; failures become :class:`EngineRequestError`.
        The answer is bounded in time and size, and every credential form is redacted from it."""
        data = self._request_body(method, path, body)
        return self._clean(self._parse_json(data, path))

    def _parse_json(self, data: bytes | str, path: str) -> Any:
        try:
            return json.loads(data)
        except (json.JSONDecodeError, UnicodeDecodeError):
            text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
            snippet = " ".join(self.redact(text).split())[:80]
            raise self._error(f"malformed JSON from {path}: {snippet!r}", kind="malformed") from None
        except RecursionError:
            raise self._error(
                f"malformed JSON from {path}: nested deeper than any real answer", kind="malformed"
            ) from None

    def request_text(self, method: str, path: str) -> str:
        """One request whose answer is text (``/metrics``); bounded and redacted like JSON answers."""
        return self.redact(self._request_body(method, path).decode("utf-8", "replace"))

    def optional_json(self, method: str, path: str, body: Mapping[str, Any] | None = None) -> Any | None:
        """Like :meth:`request_json` but None for 404/405/501 (endpoint not offered)."""
        try:
            return self.request_json(method, path, body)
        except EngineRequestError as err:
            if err.kind == "http" and any(f"HTTP {c} " in err.reason for c in (404, 405, 501)):
                return None
            raise

    def stream_sse(
        self, path: str, body: Mapping[str, Any], on_event: Callable[[dict[str, Any], _Stream], None]
    ) -> tuple[_Stream, float]:
        """POST ``body`` and feed each ``data:`` JSON event to ``on_event``; bounded by the timeout.

        Returns the accumulated stream and the total time. ``on_event`` may raise to abort.
        """
        import httpx

        state = _Stream()
        t0 = self.clock()
        deadline = t0 + self.timeout
        body = self._with_fields(path, body) or body
        try:
            with self._client.stream("POST", path, json=body) as resp:
                self._check_status(resp, path)
                ctype = resp.headers.get("content-type", "")
                if "event-stream" not in ctype:
                    self._parse_json(self._read_body(resp, path, deadline), path)
                    raise self._error(
                        f"malformed answer from {path}: expected a server-sent event stream, got {ctype or 'no type'}",
                        kind="malformed",
                    )
                for line in self._guarded_lines(resp, path, deadline):
                    line = line.strip()
                    if not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    if data == "[DONE]":
                        break
                    event = self._clean(self._parse_json(data, path + " (stream)"))
                    if not isinstance(event, dict):
                        raise self._error(f"malformed stream event from {path}: {data[:80]!r}", kind="malformed")
                    if state.first_at is None:
                        state.first_at = self.clock() - t0
                    on_event(event, state)
        except httpx.HTTPError as exc:
            raise self._transport_error(exc, path) from None
        if state.first_at is None:
            raise self._error(f"malformed stream from {path}: no server-sent 'data:' events", kind="malformed")
        return state, self.clock() - t0

    def _guarded_lines(self, resp: httpx.Response, path: str, deadline: float) -> Iterator[str]:
        """Lines of a streamed answer, with the overall deadline checked on every chunk (not only
        between lines) and the total size capped."""
        pending = b""
        size = 0
        for chunk in resp.iter_bytes():
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                raise self._error(f"stream from {path} larger than {MAX_BODY_BYTES // 2**20} MiB", kind="malformed")
            if self.clock() > deadline:
                raise self._error(
                    f"timed out after {self.timeout:g}s ({path}, still streaming)", kind="timeout", retryable=True
                )
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                yield line.decode("utf-8", "replace")
        if pending:
            yield pending.decode("utf-8", "replace")

    # -- the protocol ---------------------------------------------------------------------
    def server_info(self, *, refresh: bool = False) -> ServerInfo:  # pragma: no cover - abstract
        raise NotImplementedError

    def complete_ids(
        self,
        ids: Sequence[int],
        *,
        max_tokens: int = 1,
        stream: bool = True,
        priority: int | None = None,
    ) -> Completion:  # pragma: no cover - abstract
        raise NotImplementedError

    def complete_text(self, prompt: str, *, max_tokens: int = 1, stream: bool = True) -> Completion:
        """A completion of a text prompt the server tokenizes (chat warming of plain prompts)."""
        raise self._error("text-prompt completions are not supported by this adapter", kind="unsupported")

    def complete_chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        max_tokens: int = 1,
        stream: bool = True,
    ) -> Completion:
        """A chat completion the server renders itself (warming through a chat request)."""
        raise self._error("chat completions are not supported by this adapter", kind="unsupported")

    def tokenize_text(self, text: str) -> list[int] | None:  # pragma: no cover - abstract
        raise NotImplementedError

    def cache_counters(self) -> CacheCounters | None:  # pragma: no cover - abstract
        raise NotImplementedError

    def metrics(self) -> list[Sample] | None:
        """Parsed ``/metrics``, or None when the server offers none."""
        from prefixplan.engines.metrics import parse_metrics

        try:
            text = self.request_text("GET", "/metrics")
        except EngineRequestError as err:
            if err.kind == "http":
                return None
            raise
        return parse_metrics(text)

    def reset_cache(self) -> bool:
        """Drop the server's prefix cache when it offers a way (vLLM dev mode, SGLang flush)."""
        return False

    def model_name(self) -> str | None:
        return self._model or self.server_info().model

    def completion(
        self,
        *,
        prompt: Any,
        cached: Any,
        completion: Any,
        ttft: float,
        total: float,
        streamed: bool,
        max_tokens: int,
        path: str,
    ) -> Completion:
        """A :class:`Completion` from the counts a server reported; implausible counts (not an
        integer, negative, 10**400) and more tokens than ``max_tokens`` are errors, said as such."""
        try:
            produced = optional_count(completion, "completion_tokens")
            result = Completion(
                prompt_tokens=optional_count(prompt, "prompt_tokens"),
                cached_tokens=optional_count(cached, "cached_tokens"),
                completion_tokens=produced,
                ttft_s=ttft,
                total_s=total,
                streamed=streamed,
            )
        except ValueError as exc:
            raise self._error(f"{exc} ({path})", kind="malformed") from None
        if produced is not None and produced > max_tokens:
            raise self._too_many_tokens(produced, max_tokens, path)
        return result

    def _too_many_tokens(self, produced: int, max_tokens: int, path: str) -> EngineRequestError:
        return self._error(f"ignored max_tokens={max_tokens} ({path} produced {produced} tokens)", kind="protocol")
