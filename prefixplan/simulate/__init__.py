"""Replay request streams through prefix-cache models (see docs/simulate.md)."""

from prefixplan.simulate.api import (
    CacheRun,
    SimConfig,
    SimResult,
    simulate,
    sweep,
    to_json,
    tokens_from_bytes,
)
from prefixplan.simulate.models import AutoPromote, CacheSpec, Tier
from prefixplan.simulate.trace import SimRequest

__all__ = [
    "AutoPromote",
    "CacheRun",
    "CacheSpec",
    "SimConfig",
    "SimRequest",
    "SimResult",
    "Tier",
    "simulate",
    "sweep",
    "to_json",
    "tokens_from_bytes",
]
