"""Encode ASCII text word by word: each distinct pre-token through the tokenizer once.

A byte-level BPE tokenizer (``tokenizers``) normalises a text, splits it with its pre-tokenizer
pattern into pre-tokens, and runs BPE on each pre-token alone. So the ids of a text are the ids
of its pre-tokens, each encoded by itself, concatenated. Most of the encode time of new text is
the pattern match (the ``tokenizers`` Oniguruma engine, about 3 M chars/s per core on Qwen3's
pattern); the words themselves recur (the 297 k new characters of the bundled example are 69 k
pre-tokens, 7.8 k distinct).

:class:`WordEncoder` splits ASCII texts with the same pattern in Python's ``regex`` engine
(about 4x faster) and looks each pre-token up in a bounded memo; pre-tokens not in it are
encoded through the tokenizer itself, in one batch. It is exact where:

- the text is ASCII: NFC (the only normaliser the proved families use) leaves it unchanged, and
  the pattern's classes (``\\p{L}``, ``\\p{N}``, ``\\s``, the case-insensitive contractions) are
  fixed, small sets on ASCII;
- the pattern is one of :data:`ASCII_SAME` (Qwen2/Qwen3, Llama 3 / cl100k): both engines are
  backtracking matchers with ordered alternation, so on the same classes they make the same
  splits. ``tests/test_render_words.py`` checks every ASCII character in each position the
  pattern distinguishes and random ASCII texts against the tokenizer's own pre-tokenizer;
- a pre-token encoded alone is one pre-token again (checked for each new pre-token; a text with
  one that is not is encoded by the tokenizer whole).

New pre-tokens go straight to the tokenizer's model (``backend.model.tokenize``, the BPE step the
pipeline runs on each pre-token) after the byte-level mapping of their characters, read from the
tokenizer's own pre-tokenizer one ASCII character at a time; at construction a probe checks that
the mapping of a word is the concatenation of its characters' and that the model's ids equal a
full encode (every ASCII character alone and in words). Where the probe fails, new pre-tokens
are encoded in one call joined by a special token.

Anything else (non-ASCII text, another pattern, no ``regex`` module) is encoded by the tokenizer.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain
from typing import Any

from prefixplan.render.boundaries import pattern_key

ASCII_SAME = frozenset({"1ff7f41064896984", "d98f9631be1e9607"})
"""Keys (:func:`~prefixplan.render.boundaries.pattern_key`) of patterns split the same way on ASCII
text by ``regex`` as by the tokenizer (tests/test_render_words.py)."""

MAX_WORDS = 200_000
"""Memo size; when full it is emptied (a word and its ids take about 210 bytes: 42 MB full)."""


class WordEncoder:
    """Ids of ASCII texts from a memo of pre-tokens (module docstring). :meth:`encode` returns,
    per text, its ids or None (the text is for the tokenizer)."""

    def __init__(
        self, backend: Any, pattern: Any, separator: tuple[str, int] | None = None, max_words: int = MAX_WORDS
    ) -> None:
        self._backend = backend
        self._sep = separator  # a special token (text, id) that joins new words into one encode
        self._split = pattern.findall
        self._memo: dict[str, tuple[int, ...]] = {}
        self._unstable: set[str] = set()  # pre-tokens that split differently alone
        self._max = max_words
        self._to_model: dict[int, str] | None = None  # ASCII char -> what the model sees (byte-level)

    @classmethod
    def for_backend(cls, backend: Any, patterns: Sequence[str]) -> WordEncoder | None:
        """A word encoder for a tokenizer whose proved pre-tokenizer has ``patterns`` (the
        caller checked the rest of the pipeline: :func:`~prefixplan.render.boundaries.rule_for_hf`,
        and that no added token strips or merges with its neighbours), or None where the
        shortcut is not known to split as the tokenizer does."""
        if len(patterns) != 1 or pattern_key(patterns) not in ASCII_SAME:
            return None
        try:
            import regex
        except ImportError:  # pragma: no cover - installed with transformers
            return None
        separator = next(
            (
                (tok.content, tid)
                for tid, tok in sorted(backend.get_added_tokens_decoder().items())
                if tok.special and tok.content and not (tok.normalized or tok.lstrip or tok.rstrip or tok.single_word)
            ),
            None,
        )
        words = cls(backend, regex.compile(patterns[0]), separator)
        words._to_model = _model_chars(backend)
        return words

    def encode(self, texts: Sequence[str]) -> list[list[int] | None]:
        split = self._split
        splits = [split(text) if text.isascii() else None for text in texts]
        for k, (text, words_of) in enumerate(zip(texts, splits, strict=True)):
            if words_of is not None and sum(map(len, words_of)) != len(text):  # a gap: not covered
                splits[k] = None
        memo = self._memo
        words = set(chain.from_iterable(s for s in splits if s is not None))
        missing = words.difference(memo)
        if missing:
            if len(memo) + len(missing) > self._max:
                memo.clear()
                missing = words
            self._learn(list(missing))
        unstable = self._unstable
        out: list[list[int] | None] = []
        for words_of in splits:
            if words_of is None or (unstable and not unstable.isdisjoint(words_of)):
                out.append(None)
            else:
                out.append(list(chain.from_iterable(map(memo.__getitem__, words_of))))
        return out

    def _learn(self, words: list[str]) -> None:
        """Encode new pre-tokens: each through the model after the byte-level mapping (checked
        at construction), or else in one call joined by a special token (the tokenizer encodes
        the texts between added tokens independently, the rule the renderers' splitting at
        special tokens rests on): the ids between separators are each word's ids alone."""
        lists: list[list[int]] | None = None
        if self._to_model is not None:
            tokenize, table = self._backend.model.tokenize, self._to_model
            lists = [[t.id for t in tokenize(word.translate(table))] for word in words]
        elif self._sep is not None and len(words) > 1:
            sep, sep_id = self._sep
            ids = self._backend.encode(sep.join(words), add_special_tokens=False).ids
            bounds = [k for k, tid in enumerate(ids) if tid == sep_id]
            if len(bounds) == len(words) - 1:
                ends = [*bounds, len(ids)]
                lists = [ids[b + 1 : e] for b, e in zip([-1, *bounds], ends, strict=True)]
        if lists is None:
            lists = [enc.ids for enc in self._backend.encode_batch(words, add_special_tokens=False)]
        split = self._split
        for word, ids_of in zip(words, lists, strict=True):
            if split(word) == [word]:
                self._memo[word] = tuple(ids_of)
            else:
                self._unstable.add(word)
                self._memo[word] = ()


PROBE_WORDS = ("Hello", " world", "'s", " 1", "\n\n", "  ", " ...", "x_y", "\t\t", "ABC", " don't")


def _model_chars(backend: Any) -> dict[int, str] | None:
    """Each ASCII character as the pre-tokenizer hands it to the model (a byte-level stand-in),
    or None where a probe finds that a word is not the concatenation of its characters'
    stand-ins or the model's ids of a probe word differ from a full encode."""
    model, pre = getattr(backend, "model", None), getattr(backend, "pre_tokenizer", None)
    if model is None or pre is None or not hasattr(model, "tokenize"):
        return None
    table: dict[int, str] = {}
    for code in range(128):
        pieces = pre.pre_tokenize_str(chr(code))
        if len(pieces) != 1:
            return None
        table[code] = pieces[0][0]
    probes = [chr(code) for code in range(128)] + list(PROBE_WORDS) + [f"a{chr(c)}" for c in range(32, 127)]
    for word in probes:
        pieces = [p for p, _ in pre.pre_tokenize_str(word)]
        ids = [t.id for p in pieces for t in model.tokenize(p)]
        if "".join(pieces) != word.translate(table) or ids != backend.encode(word, add_special_tokens=False).ids:
            return None
    return table
