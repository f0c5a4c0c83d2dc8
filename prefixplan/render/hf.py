"""``hf:PATH`` — a local Hugging Face tokenizer folder and its chat template.

Exactness: the token ids equal ``tokenizer.apply_chat_template(messages, tools=tools,
add_generation_prompt=True, tokenize=True)``, which is what vLLM's chat endpoints and
``/tokenize`` compute for the same tokenizer and template.

Speed: the chat template renders the prompt text (once per batch of requests that share their
tools; from a folder's second load on without transformers, :mod:`prefixplan.render.hf_snapshot`);
:class:`~prefixplan.render.hf_encode.HFEncoder` encodes it piece by piece, each
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
from prefixplan.render import hf_snapshot
from prefixplan.render.chatnorm import engine_messages
from prefixplan.render.engine_ids import raw_ids_prompt
from prefixplan.render.hf_encode import HFEncoder
from prefixplan.render.hf_template import ChatTemplate, plain, semantics_available
from prefixplan.render.sandbox_memo import install as install_sandbox_memo
from prefixplan.render.sandbox_memo import install_environment as install_sandbox_environment
from prefixplan.render.spans import assign, locate
from prefixplan.render.tojson_memo import install as install_tojson_memo
from prefixplan.render.tojson_memo import install_filters as install_tojson_filters
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
        self.path = path
        self._chat_template = chat_template
        self._tokenizer: Any = None
        self.template_kwargs = dict(template_kwargs or {})
        snap = hf_snapshot.read(path, chat_template) if semantics_available() else None
        if snap is None or snap.semantics is None:
            tokenizer = self.tokenizer  # through transformers
            if not getattr(tokenizer, "chat_template", None):
                raise TokenizerError(
                    f"hf:{path}: the tokenizer has no chat template",
                    hint="pass --chat-template FILE",
                )
            backend: Any = getattr(tokenizer, "backend_tokenizer", None)
            if backend is None:
                raise TokenizerError(f"hf:{path}: only fast (tokenizer.json) tokenizers are supported")
            if snap is None and semantics_available():
                snap = hf_snapshot.make(path, tokenizer, chat_template)
            serialised = snap.backend if snap is not None else backend.to_str()
            templates: Any = tokenizer.chat_template
        else:
            backend = snap.tokenizer()
            serialised, templates = snap.backend, snap.chat_template
        self.template: ChatTemplate | None = None
        if snap is not None and snap.semantics is not None and plain(self.template_kwargs):
            assert snap.chat_template is not None  # a snapshot only agrees for a template
            variables = {**snap.special_tokens, **self.template_kwargs}
            self.template = ChatTemplate(snap.chat_template, variables, snap.semantics)
        self.backend = backend
        self.spec = f"hf:{path}"
        self.label = f"hf:{path.name}"
        if incremental is None:
            incremental = os.environ.get("PREFIXPLAN_INCREMENTAL", "1") != "0"
        self.encoder = HFEncoder(
            backend,
            piece_cache_tokens=piece_cache_tokens,
            split_pieces=split_pieces,
            paragraph_split=paragraph_split,
            incremental=incremental,
            byte_len=snap.byte_length_table() if snap is not None else None,
        )
        self.cache = self.encoder.cache
        self.split_pieces = self.encoder.split_pieces
        self.fingerprint = self._fingerprint(serialised, templates)
        if self.template is not None:
            install_tojson_filters(self.template.environment.filters)
            install_sandbox_environment(self.template.environment)
        else:
            for template in templates.values() if isinstance(templates, dict) else (templates,):
                if isinstance(template, str):
                    install_tojson_memo(template)
                    install_sandbox_memo(template)

    @property
    def tokenizer(self) -> Any:
        """The tokenizer as transformers loads it (imported on first use: a renderer made from
        a snapshot renders without it)."""
        if self._tokenizer is None:
            try:
                from transformers import AutoTokenizer
                from transformers.utils import logging as hf_logging

                hf_logging.set_verbosity_error()
                tokenizer = AutoTokenizer.from_pretrained(str(self.path), local_files_only=True)
            except Exception as exc:  # transformers raises many types here
                raise TokenizerError(f"hf:{self.path}: cannot load tokenizer: {exc}") from exc
            if self._chat_template is not None:
                tokenizer.chat_template = self._chat_template
            self._tokenizer = tokenizer
        return self._tokenizer

    @property
    def _paragraph_split(self) -> bool:
        """Whether long pieces are cut inside (after blank lines, or where the proved rule allows)."""
        return self.encoder.paragraph_split or self.encoder.segments.rule is not None

    def encode_stats(self) -> dict[str, int]:
        """Chat requests rendered so far whose ids reused an earlier encode (``incremental``)
        and those encoded entirely for themselves (``full``)."""
        return self.encoder.stats.as_dict()

    # -- identity -------------------------------------------------------------------------
    def _fingerprint(self, serialised: str, templates: Any) -> str:
        h = hashlib.sha256()
        h.update(serialised.encode())
        h.update(b"\0template\0")
        h.update(str(templates).encode())
        h.update(b"\0kwargs\0")
        h.update(json.dumps(self.template_kwargs, sort_keys=True, default=str).encode())
        return "tok1:" + h.hexdigest()[:32]

    # -- rendering ------------------------------------------------------------------------
    def render_text(self, request: Request) -> str:
        if request.messages is None:
            raise TokenizerError(f"{request.source}:{request.line_no}: not a chat request")
        messages = engine_messages(request.messages)
        tools = list(request.tools) if request.tools else None
        template = self.template if self.template is not None and plain(messages) and plain(tools) else None
        tokenizer: Any = self.tokenizer if template is None else None
        try:
            if template is not None:
                return template.render(messages, tools)
            return str(
                tokenizer.apply_chat_template(
                    messages, tools=tools, add_generation_prompt=True, tokenize=False, **self.template_kwargs
                )
            )
        except Exception as exc:  # jinja errors, template exceptions (raise_exception)
            raise TokenizerError(f"{request.source}:{request.line_no}: chat template failed: {exc}") from exc

    def _render_group(self, requests: Sequence[Request], idxs: list[int]) -> list[str] | None:
        """The texts of requests that share their tools, rendered together; None when that
        fails (each is then rendered alone, so the failure names its request)."""
        tools = requests[idxs[0]].tools
        tool_list = list(tools) if tools else None
        conversations = [engine_messages(requests[i].messages or ()) for i in idxs]
        try:
            with tojson_memo():  # each tool serialised once for the batch, not per conversation
                if self.template is not None and plain(tool_list) and all(plain(c) for c in conversations):
                    return self.template.render_many(conversations, tool_list)
                texts = self.tokenizer.apply_chat_template(
                    conversations, tools=tool_list, add_generation_prompt=True, tokenize=False, **self.template_kwargs
                )
        except Exception:  # the failing request is found (and named) alone
            return None
        return [str(t) for t in texts] if isinstance(texts, list) and len(texts) == len(idxs) else None

    def _render_texts(
        self, requests: Sequence[Request], chat: Sequence[int], keys: dict[int, bytes] | None = None
    ) -> dict[int, str]:
        """Chat-template texts of ``requests[i]`` for ``i`` in ``chat``. Requests with the same
        tools are rendered together (a batch of conversations shares its ``tools``), so the
        template input is prepared once per tool set, not per request (a long tool list made
        that a third of the template time); the text of each conversation is what a call of its
        own returns. ``keys`` receives each request's tool-set key (the tools' JSON bytes)."""
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
            texts = self._render_group(requests, idxs) if len(idxs) > 1 else None
            if texts is None:
                for i in idxs:
                    out[i] = self.render_text(requests[i])
                continue
            out.update(zip(idxs, texts, strict=True))
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
        encoded = dict(zip(chat, self.encoder.encode([texts[i] for i in chat], starts=spans), strict=True))
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
