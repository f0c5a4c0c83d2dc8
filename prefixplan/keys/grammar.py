"""The key grammar: ``name@vN``, names, version references and the retention default.

Every place that reads a key goes through :func:`parse_key` (exactly ``name@vN``, N >= 1) or
:func:`parse_key_ref` (``name@vN`` or a bare ``name`` meaning "the active version"); nothing
else splits on ``@``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from prefixplan.errors import UsageError

DEFAULT_RETAIN_SECONDS = 7 * 86400
"""How long a superseded version stays valid unless a recipe says otherwise (7 days)."""

MAX_VERSION = 999_999_999
"""The highest version a key may have: ``name@vN`` takes at most nine digits after the ``v``."""
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_KEY_RE = re.compile(r"^(?P<name>[^@\s]+)@v(?P<version>[1-9][0-9]{0,8})$")
_NAME_HINT = "names use letters, digits, '.', '_' and '-' and start with a letter or digit"


@dataclass(frozen=True, slots=True, order=True)
class CacheKey:
    """A versioned cache key ``name@vN``."""

    name: str
    version: int

    def __post_init__(self) -> None:
        if not NAME_RE.match(self.name):
            raise UsageError(
                f"invalid key name {self.name!r}",
                hint=_NAME_HINT,
            )
        if not isinstance(self.version, int) or isinstance(self.version, bool) or not 1 <= self.version <= MAX_VERSION:
            raise UsageError(
                f"invalid version {self.version!r} for {self.name}: must be an integer from 1 to {MAX_VERSION}"
            )

    def __str__(self) -> str:
        return f"{self.name}@v{self.version}"

    @classmethod
    def parse(cls, text: str) -> CacheKey:
        """Parse ``"name@vN"``; raises :class:`UsageError` on any other form."""
        return parse_key(text)


def parse_key(text: str) -> CacheKey:
    """Parse ``"support-bot@v3"`` into ``CacheKey("support-bot", 3)``.

    Raises:
        UsageError: when ``text`` is not of the form ``name@vN`` (N >= 1).
    """
    m = _KEY_RE.match(text.strip()) if isinstance(text, str) else None
    if not m:
        raise UsageError(f"invalid cache key {text!r}", hint="expected name@vN, e.g. support-bot@v3")
    return CacheKey(m.group("name"), int(m.group("version")))


def parse_key_ref(text: str) -> tuple[str, int | None]:
    """``"support-bot@v3"`` -> ``("support-bot", 3)``; ``"support-bot"`` -> ``("support-bot", None)``.

    Raises:
        UsageError: ``text`` is neither a valid name nor ``name@vN`` (``x@v0``, ``x@3`` and
            ``x@`` are refused, like every other malformed key).
    """
    if not isinstance(text, str):
        raise UsageError(f"invalid cache key {text!r}", hint="expected name or name@vN, e.g. support-bot@v3")
    stripped = text.strip()
    if "@" in stripped:
        key = parse_key(stripped)
        return key.name, key.version
    if not NAME_RE.match(stripped):
        raise UsageError(f"invalid key name {text!r}", hint=_NAME_HINT)
    return stripped, None
