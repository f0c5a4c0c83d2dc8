"""Capacities as users write them: tokens (``1e6``) or bytes (``40GB``, ``200GiB``) with a KV size,
and lower tiers (``cpu:200GB:25:0.5``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from prefixplan.errors import UsageError
from prefixplan.savings.kvsize import KVShape
from prefixplan.simulation.spec import Tier

if TYPE_CHECKING:
    pass


def tokens_from_bytes(capacity_bytes: float, kv: KVShape) -> float:
    """Capacity in tokens for a KV memory budget in bytes."""
    return float(capacity_bytes) / kv.bytes_per_token


_BYTE_UNITS = {"kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def parse_capacity(text: str, kv: KVShape | None) -> float:
    """``1e6`` / ``250000`` tokens, or ``40GB`` / ``40GiB`` / ``2TB`` bytes (needs a KV size)."""
    raw = text.strip().lower().replace("_", "")
    for unit in sorted(_BYTE_UNITS, key=len, reverse=True):
        if raw.endswith(unit):
            if kv is None:
                raise UsageError(
                    f"capacity {text!r} is in bytes but the KV size is unknown",
                    hint="pass --model NAME (built-in table) or --model-config config.json",
                )
            try:
                return tokens_from_bytes(float(raw[: -len(unit)]) * _BYTE_UNITS[unit], kv)
            except ValueError:
                break
    try:
        value = float(raw.removesuffix("tok").removesuffix("tokens"))
    except ValueError:
        raise UsageError(f"bad capacity {text!r}", hint="tokens (1e6) or bytes (40GB, 200GiB)") from None
    if value < 0:
        raise UsageError(f"capacity must be >= 0, got {text!r}")
    return value


def parse_tier(text: str, kv: KVShape | None) -> Tier:
    """``NAME:CAPACITY[:GBps[:latency_ms]]``, e.g. ``cpu:200GB:25:0.5`` or ``disk:2TB:3:2``."""
    parts = text.split(":")
    if len(parts) < 2:
        raise UsageError(f"bad tier {text!r}", hint="NAME:CAPACITY[:GB/s[:latency ms]], e.g. cpu:200GB:25:0.5")
    try:
        bw = float(parts[2]) * 1e9 if len(parts) > 2 and parts[2] else 0.0
        lat = float(parts[3]) / 1000.0 if len(parts) > 3 and parts[3] else 0.0
    except ValueError:
        raise UsageError(f"bad tier {text!r}", hint="bandwidth in GB/s and latency in ms are numbers") from None
    return Tier(parts[0], parse_capacity(parts[1], kv), bw, lat)


def headline_capacity(text: str | None) -> float | None:
    """``analyze --capacity``: a capacity in tokens (a byte size needs the model's KV size, which
    only ``simulate`` takes)."""
    if text is None:
        return None
    try:
        return parse_capacity(text, None)
    except UsageError as err:
        if "in bytes" not in str(err):
            raise
        raise UsageError(
            f"analyze takes --capacity in tokens (e.g. 2e6), not {text!r}: a byte size needs the model's KV size",
            hint=f"prefixplan simulate LOG --capacity {text} --model NAME (or --model-config DIR) sizes it in bytes",
        ) from None
