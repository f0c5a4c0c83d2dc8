"""URLs as shown to users: never with credentials."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit


def display_url(url: str) -> str:
    """``url`` without user info, query or fragment (they may carry credentials)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path.rstrip("/"), "", ""))


def redact(text: str, secret: str | None) -> str:
    """``text`` with every occurrence of ``secret`` replaced (servers may echo a key back)."""
    return text.replace(secret, "***") if secret else text
