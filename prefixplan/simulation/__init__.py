"""Replay request streams through prefix-cache models (see docs/simulate.md)."""

from prefixplan.simulation.capacity import tokens_from_bytes
from prefixplan.simulation.config import CacheModel, SavingsModel, SimConfig, Workload
from prefixplan.simulation.result import CacheRun, SimResult, to_json
from prefixplan.simulation.simulator import Simulation, replay_requests, sweep
from prefixplan.simulation.spec import AutoPromote, CacheSpec, Tier
from prefixplan.trace.requests import SimRequest

__all__ = [
    "AutoPromote",
    "CacheModel",
    "CacheRun",
    "CacheSpec",
    "SavingsModel",
    "SimConfig",
    "SimRequest",
    "SimResult",
    "Simulation",
    "Tier",
    "Workload",
    "replay_requests",
    "sweep",
    "to_json",
    "tokens_from_bytes",
]
