"""``hf:PATH`` — a local Hugging Face tokenizer folder and its chat template.

Exactness: the token ids equal ``tokenizer.apply_chat_template(messages, tools=tools,
add_generation_prompt=True, tokenize=True)``, which is what vLLM's chat endpoints and
``/tokenize`` compute for the same tokenizer and template.

Speed: a fast (Rust) tokenizer splits text on its added tokens (``<|im_start|>`` …) before
normalising and pre-tokenising, so the text between two added tokens is encoded
independently of its neighbours. The renderer splits the rendered prompt the same way and
encodes each distinct piece once (an LRU cache bounded by tokens), so the shared system
prompt and tool block of most requests are tokenized once. When an added token has
``lstrip``/``rstrip``/``single_word``/``normalized`` set, splitting is not provably
equivalent and the renderer encodes whole prompts instead (still exact, slower). Tests
compare both paths against ``apply_chat_template`` token for token.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
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
from prefixplan.render.pieces import PieceCache
from prefixplan.render.spans import assign, byte_starts_to_char_starts, join_pieces, locate, offset_starts
from prefixplan.render.tojson_memo import install as install_tojson_memo
from prefixplan.render.tojson_memo import tojson_memo

# Pieces longer than this are split at paragraph boundaries (when safe for the tokenizer).
PARAGRAPH_SPLIT_MIN_CHARS = 1024
_PARAGRAPH_BOUNDARY = re.compile(r"\n\n(?=\S)")


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
    ) -> None:
        path = Path(path)
        if not (path / "tokenizer.json").is_file() and not (path / "tokenizer_config.json").is_file():
            raise TokenizerError(
                f"hf:{path}: not a tokenizer folder (no tokenizer.json or tokenizer_config.json)",
                hint="pass a local folder saved with tokenizer.save_pretrained()",
            )
        import os

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
        self.cache = PieceCache(piece_cache_tokens)
        self._split_re, self._added_ids, safe = self._added_token_splitter()
        self._special_items = {
            tid: (as_token_ids(np.array([tid], dtype=np.uint32)), np.zeros(1, dtype=np.int64))
            for tid in self._added_ids.values()
        }
        self.split_pieces = split_pieces and safe and self._pieces_are_safe()
        self.fingerprint = self._fingerprint()
        templates = self.tokenizer.chat_template
        for template in templates.values() if isinstance(templates, dict) else (templates,):
            if isinstance(template, str):
                install_tojson_memo(template)
        self._byte_len = self._byte_lengths()
        self._paragraph_split = paragraph_split and self._paragraph_boundaries_are_safe()

    # -- identity -------------------------------------------------------------------------
    def _fingerprint(self) -> str:
        h = hashlib.sha256()
        h.update(self.backend.to_str().encode())
        h.update(b"\0template\0")
        h.update(str(self.tokenizer.chat_template).encode())
        h.update(b"\0kwargs\0")
        h.update(json.dumps(self.template_kwargs, sort_keys=True, default=str).encode())
        return "tok1:" + h.hexdigest()[:32]

    def _byte_lengths(self) -> np.ndarray | None:
        """Bytes of text per token id for byte-level BPE vocabularies (each character of a
        byte-level token string stands for one byte; added tokens are literal text), or None.

        With it, token start offsets come from a cumulative sum instead of the tokenizer's
        per-token offset tuples, which are slow to fetch from Python."""
        from tokenizers.decoders import ByteLevel

        if not isinstance(self.backend.decoder, ByteLevel):
            return None
        vocab = self.backend.get_vocab(with_added_tokens=False)
        ids = np.fromiter(vocab.values(), dtype=np.int64, count=len(vocab))
        top = int(ids.max()) + 1 if ids.shape[0] else 0
        size = max(self.backend.get_vocab_size(with_added_tokens=True), top)
        lengths = np.zeros(size, dtype=np.int64)
        lengths[ids] = np.fromiter(map(len, vocab), dtype=np.int64, count=len(vocab))
        for tid, added in self.backend.get_added_tokens_decoder().items():
            if tid < size:
                lengths[tid] = len(added.content.encode("utf-8"))
        return lengths

    def _encode_one(self, enc: Any, text: str) -> tuple[np.ndarray, np.ndarray]:
        """(ids, first-char offsets) of an Encoding of ``text``."""
        ids = as_token_ids(enc.ids)
        if self._byte_len is not None and ids.size and int(ids.max()) < self._byte_len.size:
            lens = self._byte_len[ids]
            data = text.encode("utf-8", "surrogatepass")
            ends = np.cumsum(lens)
            if int(ends[-1]) == len(data):  # no normalisation changed the bytes
                return ids, byte_starts_to_char_starts(data, ends - lens)
        return ids, offset_starts(enc.offsets)

    def _added_token_splitter(self) -> tuple[re.Pattern[str] | None, dict[str, int], bool]:
        decoder = self.backend.get_added_tokens_decoder()
        ids: dict[str, int] = {}
        safe = True
        for tid, tok in decoder.items():
            ids[tok.content] = tid
            if tok.lstrip or tok.rstrip or tok.single_word or (tok.normalized and not tok.special):
                safe = False
        if not ids:
            return None, ids, safe
        alternatives = sorted(ids, key=len, reverse=True)
        return re.compile("|".join(re.escape(a) for a in alternatives)), ids, safe

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
        if add_special_tokens or not self.split_pieces or self._split_re is None:
            enc = self.backend.encode(text, add_special_tokens=add_special_tokens)
            return self._encode_one(enc, text)
        return self._encode_pieces([text])[0]

    @staticmethod
    def _paragraphs(piece: str) -> list[str]:
        """``piece`` cut after blank lines (before a non-space, non-combining character).

        Only used when :meth:`_paragraph_boundaries_are_safe` showed that the tokenizer's
        pre-tokenizer always splits there, so encoding the parts equals encoding the whole;
        a document pasted into many different questions is then tokenized once.
        """
        parts: list[str] = []
        pos = 0
        for m in _PARAGRAPH_BOUNDARY.finditer(piece):
            end = m.end()
            if end < len(piece) and not unicodedata.combining(piece[end]) and end > pos:
                parts.append(piece[pos:end])
                pos = end
        parts.append(piece[pos:])
        return parts

    def _pieces_are_safe(self) -> bool:
        """Probe: the text around an added token encodes alone as it does in the whole prompt.
        Flags on the added tokens are not the whole story: a pre-tokenizer that marks only the
        start of the text (Metaspace with ``prepend_scheme: first``) gives a piece a leading
        ``▁`` it does not have mid-prompt. Any difference renders prompts whole (slower, exact)."""
        if self._split_re is None:
            return True
        backend = self.backend
        texts = ["\n", "hello", " hi there", "\nuser\n", "a\n\nb", "  x"]
        for tok, tid in list(self._added_ids.items())[:64]:
            for left in ("text", "x\n"):
                for right in texts:
                    whole = backend.encode(left + tok + right, add_special_tokens=False).ids
                    parts = [
                        *backend.encode(left, add_special_tokens=False).ids,
                        tid,
                        *backend.encode(right, add_special_tokens=False).ids,
                    ]
                    if whole != parts:
                        return False
        return True

    def _paragraph_boundaries_are_safe(self) -> bool:
        """Probe: encode(a + b) == encode(a) + encode(b) for paragraph ends ``a`` (ending in
        a blank line) and starts ``b`` of many shapes. Any difference disables the split."""
        if not self.split_pieces:
            return False
        ends = [
            "end of text.\n\n",
            "word\n\n",
            "x  \n\n",
            "1234\n\n",
            "```\n\n",
            "。\n\n",
            "a\n \n\n",
            "tab\t\n\n",
            "- item\n\n",
            "quote'\n\n",
            "\n\n",
            "é\n\n",
        ]
        starts = [
            "Next",
            "next",
            "1. item",
            "- bullet",
            "# Heading",
            "`code`",
            "(paren",
            "'s quote",
            "日本語",
            "<tag>",
            '{"k": 1}',
            "A",
            "_x",
            "é",
            "!",
            "Ünï",
            "http://x.y",
            "42",
        ]
        pairs = [(a, b) for a in ends for b in starts]
        joint = self.backend.encode_batch([a + b for a, b in pairs], add_special_tokens=False)
        left = self.backend.encode_batch([a for a, _ in pairs], add_special_tokens=False)
        right = self.backend.encode_batch([b for _, b in pairs], add_special_tokens=False)
        return all(j.ids == a.ids + b.ids for j, a, b in zip(joint, left, right, strict=False))

    def _encode_pieces(self, texts: Sequence[str]) -> list[tuple[np.ndarray, np.ndarray]]:
        """Encode several texts, sharing the piece cache and batching cache misses.

        A long piece (a system prompt, a document) is looked up whole first; it is split into
        paragraphs only when not cached whole, and is cached whole once all its paragraphs
        were known (a piece that recurs), so a recurring system prompt costs one lookup."""
        assert self._split_re is not None
        layouts: list[list[tuple[str, int, int | None]]] = []  # (piece, char offset, special id)
        missing: dict[str, None] = {}
        wholes: dict[str, list[str]] = {}  # long piece not cached whole -> its paragraphs
        cache = self.cache
        for text in texts:
            layout: list[tuple[str, int, int | None]] = []
            pos = 0
            for m in self._split_re.finditer(text):
                if m.start() > pos:
                    layout.append((text[pos : m.start()], pos, None))
                layout.append((m.group(0), m.start(), self._added_ids[m.group(0)]))
                pos = m.end()
            if pos < len(text):
                layout.append((text[pos:], pos, None))
            for piece, _, special in layout:
                if special is not None or piece in missing or piece in wholes or cache.get(piece) is not None:
                    continue
                if self._paragraph_split and len(piece) >= PARAGRAPH_SPLIT_MIN_CHARS:
                    parts = self._paragraphs(piece)
                    if len(parts) > 1:
                        wholes[piece] = parts
                        for part in parts:
                            if part not in missing and cache.get(part) is None:
                                missing[part] = None
                        continue
                missing[piece] = None
            layouts.append(layout)
        fresh: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        if missing:
            pieces = list(missing)
            encs = self.backend.encode_batch(pieces, add_special_tokens=False)
            for piece, enc in zip(pieces, encs, strict=False):
                item = self._encode_one(enc, piece)
                fresh[piece] = item
                cache.put(piece, item)
        for piece, parts in wholes.items():
            items = [self._cached(part, fresh) for part in parts]
            whole = join_pieces(items, np.cumsum([0] + [len(p) for p in parts[:-1]]))
            fresh[piece] = whole
            if not any(part in missing for part in parts):  # every paragraph seen before: a recurring piece
                cache.put(piece, whole)
        out: list[tuple[np.ndarray, np.ndarray]] = []
        for layout in layouts:
            items = []
            offsets = []
            for piece, offset, special in layout:
                items.append(self._special_items[special] if special is not None else self._cached(piece, fresh))
                offsets.append(offset)
            out.append(join_pieces(items, offsets))
        return out

    def _cached(self, piece: str, fresh: dict[str, tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
        got = fresh.get(piece) or self.cache.get(piece)
        if got is None:  # evicted between lookup and use: encode directly
            got = self._encode_one(self.backend.encode(piece, add_special_tokens=False), piece)
        return got

    def render(self, request: Request) -> Prompt:
        return self.render_many([request])[0]

    def render_many(self, requests: Sequence[Request]) -> list[Prompt]:
        """Render a batch of requests (chat, raw text or token-id prompts)."""
        chat = [i for i, req in enumerate(requests) if req.messages is not None]
        keys: dict[int, bytes] = {}
        texts = self._render_texts(requests, chat, keys)
        if self.split_pieces and self._split_re is not None:
            encoded = dict(zip(chat, self._encode_pieces([texts[i] for i in chat]), strict=False))
        else:
            encoded = {}
            for i in chat:
                enc = self.backend.encode(texts[i], add_special_tokens=False)
                encoded[i] = (
                    as_token_ids(enc.ids),
                    offset_starts(enc.offsets),
                )  # the reference path: tokenizer offsets
        prompts = []
        for i, req in enumerate(requests):
            if i in encoded:
                ids, starts = encoded[i]
                text = texts[i]
                spans = locate(text, req.messages, req.tools, tools_key=keys.get(i))
                segments, chunks = assign(text, starts, spans)
                prompts.append(Prompt(req, as_token_ids(ids), segments, chunks, exact=True))
            elif req.prompt is not None:
                prompts.append(self._raw_prompt(req))
            else:
                prompts.append(raw_ids_prompt(req))
        return prompts

    def _raw_prompt(self, req: Request) -> Prompt:
        # A text prompt sent to /v1/completions is encoded with the tokenizer's special tokens
        # (BOS for Llama/Mistral-style tokenizers, nothing for Qwen).
        assert req.prompt is not None
        tokens = as_token_ids(self.backend.encode(req.prompt, add_special_tokens=True).ids)
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
