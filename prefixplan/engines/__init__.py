"""Engine adapters: talk to vLLM, SGLang and generic OpenAI-compatible servers.

:func:`prefixplan.engines.detect.connect` returns an adapter for an :class:`Endpoint`
(``engine="auto"`` asks the server's own endpoints which engine it is).
"""

from prefixplan.engines.base import EngineAdapter, EngineRequestError
from prefixplan.engines.endpoint import CacheCounters, Completion, Endpoint, ServerInfo

__all__ = [
    "CacheCounters",
    "Completion",
    "Endpoint",
    "EngineAdapter",
    "EngineRequestError",
    "ServerInfo",
]
