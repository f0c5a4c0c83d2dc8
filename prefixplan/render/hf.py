"""``hf:PATH`` — a local Hugging Face tokenizer folder and its chat template.

Exactness: the token ids equal ``tokenizer.apply_chat_template(messages, tools=tools,
add_generation_prompt=True, tokenize=True)``, which is what vLLM's chat endpoints and
``/tokenize`` compute for the same tokenizer and template.

Speed: the chat template renders the prompt text (one call per batch of requests that share
their tools); :class:`~prefixplan.render.hf_encode.HFEncoder` encodes it piece by piece, each
distinct piece and line once, where that is provably the same as encoding the whole text
(``incremental=False``: the earlier piece cache; a tokenizer the split is not equivalent for:
whole prompts). Tests compare every path against ``apply_chat_template`` token for token.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from prefixplan.core.hashes import segment_hash
from prefixplan.core.types import Prompt, Request, Segment, as_token_ids
from prefixplan.errors import TokenizerError
from prefixplan.render.chatnorm import engine_messages
from prefixplan.render.engine_ids import raw_ids_prompt
from prefixplan.render.hf_encode import HFEncoder
from prefixplan.render.sandbox_memo import install as install_sandbox_memo
from prefixplan.render.spans import assign, locate
from prefixplan.render.tojson_memo import install as install_tojson_memo
from prefixplan.render.tojson_memo import tojson_memo


class HFRenderer:
    """Render chat requests with a local HF tokenizer folder and its chat template."""

    exact = True

    def __init__(
        self,
        path: str | Path,
        *,
        chat_template: str | None = None,
        template_kwargs: dict[str, Any] | None = None,
        piece_cache_tokens: int = 8_000_000,
        split_pieces: bool = True,
        paragraph_split: bool = True,
        incremental: bool | None = None,
    ) -> None:
        path = Path(path)
        if not (path / "tokenizer.json").is_file() and not (path / "tokenizer_config.json").is_file():
            raise TokenizerError(
                f"hf:{path}: not a tokenizer folder (no tokenizer.json or tokenizer_config.json)",
                hint="pass a local folder saved with tokenizer.save_pretrained()",
            )
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
        try:
            from transformers import AutoTokenizer
            from transformers.utils import logging as hf_logging

            hf_logging.set_verbosity_error()
            self.tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        except Exception as exc:  # transformers raises many types here
            raise TokenizerError(f"hf:{path}: cannot load tokenizer: {exc}") from exc
        if chat_template is not None:
            self.tokenizer.chat_template = chat_template
        if not getattr(self.tokenizer, "chat_template", None):
            raise TokenizerError(
                f"hf:{path}: the tokenizer has no chat template",
                hint="pass --chat-template FILE",
            )
        backend: Any = getattr(self.tokenizer, "backend_tokenizer", None)
        if backend is None:
            raise TokenizerError(f"hf:{path}: only fast (tokenizer.json) tokenizers are supported")
        self.backend = backend
        self.path = path
        self.spec = f"hf:{path}"
        self.label = f"hf:{path.name}"
        self.template_kwargs = dict(template_kwargs or {})
        if incremental is None:
            incremental = os.environ.get("PREFIXPLAN_INCREMENTAL", "1") != "0"
        self.encoder = HFEncoder(
            backend,
            piece_cache_tokens=piece_cache_tokens,
            split_pieces=split_pieces,
            paragraph_split=paragraph_split,
            incremental=incremental,
        )
        self.cache = self.encoder.cache
        self.split_pieces = self.encoder.split_pieces
        self.fingerprint = self._fingerprint()
        templates = self.tokenizer.chat_template
        for template in templates.values() if isinstance(templates, dict) else (templates,):
            if isinstance(template, str):
                install_tojson_memo(template)
                install_sandbox_memo(template)

    @property
    def _paragraph_split(self) -> bool:
        """Whether long pieces are cut inside (after blank lines, or where the proved rule allows)."""
        return self.encoder.paragraph_split or self.encoder.segments.rule is not None

    def encode_stats(self) -> dict[str, int]:
        """Chat requests rendered so far whose ids reused an earlier encode (``incremental``)
        and those encoded entirely for themselves (``full``)."""
        return self.encoder.stats.as_dict()

    # -- identity -------------------------------------------------------------------------
    def _fingerprint(self) -> str:
        h = hashlib.sha256()
        h.update(self.backend.to_str().encode())
        h.update(b"\0template\0")
        h.update(str(self.tokenizer.chat_template).encode())
        h.update(b"\0kwargs\0")
        h.update(json.dumps(self.template_kwargs, sort_keys=True, default=str).encode())
        return "tok1:" + h.hexdigest()[:32]

    # -- rendering ------------------------------------------------------------------------
    def render_text(self, request: Request) -> str:
        if request.messages is None:
            raise TokenizerError(f"{request.source}:{request.line_no}: not a chat request")
        try:
            return str(
                self.tokenizer.apply_chat_template(
                    engine_messages(request.messages),
                    tools=list(request.tools) if request.tools else None,
                    add_generation_prompt=True,
                    tokenize=False,
                    **self.template_kwargs,
                )
            )
        except Exception as exc:  # jinja errors, template exceptions (raise_exception)
            raise TokenizerError(f"{request.source}:{request.line_no}: chat template failed: {exc}") from exc

    def _render_texts(
        self, requests: Sequence[Request], chat: Sequence[int], keys: dict[int, bytes] | None = None
    ) -> dict[int, str]:
        """Chat-template texts of ``requests[i]`` for ``i`` in ``chat``. Requests with the same
        tools are rendered in one ``apply_chat_template`` call (a batch of conversations shares
        its ``tools``), so the template input is prepared once per tool set, not per request
        (a long tool list made that a third of the template time); the text of each
        conversation is what a call of its own returns. If a batch fails, each request is
        rendered alone so the failure names its request. ``keys`` receives each request's
        tool-set key (the tools' JSON bytes)."""
        groups: dict[bytes, list[int]] = {}
        for i in chat:
            tools = requests[i].tools
            try:
                key = orjson.dumps(list(tools)) if tools else b""
            except TypeError:  # not JSON: a group of its own
                key = b"\0" + str(i).encode()
            else:
                if keys is not None and tools:
                    keys[i] = key
            groups.setdefault(key, []).append(i)
        out: dict[int, str] = {}
        for idxs in groups.values():
            if len(idxs) == 1:
                out[idxs[0]] = self.render_text(requests[idxs[0]])
                continue
            tools = requests[idxs[0]].tools
            try:
                with tojson_memo():  # each tool serialised once for the batch, not per conversation
                    texts = self.tokenizer.apply_chat_template(
                        [engine_messages(requests[i].messages or ()) for i in idxs],
                        tools=list(tools) if tools else None,
                        add_generation_prompt=True,
                        tokenize=False,
                        **self.template_kwargs,
                    )
            except Exception:  # the failing request is found (and named) alone below
                texts = None
            if not isinstance(texts, list) or len(texts) != len(idxs):
                for i in idxs:
                    out[i] = self.render_text(requests[i])
                continue
            for i, text in zip(idxs, texts, strict=True):
                out[i] = str(text)
        return out

    def encode_text(self, text: str, *, add_special_tokens: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Token ids and first-char offsets of ``text`` (exactly as the tokenizer encodes it)."""
        if add_special_tokens or not self.split_pieces or self.encoder.split_re is None:
            enc = self.backend.encode(text, add_special_tokens=add_special_tokens)
            return self.encoder.encode_one(enc, text)
        return self.encoder.encode([text], count=False)[0]

    def render(self, request: Request) -> Prompt:
        return self.render_many([request])[0]

    spans_optional = True
    """:meth:`render_many` can leave the spans out (``spans=False``)."""

    def render_many(self, requests: Sequence[Request], *, spans: bool = True) -> list[Prompt]:
        """Render a batch of requests (chat, raw text or token-id prompts); ``spans=False``:
        the same ids, with no segment spans or chunks (not located in the text)."""
        chat = [i for i, req in enumerate(requests) if req.messages is not None]
        keys: dict[int, bytes] = {}
        texts = self._render_texts(requests, chat, keys)
        encoded = dict(zip(chat, self.encoder.encode([texts[i] for i in chat]), strict=True))
        prompts = []
        for i, req in enumerate(requests):
            if i in encoded:
                ids, starts = encoded[i]
                segments, chunks = self._spans(texts[i], starts, req, keys.get(i)) if spans else ((), ())
                prompts.append(Prompt(req, as_token_ids(ids), segments, chunks, exact=True))
            elif req.prompt is not None:
                prompts.append(self._raw_prompt(req))
            else:
                prompts.append(raw_ids_prompt(req))
        return prompts

    @staticmethod
    def _spans(text: str, starts: np.ndarray, req: Request, tools_key: bytes | None) -> tuple[Any, Any]:
        return assign(text, starts, locate(text, req.messages, req.tools, tools_key=tools_key))

    def _raw_prompt(self, req: Request) -> Prompt:
        # A text prompt sent to /v1/completions is encoded with the tokenizer's special tokens
        # (BOS for Llama/Mistral-style tokenizers, nothing for Qwen).
        assert req.prompt is not None
        tokens = as_token_ids(self.backend.encode(req.prompt, add_special_tokens=True).ids)
        self.encoder.stats.count(False)
        seg = Segment("raw", 0, len(tokens), segment_hash(req.prompt))
        return Prompt(req, tokens, (seg,), (), exact=True)


def from_spec(
    spec: str, rest: str, *, chat_template: str | None = None, template_kwargs: dict[str, Any] | None = None
) -> HFRenderer:
    """``hf:PATH`` or ``hf:ORG/NAME`` (a hub id, from the local cache; its name is kept as given)."""
    from prefixplan.render.resolve import resolve_hf

    folder = resolve_hf(rest)
    hf = HFRenderer(folder, chat_template=chat_template, template_kwargs=template_kwargs)
    if str(folder) != rest:
        hf.spec, hf.label = spec, f"hf:{rest}"
    return hf
