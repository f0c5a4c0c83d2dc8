"""prefixplan: make prefix (KV) caching pay off on vLLM and SGLang.

The public Python API (docs/python.md)::

    import prefixplan

    analysis = prefixplan.analyze("logs/*.jsonl.gz")          # or an iterable of request dicts
    for c in analysis.candidates[:5]:
        print(c.rank, c.label, c.length, c.hits, c.preview)
    result = prefixplan.simulation("logs/*.jsonl.gz", prefixplan.simulation_config(capacity="1e6"))

Names are imported on first use, so ``import prefixplan`` stays cheap (no tokenizer or numpy
import until a function runs). The library owns all logic; :mod:`prefixplan.cli` only parses
options, calls one library function and renders the result.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from prefixplan.version import __version__

_EXPORTS = {
    "analyze": "prefixplan.api",
    "simulate": "prefixplan.api",
    "simulation_config": "prefixplan.api",
    "source_options": "prefixplan.api",
    "lock": "prefixplan.api",
    "check": "prefixplan.api",
    "warm": "prefixplan.api",
    "load_analysis": "prefixplan.api",
    "write_trace": "prefixplan.api",
    "SimulationResult": "prefixplan.api",
    "Analysis": "prefixplan.analysis.options",
    "AnalysisRecord": "prefixplan.analysis.record",
    "CandidateRecord": "prefixplan.analysis.record",
    "SimConfig": "prefixplan.simulation.config",
    "CacheModel": "prefixplan.simulation.config",
    "Workload": "prefixplan.simulation.config",
    "SavingsModel": "prefixplan.simulation.config",
    "CacheKey": "prefixplan.keys",
    "PrefixplanError": "prefixplan.errors",
}

__all__ = ["__version__", *sorted(_EXPORTS)]

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs
    from prefixplan.analysis.options import Analysis
    from prefixplan.analysis.record import AnalysisRecord, CandidateRecord
    from prefixplan.api import (
        SimulationResult,
        analyze,
        check,
        load_analysis,
        lock,
        simulate,
        simulation_config,
        source_options,
        warm,
        write_trace,
    )
    from prefixplan.errors import PrefixplanError
    from prefixplan.keys import CacheKey
    from prefixplan.simulation.config import CacheModel, SavingsModel, SimConfig, Workload


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'prefixplan' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
