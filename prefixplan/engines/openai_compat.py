"""Generic OpenAI-compatible servers (llama.cpp, proxies, unknown engines).

Warms with ``/v1/completions`` and a token-id prompt where the server accepts one, or with a
chat request (:meth:`OpenAICompatAdapter.complete_chat`) rendering the same messages and tools.
Reads ``usage.prompt_tokens_details.cached_tokens``; the block size is unknown unless given, so
verification assumes token granularity (block size 1) unless ``--block-size`` says otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from prefixplan.engines.base import EngineAdapter, _Stream
from prefixplan.engines.endpoint import CacheCounters, Completion, ServerInfo
from prefixplan.engines.fields import usage_cached_tokens


class OpenAICompatAdapter(EngineAdapter):
    """Adapter for any server speaking the OpenAI completions/chat API."""

    engine: ClassVar[str] = "openai-compatible"

    def _models(self) -> tuple[tuple[str, ...], int | None]:
        data = self.request_json("GET", "/v1/models")
        items = data.get("data") if isinstance(data, Mapping) else None
        if not isinstance(items, list):
            raise self._error("malformed /v1/models answer (no 'data' list)", kind="malformed")
        ids = tuple(str(m.get("id")) for m in items if isinstance(m, Mapping) and m.get("id"))
        max_len = None
        for m in items:
            if isinstance(m, Mapping) and isinstance(m.get("max_model_len"), int):
                max_len = int(m["max_model_len"])
                break
        return ids, max_len

    def _pick_model(self, models: tuple[str, ...]) -> str | None:
        if self._model:
            return self._model
        return models[0] if models else None

    def server_info(self, *, refresh: bool = False) -> ServerInfo:
        if self._info is None or refresh:
            models, max_len = self._models()
            bs = self._block_size_override
            self._info = ServerInfo(
                engine=self.engine,
                model=self._pick_model(models),
                models=models,
                block_size=bs,
                block_size_source="option" if bs else "unknown",
                max_model_len=max_len,
            )
        return self._info

    # -- completions ----------------------------------------------------------------------
    def _completion_body(self, prompt: Any, max_tokens: int, stream: bool) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model_name(),
            "prompt": prompt,
            "max_tokens": max_tokens,
            "temperature": 0,
            "stream": stream,
        }
        if stream:
            body["stream_options"] = {"include_usage": True}
        return body

    def _run(self, path: str, body: dict[str, Any], max_tokens: int, stream: bool) -> Completion:
        if not stream:
            t0 = self.clock()
            data = self.request_json("POST", path, body)
            total = self.clock() - t0
            if not isinstance(data, Mapping):
                raise self._error(f"malformed answer from {path} (not an object)", kind="malformed")
            return self._finish(data.get("usage"), total, total, False, max_tokens, path)

        def on_event(event: dict[str, Any], state: _Stream) -> None:
            choices = event.get("choices")
            if isinstance(choices, list) and any(_carries_output(c) for c in choices):
                state.chunks += 1
                # At most one chunk per generated token (role-only and finish_reason-only chunks
                # of chat streams carry no output and are not counted); one chunk of slack.
                if state.chunks > max_tokens + 1:
                    raise self._too_many_tokens(state.chunks, max_tokens, path)
            if isinstance(event.get("usage"), Mapping):
                state.usage = dict(event["usage"])

        state, total = self.stream_sse(path, body, on_event)
        ttft = state.first_at if state.first_at is not None else total
        return self._finish(state.usage or None, ttft, total, True, max_tokens, path)

    def _finish(self, usage: Any, ttft: float, total: float, streamed: bool, max_tokens: int, path: str) -> Completion:
        usage = usage if isinstance(usage, Mapping) else {}
        return self.completion(
            prompt=usage.get("prompt_tokens"),
            cached=usage_cached_tokens(usage),
            completion=usage.get("completion_tokens"),
            ttft=ttft,
            total=total,
            streamed=streamed,
            max_tokens=max_tokens,
            path=path,
        )

    def complete_ids(
        self,
        ids: Sequence[int],
        *,
        max_tokens: int = 1,
        stream: bool = True,
        priority: int | None = None,
    ) -> Completion:
        body = self._completion_body([int(i) for i in ids], max_tokens, stream)
        return self._run("/v1/completions", body, max_tokens, stream)

    def complete_text(self, prompt: str, *, max_tokens: int = 1, stream: bool = True) -> Completion:
        """``/v1/completions`` with a text prompt (the server tokenizes it)."""
        body = self._completion_body(prompt, max_tokens, stream)
        return self._run("/v1/completions", body, max_tokens, stream)

    def complete_chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        max_tokens: int = 1,
        stream: bool = True,
    ) -> Completion:
        """Warm through the chat endpoint: the server renders ``messages`` + ``tools`` itself."""
        body: dict[str, Any] = {
            "model": self.model_name(),
            "messages": [dict(m) for m in messages],
            "max_tokens": max_tokens,
            "temperature": 0,
            "stream": stream,
        }
        if tools:
            # No tool_choice: real requests rarely set one, and some servers render (and so
            # cache) a different prompt for tool_choice "none".
            body["tools"] = [dict(t) for t in tools]
        if stream:
            body["stream_options"] = {"include_usage": True}
        return self._run("/v1/chat/completions", body, max_tokens, stream)

    # -- tokenizer and counters -----------------------------------------------------------
    def tokenize_text(self, text: str) -> list[int] | None:
        # vLLM shape ({prompt}) and llama.cpp shape ({content}) in one body; both ignore the other.
        body = {
            "model": self.model_name(),
            "prompt": text,
            "content": text,
            "add_special_tokens": False,
            "add_special": False,
        }
        data = self.optional_json("POST", "/tokenize", body)
        return _tokens(data)

    def cache_counters(self) -> CacheCounters | None:
        return None


def _carries_output(choice: Any) -> bool:
    """Whether a streamed choice carries generated output (text, content, reasoning or a tool call)."""
    if not isinstance(choice, Mapping):
        return False
    if choice.get("text"):
        return True
    delta = choice.get("delta")
    if isinstance(delta, Mapping):
        return bool(
            delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning") or delta.get("tool_calls")
        )
    return False


def _tokens(data: Any) -> list[int] | None:
    if data is None:
        return None
    tokens = data.get("tokens") if isinstance(data, Mapping) else None
    if not isinstance(tokens, list):
        return None
    out: list[int] = []
    for t in tokens:
        if isinstance(t, int):
            out.append(t)
        elif isinstance(t, Mapping) and isinstance(t.get("id"), int):  # llama.cpp with pieces
            out.append(int(t["id"]))
        else:
            return None
    return out
