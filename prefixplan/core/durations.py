"""Durations as users write them: ``90``, ``90s``, ``5m``, ``1h``, ``7d``, ``2w`` -> seconds.

One parser for keepalive intervals (``warm --every``), cache TTLs (``--cache-ttl``) and
retention periods (recipes' ``retain``); each caller states the smallest value it accepts.
"""

from __future__ import annotations

import math

from prefixplan.errors import UsageError

UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


def parse_seconds(text: str | float | int, *, minimum: float = 0.0, strict_minimum: bool = False) -> float:
    """Seconds for ``text``; ValueError (with the reason) when malformed, not finite or below
    ``minimum`` (``strict_minimum``: must be above it)."""
    if isinstance(text, bool):
        raise ValueError("expected a duration such as 90s, 5m, 1h or 7d")
    raw = str(text).strip().lower()
    mult = 1.0
    if raw and raw[-1] in UNITS:
        mult = UNITS[raw[-1]]
        raw = raw[:-1]
    try:
        value = float(raw) * mult
    except ValueError:
        raise ValueError(f"invalid duration {text!r}: use e.g. 90s, 5m, 1h or 7d") from None
    if not math.isfinite(value) or value < minimum or (strict_minimum and value == minimum):
        bound = ">" if strict_minimum else ">="
        raise ValueError(f"invalid duration {text!r}: must be finite and {bound} {minimum:g} seconds")
    return value


def parse_duration(text: str) -> float:
    """A command's duration option (``warm --every``/``--for``, ``status --window``): ``"90"``,
    ``"90s"``, ``"5m"``, ``"1h"`` -> seconds (> 0); a malformed one is a usage error."""
    try:
        return parse_seconds(text, strict_minimum=True)
    except ValueError as exc:
        raise UsageError(str(exc), hint="use e.g. 60s, 5m, 1h") from None
