"""URLs as shown to users: never with credentials."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit


def display_url(url: str) -> str:
    """``url`` without user info, query or fragment (they may carry credentials). Never raises:
    a malformed port is shown as written."""
    parts = urlsplit(url)
    netloc = parts.netloc.rsplit("@", 1)[-1]  # drop user:password@
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))


def redact(text: str, secret: str | None) -> str:
    """``text`` with every occurrence of ``secret`` replaced (servers may echo a key back)."""
    return text.replace(secret, "***") if secret else text
