"""``--engine auto``: ask the server which engine it is, and build its adapter.

Order of evidence (first that answers wins):
1. ``GET /v1/models``: ``owned_by`` is ``"vllm"`` or ``"sglang"`` on those engines.
2. ``GET /metrics``: metric names prefixed ``vllm:`` or ``sglang:``.
3. ``GET /get_model_info`` (SGLang-only endpoint) answering with ``model_path``.
Otherwise the server is treated as a generic OpenAI-compatible one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from prefixplan.engines.base import EngineAdapter, EngineRequestError
from prefixplan.engines.endpoint import Endpoint
from prefixplan.engines.openai_compat import OpenAICompatAdapter
from prefixplan.engines.sglang import SGLangAdapter
from prefixplan.engines.vllm import VLLMAdapter
from prefixplan.errors import UsageError

ENGINES: dict[str, type[EngineAdapter]] = {
    "vllm": VLLMAdapter,
    "sglang": SGLangAdapter,
    "openai-compatible": OpenAICompatAdapter,
}
ENGINE_CHOICES = ("auto", *ENGINES)


def detect_engine(probe: EngineAdapter) -> str:
    """Name of the engine behind ``probe``'s endpoint (see module docstring).

    Raises:
        EngineRequestError: the server cannot be reached at all.
    """
    listing: Any = None
    try:
        listing = probe.request_json("GET", "/v1/models")
    except EngineRequestError as err:
        if err.kind in ("refused", "timeout"):
            raise
    if isinstance(listing, Mapping) and isinstance(listing.get("data"), list):
        owners = {str(m.get("owned_by", "")).lower() for m in listing["data"] if isinstance(m, Mapping)}
        for name in ("vllm", "sglang"):
            if name in owners:
                return name
    try:
        text = probe.request_text("GET", "/metrics")
    except EngineRequestError as err:
        if err.kind in ("refused", "timeout"):
            raise
        text = ""
    if "vllm:" in text:
        return "vllm"
    if "sglang:" in text:
        return "sglang"
    info = None
    try:
        info = probe.optional_json("GET", "/get_model_info")
    except EngineRequestError as err:
        if err.kind in ("refused", "timeout"):
            raise
    if isinstance(info, Mapping) and "model_path" in info:
        return "sglang"
    return "openai-compatible"


def connect(
    endpoint: Endpoint,
    *,
    engine: str = "auto",
    timeout: float = 30.0,
    model: str | None = None,
    block_size: int | None = None,
    transport: Any = None,
    clock: Any = None,
) -> EngineAdapter:
    """An adapter for ``endpoint``; ``engine="auto"`` detects it from the server.

    Raises:
        UsageError: unknown engine name.
        EngineRequestError: auto-detection could not reach the server.
    """
    if engine not in ENGINE_CHOICES:
        raise UsageError(f"unknown engine {engine!r}; choose one of {', '.join(ENGINE_CHOICES)}")
    kwargs: dict[str, Any] = {"timeout": timeout, "model": model, "block_size": block_size, "transport": transport}
    if clock is not None:
        kwargs["clock"] = clock
    if engine == "auto":
        probe = OpenAICompatAdapter(endpoint, **kwargs)
        try:
            engine = detect_engine(probe)
        finally:
            probe.close()
    return ENGINES[engine](endpoint, **kwargs)
