"""A replica as prefixplan knows it (:class:`Endpoint`: URL, headers, the *name* of its key's
environment variable) and what it answers (:class:`ServerInfo`, :class:`Completion`,
:class:`CacheCounters`)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from prefixplan.core.probe import TOKENIZER_PROBE_TEXT  # noqa: F401  (re-exported for adapters' callers)
from prefixplan.core.urls import display_url
from prefixplan.errors import UsageError

DEFAULT_API_KEY_ENV = "PREFIXPLAN_API_KEY"


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One replica: its URL and how to talk to it. Holds the *name* of the key's env var only."""

    url: str
    headers: tuple[tuple[str, str], ...] = ()
    api_key_env: str | None = None
    verify_tls: bool | str = True
    name: str | None = None

    def __post_init__(self) -> None:
        parts = urlsplit(self.url)
        try:
            port = parts.port
        except ValueError:
            raise UsageError(f"invalid endpoint URL {display_url(self.url)!r}: the port must be 1-65535") from None
        if parts.scheme not in ("http", "https") or not parts.hostname or port == 0:
            raise UsageError(f"invalid endpoint URL {display_url(self.url)!r}: expected http(s)://host[:port]")
        if parts.username is not None or parts.password is not None:
            raise UsageError(
                f"endpoint URL {display_url(self.url)} carries credentials (user:password@)",
                hint="put the key in an environment variable and name it with --api-key-env / api_key_env",
            )

    @property
    def label(self) -> str:
        """What messages and the store call this replica (never contains credentials)."""
        return self.name or display_url(self.url)

    @property
    def base_url(self) -> str:
        parts = urlsplit(self.url)
        return urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))

    def api_key(self) -> str | None:
        env = self.api_key_env or DEFAULT_API_KEY_ENV
        value = os.environ.get(env)
        if self.api_key_env and not value:
            raise UsageError(f"environment variable {self.api_key_env} (--api-key-env) is not set or empty")
        return value or None


@dataclass(frozen=True, slots=True)
class ServerInfo:
    """What an engine says about itself."""

    engine: str  # vllm | sglang | openai-compatible
    model: str | None  # served model name used in requests
    models: tuple[str, ...] = ()
    block_size: int | None = None
    block_size_source: str = "unknown"  # metrics | server_info | option | unknown
    max_model_len: int | None = None
    kv_bytes_per_token: float | None = None
    version: str | None = None


@dataclass(frozen=True, slots=True)
class Completion:
    """The result of one completion request (warm-up, probe or calibration sample)."""

    prompt_tokens: int | None
    cached_tokens: int | None  # None: the server did not report it
    completion_tokens: int | None
    ttft_s: float  # time to the first streamed token (== total for non-streaming)
    total_s: float
    streamed: bool = False


@dataclass(frozen=True, slots=True)
class CacheCounters:
    """Prefix-cache counters from ``/metrics`` (tokens), and requests running/waiting if known."""

    hits: float
    queries: float | None
    running: float | None = None
    waiting: float | None = None
