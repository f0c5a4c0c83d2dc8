"""``vllm:URL`` — the server's own ``POST /tokenize`` (exact by definition).

Chat requests are sent as ``{model, messages, tools, add_generation_prompt: true,
return_token_strs: true}``; the server renders its chat template and returns the ids. Spans
are found by turning the returned token strings back into text (byte-level BPE pieces map
to bytes through the GPT-2 byte table; SentencePiece ``▁`` to a space) and locating message
contents in it. When the token strings cannot be mapped, the whole prompt is one
``template`` segment and candidates are labelled ``template``.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import numpy as np

from prefixplan.core.hashes import segment_hash
from prefixplan.core.types import Prompt, Request, Segment, as_token_ids
from prefixplan.core.urls import display_url, redact
from prefixplan.errors import EndpointError, TokenizerError
from prefixplan.render.spans import assign, byte_starts_to_char_starts, locate


@lru_cache(maxsize=1)
def _byte_decoder() -> dict[str, int]:
    """Inverse of the GPT-2 byte-to-unicode table used by byte-level BPE tokenizers."""
    printable = (
        list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    )
    chars = printable[:]
    n = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(printable, chars, strict=False)}


def token_strs_to_bytes(strs: Sequence[str]) -> list[bytes] | None:
    dec = _byte_decoder()
    out = []
    for s in strs:
        if all(ch in dec for ch in s):
            out.append(bytes(dec[ch] for ch in s))
        elif "▁" in s or s.isprintable():
            out.append(s.replace("▁", " ").encode("utf-8"))
        else:
            return None
    return out


def null_content_as_empty(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages with ``content: null`` sent as ``""``. A vLLM 0.32 server that logs requests at
    DEBUG (``--enable-log-requests``) loses the ``tool_calls`` of such a turn in ``/tokenize`` (its
    request-body dump consumes them), while its chat endpoint keeps them; ``""`` gives the chat
    endpoint's ids on every server (seen live: the chat endpoint renders null and ``""`` alike)."""
    return [dict(m, content="") if isinstance(m, dict) and m.get("content", "") is None else m for m in messages]


class VLLMRenderer:
    exact = True

    def __init__(
        self, url: str, *, model: str | None = None, timeout: float = 60.0, api_key_env: str | None = None
    ) -> None:
        import httpx

        self.url = url.rstrip("/")
        self.shown = display_url(self.url)  # never print or record credentials in a URL
        headers = {}
        env = api_key_env or "PREFIXPLAN_API_KEY"
        self._key = os.environ.get(env) or None
        if api_key_env and not self._key:
            raise TokenizerError(f"--api-key-env {api_key_env}: the environment variable is not set")
        if self._key:
            headers["Authorization"] = f"Bearer {self._key}"
        self.client = httpx.Client(timeout=timeout, headers=headers)
        self.model = model or self._served_model()
        self.spec = f"vllm:{self.shown}"
        self.label = f"vllm:{self.shown} ({self.model}, server /tokenize)"
        probe = self._post("/tokenize", {"model": self.model, "prompt": "prefixplan fingerprint probe: héllo 世界 <|>"})
        h = hashlib.sha256(self.model.encode())
        h.update(np.asarray(probe["tokens"], dtype=np.uint32).tobytes())
        self.fingerprint = "tok1:remote:" + h.hexdigest()[:24]
        self._encoded = 0

    def encode_stats(self) -> dict[str, int]:
        """Requests the server encoded (each in full: nothing is reused here)."""
        return {"incremental": 0, "full": self._encoded}

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        import httpx

        try:
            resp = self.client.post(self.url + path, json=body)
        except httpx.HTTPError as exc:
            raise EndpointError(f"{self.shown}{path}: {type(exc).__name__}: {redact(str(exc), self._key)}") from exc
        if resp.status_code != 200:
            raise EndpointError(f"{self.shown}{path}: HTTP {resp.status_code}: {redact(resp.text[:300], self._key)}")
        try:
            return resp.json()
        except ValueError as exc:
            raise EndpointError(f"{self.shown}{path}: response is not JSON") from exc

    def _served_model(self) -> str:
        import httpx

        try:
            resp = self.client.get(self.url + "/v1/models")
            if resp.status_code != 200:
                raise EndpointError(
                    f"{self.shown}/v1/models: HTTP {resp.status_code}: {redact(resp.text[:300], self._key)}"
                )
            return resp.json()["data"][0]["id"]
        except (httpx.HTTPError, ValueError, KeyError, IndexError) as exc:
            raise EndpointError(
                f"{self.shown}/v1/models: cannot read the served model: {redact(str(exc), self._key)}"
            ) from exc

    def encode_text(self, text: str, *, add_special_tokens: bool = False) -> tuple[np.ndarray, np.ndarray]:
        data = self._post(
            "/tokenize",
            {"model": self.model, "prompt": text, "add_special_tokens": add_special_tokens, "return_token_strs": True},
        )
        ids = as_token_ids(data["tokens"])
        return ids, self._starts(data.get("token_strs"), len(ids))[1]

    def _starts(self, strs: Sequence[str] | None, n: int) -> tuple[str | None, np.ndarray]:
        pieces = token_strs_to_bytes(strs) if strs and len(strs) == n else None
        if pieces is None:
            return None, np.zeros(n, np.int64)
        lengths = np.fromiter((len(p) for p in pieces), dtype=np.int64, count=n)
        byte_starts = np.concatenate(([0], np.cumsum(lengths)[:-1])) if n else lengths
        data = b"".join(pieces)
        return data.decode("utf-8", errors="replace"), byte_starts_to_char_starts(data, byte_starts)

    def render(self, request: Request) -> Prompt:
        if request.messages is None:
            if request.prompt is None:
                from prefixplan.render.engine_ids import raw_ids_prompt

                return raw_ids_prompt(request)
            data = self._post("/tokenize", {"model": self.model, "prompt": request.prompt})
            tokens = as_token_ids(data["tokens"])
            self._encoded += 1
            return Prompt(request, tokens, (Segment("raw", 0, len(tokens), segment_hash(request.prompt)),))
        body: dict[str, Any] = {
            "model": self.model,
            "messages": null_content_as_empty(request.messages),
            "add_generation_prompt": True,
            "return_token_strs": True,
        }
        if request.tools:
            body["tools"] = list(request.tools)
        try:
            data = self._post("/tokenize", body)
        except EndpointError as exc:
            raise TokenizerError(f"{request.source}:{request.line_no}: {exc}") from exc
        tokens = as_token_ids(data["tokens"])
        self._encoded += 1
        text, starts = self._starts(data.get("token_strs"), len(tokens))
        if text is None:
            seg = Segment("template", 0, len(tokens), segment_hash(tokens.tobytes()))
            return Prompt(request, tokens, (seg,), (), exact=True)
        segments, chunks = assign(text, starts, locate(text, request.messages, request.tools))
        return Prompt(request, tokens, segments, chunks, exact=True)

    def render_many(self, requests: Sequence[Request]) -> list[Prompt]:
        return [self.render(r) for r in requests]


class SGLangRenderer(VLLMRenderer):
    """``sglang:URL`` — an SGLang server's ``POST /tokenize`` (SGLang 0.5: ``{model, messages,
    tools}`` rendered as for a chat completion, or ``{model, prompt}``). SGLang ignores
    ``return_token_strs``, so its prompts get one ``template`` span (ids exact, labels coarse)."""

    def __init__(
        self, url: str, *, model: str | None = None, timeout: float = 60.0, api_key_env: str | None = None
    ) -> None:
        super().__init__(url, model=model, timeout=timeout, api_key_env=api_key_env)
        self.spec = f"sglang:{self.shown}"
        self.label = f"sglang:{self.shown} ({self.model}, server /tokenize)"


def vllm_from_spec(spec: str, rest: str) -> VLLMRenderer:
    """``vllm:URL``: the server's ``/tokenize``."""
    return VLLMRenderer(rest)


def sglang_from_spec(spec: str, rest: str) -> SGLangRenderer:
    """``sglang:URL``: the SGLang server's ``/tokenize``."""
    return SGLangRenderer(rest)
