"""``mistral:NAME`` — Mistral tokenizers shipped inside the ``mistral-common`` wheel.

The embedded default (``mistral:nemo``) is the tokenizer of Mistral-Nemo-Instruct-2407
(tekken, instruct v3), bundled with mistral-common under Apache-2.0: it works offline right
after ``pip install`` with no flags. Token ids come from mistral-common's own
``encode_chat_completion``, which is what vLLM computes with ``--tokenizer-mode mistral``.

Spans are found by decoding each token to its bytes (control tokens to their text, e.g.
``[INST]``) and locating message contents in the decoded text.

Incremental encoding (the default; ``incremental=False`` or ``PREFIXPLAN_INCREMENTAL=0`` turns it
off): :mod:`prefixplan.render.mistral_fast` lets mistral-common encode each distinct text part once
(the system prompt before a new question, the tool list, earlier turns), with the same ids.

Note for users: Mistral's v3 format puts the system prompt and the tool list in front of the
*last* user message, so multi-turn conversations share less than with ChatML templates.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from prefixplan.core.hashes import segment_hash
from prefixplan.core.types import Prompt, Request, Segment, as_token_ids
from prefixplan.errors import TokenizerError
from prefixplan.render.engine_ids import raw_ids_prompt
from prefixplan.render.incremental import EncodeStats
from prefixplan.render.spans import assign, byte_starts_to_char_starts, locate

# name -> (factory method name, kwargs, description)
MODELS: dict[str, tuple[str, dict[str, Any], str]] = {
    "nemo": ("v3", {"is_tekken": True}, "Mistral-Nemo-Instruct-2407 (tekken, instruct v3)"),
    "v3": ("v3", {}, "Mistral-7B-Instruct-v0.3 (sentencepiece, instruct v3)"),
    "v7": ("v7", {}, "Mistral-Large-Instruct-2411 (sentencepiece, instruct v7)"),
}
DEFAULT = "nemo"


class MistralRenderer:
    exact = True

    def __init__(self, name: str = DEFAULT, *, incremental: bool | None = None) -> None:
        if name not in MODELS:
            raise TokenizerError(
                f"mistral:{name}: unknown; choose one of {', '.join(MODELS)}",
                hint=f"e.g. --tokenizer mistral:{DEFAULT}",
            )
        try:
            from mistral_common.tokens.tokenizers.base import SpecialTokenPolicy
            from mistral_common.tokens.tokenizers.mistral import MistralTokenizer
        except ImportError as exc:  # pragma: no cover - dependency of the package
            raise TokenizerError("mistral-common is not installed") from exc
        method, kwargs, desc = MODELS[name]
        self.tokenizer = getattr(MistralTokenizer, method)(**kwargs)
        self._raw = self.tokenizer.instruct_tokenizer.tokenizer
        self._keep = SpecialTokenPolicy.KEEP
        self.spec = f"mistral:{name}"
        self.label = f"mistral:{name} ({desc})"
        self._pieces: dict[int, bytes] = {}
        h = hashlib.sha256()
        h.update(self.spec.encode())
        path = getattr(self._raw, "file_path", None)
        if path:
            with open(path, "rb") as fh:
                h.update(fh.read())
        self.fingerprint = "tok1:" + h.hexdigest()[:32]
        self.stats = EncodeStats()
        if incremental is None:
            incremental = os.environ.get("PREFIXPLAN_INCREMENTAL", "1") != "0"
        self._encoder = None
        if incremental:
            from prefixplan.render.mistral_fast import install

            self._encoder = install(self.tokenizer)
        self._text = None
        if self._encoder is not None and self._encoder._direct is not None:
            from prefixplan.render.mistral_fast import TekkenText

            special = int(self._raw.num_special_tokens)
            self._text = TekkenText(self._encoder._direct, special, self._piece)

    def encode_stats(self) -> dict[str, int]:
        """Chat requests rendered so far whose ids reused an earlier encode (``incremental``)
        and those encoded entirely for themselves (``full``)."""
        return self.stats.as_dict()

    def _piece(self, tid: int) -> bytes:
        piece = self._pieces.get(tid)
        if piece is None:
            byte_piece = getattr(self._raw, "id_to_byte_piece", None)
            piece = byte_piece(tid, self._keep) if byte_piece is not None else _sentencepiece_bytes(self._raw, tid)
            self._pieces[tid] = piece
        return piece

    def decode_with_starts(self, ids: Sequence[int]) -> tuple[str, np.ndarray]:
        """The text of ``ids`` (control tokens as their names) and each token's first char."""
        pieces = [self._piece(int(t)) for t in ids]
        lengths = np.fromiter((len(p) for p in pieces), dtype=np.int64, count=len(pieces))
        byte_starts = np.concatenate(([0], np.cumsum(lengths)[:-1])) if len(pieces) else lengths
        data = b"".join(pieces)
        starts = byte_starts_to_char_starts(data, byte_starts)
        return data.decode("utf-8", errors="replace"), starts

    def encode_text(self, text: str, *, add_special_tokens: bool = False) -> tuple[np.ndarray, np.ndarray]:
        ids = self._raw.encode(text, bos=add_special_tokens, eos=False)
        _, starts = self.decode_with_starts(ids)
        return as_token_ids(ids), starts

    def render(self, request: Request) -> Prompt:
        if request.messages is None:
            if request.prompt is not None:
                tokens = as_token_ids(self._raw.encode(request.prompt, bos=True, eos=False))
                self.stats.count(False)
                return Prompt(request, tokens, (Segment("raw", 0, len(tokens), segment_hash(request.prompt)),))
            return raw_ids_prompt(request)
        from mistral_common.protocol.instruct.request import ChatCompletionRequest

        try:
            messages: Any = [_clean_message(m) for m in request.messages]
            tools: Any = list(request.tools) if request.tools else None
            chat: Any = ChatCompletionRequest(messages=messages, tools=tools)
            if self._encoder is not None:
                self._encoder.begin()
            ids = self.tokenizer.encode_chat_completion(chat).tokens
        except Exception as exc:  # pydantic validation, mistral-common request rules
            raise TokenizerError(f"{request.source}:{request.line_no}: mistral rendering failed: {exc}") from exc
        tokens = as_token_ids(ids)
        if self._encoder is None:
            self.stats.count(False)
            text, starts = self.decode_with_starts(ids)
            spans = locate(text, request.messages, request.tools)
        else:
            self.stats.count(self._encoder.reused)
            if self._text is not None:
                text, starts = self._text.decode(tokens, self._encoder.calls)
            else:
                text, starts = self.decode_with_starts(ids)
            spans = locate(text, request.messages, request.tools, tools_key=_tools_key(request.tools))
        segments, chunks = assign(text, starts, spans)
        return Prompt(request, tokens, segments, chunks, exact=True)

    def render_many(self, requests: Sequence[Request]) -> list[Prompt]:
        return [self.render(r) for r in requests]


_BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")


def _sentencepiece_bytes(raw: Any, tid: int) -> bytes:
    """The bytes a SentencePiece token stands for (mistral-common's ``SentencePieceTokenizer``
    has no ``id_to_byte_piece``): a byte-fallback piece ``<0xNN>`` its byte, a control token its
    name (``[INST]``), any other piece its text with ``▁`` as a space. A text encoded on its own
    starts with SentencePiece's dummy-prefix ``▁``, so the decoded prompt has a space there; the
    span finder locates message contents, which that space does not change."""
    piece = str(raw.id_to_piece(tid))
    model = getattr(raw, "_model", None)
    if model is not None and model.IsControl(tid):
        return piece.encode("utf-8")
    m = _BYTE_PIECE.fullmatch(piece)
    if m is not None and (model is None or model.IsByte(tid)):
        return bytes([int(m.group(1), 16)])
    return piece.replace("\u2581", " ").encode("utf-8")


def _tools_key(tools: Sequence[dict[str, Any]] | None) -> bytes | None:
    """The tool list's JSON bytes (the span finder's key for its cached tool texts), or None."""
    if not tools:
        return None
    import orjson

    try:
        return orjson.dumps(list(tools))
    except TypeError:
        return None


def _clean_message(message: dict[str, Any]) -> dict[str, Any]:
    """Drop fields mistral-common's request model rejects (names, reasoning, metadata)."""
    allowed = {"role", "content", "tool_calls", "tool_call_id", "name"}
    out = {k: v for k, v in message.items() if k in allowed}
    if out.get("role") == "developer":
        out["role"] = "system"
    if out.get("role") != "tool":
        out.pop("name", None)
        out.pop("tool_call_id", None)
    return out


def from_spec(spec: str, rest: str) -> MistralRenderer:
    """``mistral:NAME`` (default ``nemo``)."""
    return MistralRenderer(rest or "nemo")
