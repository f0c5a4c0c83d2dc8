"""SGLang adapter (native endpoints).

- warm: ``POST /generate`` with ``input_ids`` and ``sampling_params.max_new_tokens`` 1 (streamed),
  plus ``priority`` for servers run with ``--radix-eviction-policy priority``.
- cached tokens: ``meta_info.cached_tokens`` of ``/generate``.
- page size and served model: ``/get_server_info`` (``/server_info`` on newer builds).
- counters: ``sglang:cached_tokens_total`` / ``sglang:prompt_tokens_total`` (``--enable-metrics``).
- ``POST /flush_cache`` drops the radix cache (only when the server is idle).

Response shapes follow SGLang's documentation; the live check needs a GPU host (SGLang does not
serve on the CPU machines used for tests), so tests use a fake built from those shapes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from prefixplan.engines.base import EngineAdapter, EngineRequestError, _Stream
from prefixplan.engines.endpoint import CacheCounters, Completion, ServerInfo
from prefixplan.engines.metrics import counter_sum, first_label
from prefixplan.engines.openai_compat import _tokens


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


class SGLangAdapter(EngineAdapter):
    """Adapter for an SGLang server."""

    engine: ClassVar[str] = "sglang"

    def _first_json(self, *paths: str) -> Any | None:
        for path in paths:
            data = self.optional_json("GET", path)
            if data is not None:
                return data
        return None

    def server_info(self, *, refresh: bool = False) -> ServerInfo:
        if self._info is not None and not refresh:
            return self._info
        info = self._first_json("/get_server_info", "/server_info") or {}
        model_info = self._first_json("/get_model_info", "/model_info") or {}
        models: tuple[str, ...] = ()
        listing = self.optional_json("GET", "/v1/models")
        if isinstance(listing, Mapping) and isinstance(listing.get("data"), list):
            models = tuple(str(m["id"]) for m in listing["data"] if isinstance(m, Mapping) and m.get("id"))
        model = self._model or (info.get("served_model_name") if isinstance(info, Mapping) else None)
        if not model and models:
            model = models[0]
        if not model and isinstance(model_info, Mapping):
            model = model_info.get("model_path")
        block_size: int | None = None
        source = "unknown"
        if isinstance(info, Mapping) and _int(info.get("page_size")):
            block_size, source = int(info["page_size"]), "server_info"
        else:
            samples = self.metrics()
            raw = first_label(samples or [], "sglang:cache_config_info", "page_size")
            if raw and raw.isdigit():
                block_size, source = int(raw), "metrics"
        if self._block_size_override:
            block_size, source = self._block_size_override, "option"
        max_len = _int(info.get("context_length")) if isinstance(info, Mapping) else None
        version = str(info["version"]) if isinstance(info, Mapping) and info.get("version") else None
        self._info = ServerInfo(
            engine=self.engine,
            model=str(model) if model else None,
            models=models,
            block_size=block_size,
            block_size_source=source,
            max_model_len=max_len,
            version=version,
        )
        return self._info

    def complete_ids(
        self,
        ids: Sequence[int],
        *,
        max_tokens: int = 1,
        stream: bool = True,
        priority: int | None = None,
    ) -> Completion:
        body: dict[str, Any] = {
            "input_ids": [int(i) for i in ids],
            "sampling_params": {"max_new_tokens": max_tokens, "temperature": 0},
            "stream": stream,
        }
        if priority is not None:
            body["priority"] = int(priority)
        path = "/generate"
        if not stream:
            t0 = self.clock()
            data = self.request_json("POST", path, body)
            total = self.clock() - t0
            if isinstance(data, list):  # batch form: one item per prompt
                data = data[0] if data else {}
            if not isinstance(data, Mapping):
                raise self._error(f"malformed answer from {path} (not an object)", kind="malformed")
            return self._finish(data.get("meta_info"), total, total, False, max_tokens, path)

        def on_event(event: dict[str, Any], state: _Stream) -> None:
            meta = event.get("meta_info")
            if isinstance(meta, Mapping):
                state.usage = dict(meta)
                produced = _int(meta.get("completion_tokens")) or 0
                if produced > max_tokens:
                    raise self._too_many_tokens(produced, max_tokens, path)
            state.chunks += 1
            if state.chunks > max_tokens + 2:
                raise self._too_many_tokens(state.chunks, max_tokens, path)

        state, total = self.stream_sse(path, body, on_event)
        ttft = state.first_at if state.first_at is not None else total
        return self._finish(state.usage or None, ttft, total, True, max_tokens, path)

    def _finish(self, meta: Any, ttft: float, total: float, streamed: bool, max_tokens: int, path: str) -> Completion:
        meta = meta if isinstance(meta, Mapping) else {}
        return self.completion(
            prompt=meta.get("prompt_tokens"),
            cached=meta.get("cached_tokens"),
            completion=meta.get("completion_tokens"),
            ttft=ttft,
            total=total,
            streamed=streamed,
            max_tokens=max_tokens,
            path=path,
        )

    def tokenize_text(self, text: str) -> list[int] | None:
        body = {"model": self.model_name(), "prompt": text, "add_special_tokens": False}
        for path in ("/tokenize", "/v1/tokenize"):
            tokens = _tokens(self.optional_json("POST", path, body))
            if tokens is not None:
                return tokens
        return None

    def cache_counters(self) -> CacheCounters | None:
        samples = self.metrics()
        if not samples:
            return None
        hits = counter_sum(samples, "sglang:cached_tokens")
        if hits is None:
            return None
        return CacheCounters(
            hits=hits,
            queries=counter_sum(samples, "sglang:prompt_tokens"),
            running=counter_sum(samples, "sglang:num_running_reqs"),
            waiting=counter_sum(samples, "sglang:num_queue_reqs"),
        )

    def reset_cache(self) -> bool:
        try:
            self.request_text("POST", "/flush_cache")
        except EngineRequestError as err:
            if err.kind == "http":
                return False
            raise
        return True
