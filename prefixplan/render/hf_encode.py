"""Token ids of rendered prompts for ``hf:`` tokenizers: whole, by piece, or incrementally.

A fast (Rust) tokenizer splits text on its added tokens (``<|im_start|>`` …) before normalising
and pre-tokenising, so the text between two added tokens is encoded independently of its
neighbours. :class:`HFEncoder` splits a rendered prompt the same way and encodes each piece
apart:

- ``incremental`` (the default): each piece through a
  :class:`~prefixplan.render.incremental.SegmentEncoder`, which also cuts pieces where the
  tokenizer family's proved rule allows (:mod:`prefixplan.render.boundaries`) and reuses known
  prefixes and lines;
- otherwise the earlier piece cache: pieces looked up whole, long ones split after blank lines
  when a probe of many paragraph shapes found that safe.

When an added token has ``lstrip``/``rstrip``/``single_word`` set (or is normalised without
being special), or a probe finds a piece that encodes differently alone (a pre-tokenizer that
marks only the start of the text), splitting is not equivalent and whole prompts are encoded
(exact, slower).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from itertools import chain
from typing import Any

import numpy as np

from prefixplan.core.types import as_token_ids
from prefixplan.render.boundaries import hf_split_patterns, rule_for_hf
from prefixplan.render.incremental import EncodeStats, Item, SegmentEncoder, join_ids
from prefixplan.render.pieces import PieceCache
from prefixplan.render.spans import byte_starts_to_char_starts, join_pieces, offset_starts
from prefixplan.render.words import WordEncoder

# Pieces longer than this are split at paragraph boundaries (when safe for the tokenizer).
PARAGRAPH_SPLIT_MIN_CHARS = 1024
_PARAGRAPH_BOUNDARY = re.compile(r"\n\n(?=\S)")


def byte_lengths(backend: Any) -> np.ndarray | None:
    """Bytes of text per token id for byte-level BPE vocabularies (each character of a
    byte-level token string stands for one byte; added tokens are literal text), or None.

    With it, token start offsets come from a cumulative sum instead of the tokenizer's
    per-token offset tuples, which are slow to fetch from Python (a snapshot keeps the table:
    :mod:`prefixplan.render.hf_snapshot`)."""
    from tokenizers.decoders import ByteLevel

    if not isinstance(backend.decoder, ByteLevel):
        return None
    vocab = backend.get_vocab(with_added_tokens=False)
    ids = np.fromiter(vocab.values(), dtype=np.int64, count=len(vocab))
    top = int(ids.max()) + 1 if ids.shape[0] else 0
    size = max(backend.get_vocab_size(with_added_tokens=True), top)
    lengths = np.zeros(size, dtype=np.int64)
    lengths[ids] = np.fromiter(map(len, vocab), dtype=np.int64, count=len(vocab))
    for tid, added in backend.get_added_tokens_decoder().items():
        if tid < size:
            lengths[tid] = len(added.content.encode("utf-8"))
    return lengths


class HFEncoder:
    """Encode rendered prompts with a ``tokenizers.Tokenizer`` (module docstring)."""

    def __init__(
        self,
        backend: Any,
        *,
        piece_cache_tokens: int = 8_000_000,
        split_pieces: bool = True,
        paragraph_split: bool = True,
        incremental: bool = True,
        byte_len: np.ndarray | None = None,
    ) -> None:
        self.backend = backend
        self.cache = PieceCache(piece_cache_tokens)
        self.stats = EncodeStats()
        self.split_re, self.added_ids, safe = self._added_token_splitter()
        # the same alternatives in a group: ``split`` returns the added tokens between the pieces
        self._split_parts = re.compile(f"({self.split_re.pattern})") if self.split_re is not None else None
        self._special_items = {
            tid: (as_token_ids(np.array([tid], dtype=np.uint32)), np.zeros(1, dtype=np.int64))
            for tid in self.added_ids.values()
        }
        self.split_pieces = split_pieces and safe and self._pieces_are_safe()
        self.byte_len = byte_lengths(backend) if byte_len is None else byte_len
        self.incremental = incremental and self.split_pieces and self.split_re is not None
        self.paragraph_split = (
            not self.incremental and paragraph_split and self.split_pieces and self._paragraph_boundaries_are_safe()
        )
        rule = rule_for_hf(backend) if self.incremental else None
        self.segments = SegmentEncoder(self.encode_fresh, rule, self.cache)
        patterns = hf_split_patterns(backend) if rule is not None and self.byte_len is not None else None
        self.words = WordEncoder.for_backend(backend, patterns) if patterns else None

    # -- what the tokenizer gives ---------------------------------------------------------
    def encode_one(self, enc: Any, text: str) -> Item:
        """(ids, first-char offsets) of an Encoding of ``text``."""
        ids = as_token_ids(enc.ids)
        if self.byte_len is not None and ids.size and int(ids.max()) < self.byte_len.size:
            lens = self.byte_len[ids]
            data = text.encode("utf-8", "surrogatepass")
            ends = np.cumsum(lens)
            if int(ends[-1]) == len(data):  # no normalisation changed the bytes
                return ids, byte_starts_to_char_starts(data, ends - lens)
        return ids, offset_starts(enc.offsets)

    def encode_fresh(self, texts: list[str]) -> list[Item]:
        """Encode ``texts``: ASCII texts word by word where :attr:`words` is set
        (:mod:`prefixplan.render.words`), the others through the tokenizer in one batch."""
        if self.words is None:
            return self._encode_lists(
                texts, [enc.ids for enc in self.backend.encode_batch(texts, add_special_tokens=False)]
            )
        known = self.words.encode(texts)
        rest = [text for text, ids in zip(texts, known, strict=True) if ids is None]
        if rest:
            encs = iter(self.backend.encode_batch(rest, add_special_tokens=False))
            known = [ids if ids is not None else next(encs).ids for ids in known]
        return self._encode_lists(texts, known)  # type: ignore[arg-type]

    def _encode_lists(self, texts: list[str], lists: list[list[int]]) -> list[Item]:
        """(ids, first-char offsets) of ``texts`` from their token ids; offsets for the whole
        batch in one vectorised pass when every text's token bytes are its UTF-8 bytes (no
        normalisation changed them), else from the tokenizer's offsets."""
        counts = np.fromiter(map(len, lists), dtype=np.int64, count=len(lists))
        ids = as_token_ids(np.fromiter(chain.from_iterable(lists), dtype=np.uint32, count=int(counts.sum())))
        lens = (
            self.byte_len[ids]
            if self.byte_len is not None and ids.size and int(ids.max()) < self.byte_len.size
            else None
        )
        if lens is not None:
            sizes = np.fromiter((len(t.encode("utf-8", "surrogatepass")) for t in texts), np.int64, len(texts))
            bounds = np.cumsum(counts)
            ends = np.cumsum(lens)
            token_bytes = np.diff(np.concatenate(([0], ends))[np.concatenate(([0], bounds))])
            if np.array_equal(token_bytes, sizes):
                data = "".join(texts).encode("utf-8", "surrogatepass")
                starts = byte_starts_to_char_starts(data, ends - lens)
                chars = np.cumsum([0] + [len(t) for t in texts[:-1]])
                starts -= np.repeat(chars, counts)
                cuts = bounds[:-1]  # copies: a cached piece must not keep its whole batch alive
                return [(a.copy(), b.copy()) for a, b in zip(np.split(ids, cuts), np.split(starts, cuts), strict=True)]
        encs = self.backend.encode_batch(texts, add_special_tokens=False)
        return [self.encode_one(enc, text) for enc, text in zip(encs, texts, strict=True)]

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

    def _pieces_are_safe(self) -> bool:
        """Probe: the text around an added token encodes alone as it does in the whole prompt.
        Flags on the added tokens are not the whole story: a pre-tokenizer that marks only the
        start of the text (Metaspace with ``prepend_scheme: first``) gives a piece a leading
        ``▁`` it does not have mid-prompt. Any difference renders prompts whole (slower, exact)."""
        if self.split_re is None:
            return True
        backend = self.backend
        texts = ["\n", "hello", " hi there", "\nuser\n", "a\n\nb", "  x"]
        for tok, tid in list(self.added_ids.items())[:64]:
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
        """Probe (the piece-cache path): encode(a + b) == encode(a) + encode(b) for paragraph
        ends ``a`` (ending in a blank line) and starts ``b`` of many shapes."""
        ends = ["end of text.\n\n", "word\n\n", "x  \n\n", "1234\n\n", "```\n\n", "。\n\n", "a\n \n\n"]
        ends += ["tab\t\n\n", "- item\n\n", "quote'\n\n", "\n\n", "é\n\n"]
        starts = ["Next", "next", "1. item", "- bullet", "# Heading", "`code`", "(paren", "'s quote", "日本語"]
        starts += ["<tag>", '{"k": 1}', "A", "_x", "é", "!", "Ünï", "http://x.y", "42"]
        pairs = [(a, b) for a in ends for b in starts]
        joint = self.backend.encode_batch([a + b for a, b in pairs], add_special_tokens=False)
        left = self.backend.encode_batch([a for a, _ in pairs], add_special_tokens=False)
        right = self.backend.encode_batch([b for _, b in pairs], add_special_tokens=False)
        return all(j.ids == a.ids + b.ids for j, a, b in zip(joint, left, right, strict=False))

    # -- prompts --------------------------------------------------------------------------
    def encode(self, texts: Sequence[str], *, count: bool = True, starts: bool = True) -> list[Item]:
        """(ids, first-char offsets) of each rendered prompt; with ``count``, each is counted
        in :attr:`stats`; ``starts=False``: the offsets may be left empty (a caller that locates
        no spans)."""
        stats = self.stats if count else EncodeStats()
        if self.incremental:
            return self._encode_incremental(texts, stats, starts)
        if self.split_pieces and self.split_re is not None:
            return self._encode_pieces(texts, stats)
        out: list[Item] = []
        for text in texts:
            enc = self.backend.encode(text, add_special_tokens=False)
            out.append((as_token_ids(enc.ids), offset_starts(enc.offsets)))  # the reference: tokenizer offsets
            stats.count(False)
        return out

    def _layout(self, text: str) -> list[tuple[str, int, int | None]]:
        """``text`` split at added tokens: (piece, char offset, added token id or None)."""
        assert self._split_parts is not None
        added = self.added_ids
        layout: list[tuple[str, int, int | None]] = []
        pos = 0
        special = False  # the split alternates: text between added tokens, then an added token
        for part in self._split_parts.split(text):
            if special:
                layout.append((part, pos, added[part]))
            elif part:
                layout.append((part, pos, None))
            pos += len(part)
            special = not special
        return layout

    def _encode_incremental(self, texts: Sequence[str], stats: EncodeStats, starts: bool = True) -> list[Item]:
        layouts = [self._layout(text) for text in texts]
        pieces = list(dict.fromkeys(piece for layout in layouts for piece, _, special in layout if special is None))
        encoded = dict(zip(pieces, self.segments.encode_many(pieces), strict=True))
        used: set[str] = set()  # pieces encoded in this batch for an earlier prompt of it
        out: list[Item] = []
        for layout in layouts:
            items: list[Item] = []
            offsets: list[int] = []
            reused = False
            for piece, offset, special in layout:
                if special is not None:
                    items.append(self._special_items[special])
                    offsets.append(offset)
                    continue
                chunks, hit = encoded[piece]
                reused = reused or hit or piece in used
                used.add(piece)
                for item, at in chunks:
                    items.append(item)
                    offsets.append(offset + at)
            stats.count(reused)
            out.append(join_pieces(items, offsets) if starts else join_ids(items, offsets))
        return out

    @staticmethod
    def _paragraphs(piece: str) -> list[str]:
        """``piece`` cut after blank lines (before a non-space, non-combining character)."""
        parts: list[str] = []
        pos = 0
        for m in _PARAGRAPH_BOUNDARY.finditer(piece):
            end = m.end()
            if end < len(piece) and not unicodedata.combining(piece[end]) and end > pos:
                parts.append(piece[pos:end])
                pos = end
        parts.append(piece[pos:])
        return parts

    def _encode_pieces(self, texts: Sequence[str], stats: EncodeStats) -> list[Item]:
        """The piece-cache path: encode several texts, sharing the piece cache and batching
        cache misses. A long piece is looked up whole first; it is split into paragraphs only
        when not cached whole, and is cached whole once all its paragraphs were known."""
        layouts = [self._layout(text) for text in texts]
        missing: dict[str, None] = {}
        wholes: dict[str, list[str]] = {}  # long piece not cached whole -> its paragraphs
        cache = self.cache
        reused = [False] * len(layouts)
        for k, layout in enumerate(layouts):
            for piece, _, special in layout:
                if special is not None:
                    continue
                if piece in missing or piece in wholes:
                    reused[k] = True
                    continue
                if cache.get(piece) is not None:
                    reused[k] = True
                    continue
                if self.paragraph_split and len(piece) >= PARAGRAPH_SPLIT_MIN_CHARS:
                    parts = self._paragraphs(piece)
                    if len(parts) > 1:
                        wholes[piece] = parts
                        for part in parts:
                            if part not in missing and cache.get(part) is None:
                                missing[part] = None
                            else:
                                reused[k] = True
                        continue
                missing[piece] = None
        fresh: dict[str, Item] = {}
        if missing:
            pieces = list(missing)
            encs = self.backend.encode_batch(pieces, add_special_tokens=False)
            for piece, enc in zip(pieces, encs, strict=False):
                item = self.encode_one(enc, piece)
                fresh[piece] = item
                cache.put(piece, item)
        for piece, parts in wholes.items():
            items = [self._cached(part, fresh) for part in parts]
            whole = join_pieces(items, np.cumsum([0] + [len(p) for p in parts[:-1]]))
            fresh[piece] = whole
            if not any(part in missing for part in parts):  # every paragraph seen before: a recurring piece
                cache.put(piece, whole)
        out: list[Item] = []
        for k, layout in enumerate(layouts):
            items = []
            offsets = []
            for piece, offset, special in layout:
                items.append(self._special_items[special] if special is not None else self._cached(piece, fresh))
                offsets.append(offset)
            stats.count(reused[k])
            out.append(join_pieces(items, offsets))
        return out

    def _cached(self, piece: str, fresh: dict[str, Item]) -> Item:
        got = fresh.get(piece) or self.cache.get(piece)
        if got is None:  # evicted between lookup and use: encode directly
            got = self.encode_one(self.backend.encode(piece, add_special_tokens=False), piece)
        return got
