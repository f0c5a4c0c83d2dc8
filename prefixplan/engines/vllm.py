"""vLLM adapter (OpenAI-compatible server with vLLM's extra endpoints).

- warm: ``POST /v1/completions`` with a token-id ``prompt``, ``max_tokens`` 1, streamed.
- cached tokens: ``usage.prompt_tokens_details.cached_tokens`` (``--enable-prompt-tokens-details``).
- block size and KV bytes per token: the labels of ``vllm:cache_config_info`` on ``/metrics``.
- tokenizer: ``POST /tokenize``; counters ``vllm:prefix_cache_hits`` / ``vllm:prefix_cache_queries``.
- ``POST /reset_prefix_cache`` (only with ``VLLM_SERVER_DEV_MODE=1``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from prefixplan.engines.base import EngineRequestError
from prefixplan.engines.endpoint import CacheCounters, ServerInfo
from prefixplan.engines.metrics import counter_sum, first_label
from prefixplan.engines.openai_compat import OpenAICompatAdapter, _tokens


class VLLMAdapter(OpenAICompatAdapter):
    """Adapter for vLLM's OpenAI-compatible server."""

    engine: ClassVar[str] = "vllm"

    def server_info(self, *, refresh: bool = False) -> ServerInfo:
        if self._info is not None and not refresh:
            return self._info
        models, max_len = self._models()
        version = None
        data = self.optional_json("GET", "/version")
        if isinstance(data, Mapping) and data.get("version"):
            version = str(data["version"])
        block_size: int | None = None
        source = "unknown"
        kv_bytes: float | None = None
        samples = self.metrics()
        if samples:
            raw = first_label(samples, "vllm:cache_config_info", "block_size")
            if raw and raw.isdigit():
                block_size, source = int(raw), "metrics"
            mem = first_label(samples, "vllm:cache_config_info", "kv_cache_memory_bytes")
            toks = first_label(samples, "vllm:cache_config_info", "kv_cache_size_tokens")
            try:
                if mem and toks and float(toks) > 0:
                    kv_bytes = float(mem) / float(toks)
            except ValueError:
                kv_bytes = None
        if self._block_size_override:
            block_size, source = self._block_size_override, "option"
        self._info = ServerInfo(
            engine=self.engine,
            model=self._pick_model(models),
            models=models,
            block_size=block_size,
            block_size_source=source,
            max_model_len=max_len,
            kv_bytes_per_token=kv_bytes,
            version=version,
        )
        return self._info

    def tokenize_text(self, text: str) -> list[int] | None:
        body = {"model": self.model_name(), "prompt": text, "add_special_tokens": False}
        return _tokens(self.optional_json("POST", "/tokenize", body))

    def cache_counters(self) -> CacheCounters | None:
        samples = self.metrics()
        if not samples:
            return None
        hits = counter_sum(samples, "vllm:prefix_cache_hits")
        if hits is None:
            return None
        return CacheCounters(
            hits=hits,
            queries=counter_sum(samples, "vllm:prefix_cache_queries"),
            running=counter_sum(samples, "vllm:num_requests_running"),
            waiting=counter_sum(samples, "vllm:num_requests_waiting"),
        )

    def reset_cache(self) -> bool:
        try:
            self.request_text("POST", "/reset_prefix_cache")
        except EngineRequestError as err:
            if err.kind == "http":
                return False
            raise
        return True
