"""URLs as shown to users: never with credentials."""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

_AUTHORITY_END = re.compile(r"[/?#]")


def display_url(url: str) -> str:
    """``url`` without user info, query or fragment (they may carry credentials). Never raises:
    a malformed port is shown as written."""
    parts = urlsplit(url)
    netloc = parts.netloc.rsplit("@", 1)[-1]  # drop user:password@
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))


def redact(text: str, secret: str | None) -> str:
    """``text`` with every occurrence of ``secret`` replaced (servers may echo a key back)."""
    return text.replace(secret, "***") if secret else text


def _authority(url: str) -> tuple[str, str, str]:
    """``(scheme://, authority, rest)`` of ``url``, with or without its scheme."""
    head, sep, tail = url.partition("://")
    prefix, rest = (head + sep, tail) if sep else ("", url)
    m = _AUTHORITY_END.search(rest)
    cut = m.start() if m else len(rest)
    return prefix, rest[:cut], rest[cut:]


def has_userinfo(url: str) -> bool:
    """True when ``url`` (with or without its scheme) names a user or password before its host."""
    return "@" in _authority(url)[1]


def without_userinfo(url: str) -> str:
    """``url`` with any ``user:password@`` removed, query and fragment too (never raises)."""
    prefix, authority, rest = _authority(url)
    rest = re.split(r"[?#]", rest, maxsplit=1)[0]
    return prefix + authority.rsplit("@", 1)[-1] + rest
