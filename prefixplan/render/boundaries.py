"""Where text may be cut so that encoding the parts gives the ids of encoding the whole.

A renderer that encodes a long text in parts (the shared system prompt apart from the question
that follows it, each line of a document apart) must get the ids the tokenizer gives for the
whole text. This module says where that holds, per tokenizer family, and why.

**Cut rule.** A text ``T`` is cut at ``q`` only where ``T[q-1]`` is a line feed (``\\n``) and
``T[q]`` is neither whitespace (``str.isspace``) nor one of the family's extra characters
(``/`` for o200k and tekken). Families whose rule is not proved here get no cuts.

**The families.** Byte-level BPE tokenizers encode in two steps: a regular expression splits the
text into pre-tokens (scanned left to right; at each position the first alternative that
matches wins), then BPE merges bytes *within* each pre-token. So ``encode(P + R) ==
encode(P) + encode(R)`` when the pre-tokens of ``P + R`` are those of ``P`` followed by those
of ``R``. The proved patterns (:data:`PROVED`, keyed by the sha256 of the pattern text) are
those of Qwen2/Qwen3, Llama 3, cl100k as tiktoken 0.7 writes it (possessive quantifiers on the
letter and punctuation alternatives) and as 0.8+ writes it (more possessive quantifiers and
``\\s++$``), o200k, Mistral tekken and DeepSeek V3. Each is an
alternation of these shapes and nothing else:

1. contractions (``'s``, ``'t`` ...): start with an apostrophe;
2. letters (``\\p{L}``/``\\p{M}`` classes) after at most one optional character from a class
   that excludes ``\\r`` and ``\\n``;
3. numbers (``\\p{N}``, ``\\p{N}{1,3}``);
4. punctuation: an optional space, non-space non-letter non-number characters, then any run of
   ``[\\r\\n]`` (``[\\r\\n/]`` for o200k and tekken);
5. whitespace: ``\\s*[\\r\\n]+`` (``\\s*[\\r\\n]`` in cl100k), ``\\s+(?!\\S)``, ``\\s+`` (``\\s``),
   and in cl100k ``\\s++$`` placed before the line-feed alternative.

None looks behind; the only look-ahead is ``(?!\\S)`` and the only anchor ``$``, both in
whitespace alternatives.

*No pre-token crosses q.* A pre-token that crosses ``q`` contains the line feed at ``q-1``
and then ``R[0]``. Shapes 1-3 cannot contain a line feed (shape 2's optional first character
excludes it). In shape 4 a line feed can only be in the trailing ``[\\r\\n]`` run, which cannot
continue with ``R[0]`` (not ``\\r``/``\\n``, and not ``/`` where the run allows ``/``). Shape 5
consumes whitespace only, and ``R[0]`` is not whitespace.

*The pre-tokens after q are those of R alone:* no alternative looks behind, so matching from
``q`` on reads only ``R``.

*The pre-tokens before q are those of P alone.* At a position ``i < q`` the two scans differ
only where an alternative reads position ``q``: in ``P + R`` it sees ``R[0]``, in ``P`` the
end of the text. Shapes 1-3 never get there (they would have to consume the line feed at
``q-1``). Shape 4 gets there only in its trailing run, which stops at ``q`` in both texts.
Shape 5 gets there only through a whitespace run from ``i`` to ``q`` ending in the line feed;
there ``\\s*[\\r\\n]+`` (or ``\\s*[\\r\\n]``) matches ``[i, q)`` in both texts before the
look-ahead alternatives are tried, and in cl100k ``\\s++$`` matches the same ``[i, q)`` in
``P`` where the line-feed alternative matches it in ``P + R``.

DeepSeek V3 first isolates digit runs and CJK runs, then applies such a pattern inside each
part: neither run contains a line feed, so no part crosses ``q`` unless ``R`` starts with
ordinary text, and the argument above applies inside that part.

*Normalisers.* Only none, an empty sequence, or NFC are accepted. NFC is computed
independently on each side of a line feed: decomposition is per character, canonical
reordering moves only non-starters (the line feed is a starter, combining class 0), and a
line feed blocks composition across it and composes with nothing.

*Special tokens.* The pieces between special tokens are encoded independently by the tokenizer
itself (``tokenizers`` extracts added tokens before normalising and pre-tokenising; mistral-common
and the tiktoken layout insert control tokens between separately encoded texts), so a special
token is always a safe boundary (``hf.py`` checks the added-token flags that would break this).

``tests/test_incremental_proof.py`` checks the rule against each tokenizer: every code point as
``R[0]``, and every combination of short ends and starts drawn from one character of each
Unicode class involved.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class CutRule:
    """The proved cut rule of one pre-tokenizer family (module docstring)."""

    family: str
    extra: str = ""  # characters (besides whitespace) that must not start the part after a cut

    def pattern(self) -> re.Pattern[str]:
        """Matches the line feed before each allowed cut (``str.isspace`` is Python's ``\\s``)."""
        return re.compile(r"\n(?=[^\s" + re.escape(self.extra) + "])")

    def paragraph_pattern(self) -> re.Pattern[str]:
        """Matches the two line feeds of a blank line before an allowed cut (a subset of
        :meth:`pattern`'s cuts; it begins with a literal, so the engine searches for it fast,
        where a look-behind was tried at every character: 13x slower)."""
        return re.compile(r"\n\n(?=[^\s" + re.escape(self.extra) + "])")

    def allows(self, text: str, q: int) -> bool:
        """Whether ``text`` may be cut at ``q``."""
        return 0 < q < len(text) and text[q - 1] == "\n" and not text[q].isspace() and text[q] not in self.extra


def pattern_key(patterns: Iterable[str]) -> str:
    """The key of a pre-tokenizer's regex pattern(s), in order: sha256 of the texts joined by NUL."""
    return hashlib.sha256("\0".join(patterns).encode("utf-8")).hexdigest()[:16]


PROVED: dict[str, CutRule] = {
    "1ff7f41064896984": CutRule("qwen2"),
    "d98f9631be1e9607": CutRule("llama3/cl100k"),
    "f021c3d976978e62": CutRule("cl100k"),
    "a4bb8cc38b305a24": CutRule("cl100k (tiktoken < 0.8)"),
    "2d1b8dc11e89af71": CutRule("o200k", extra="/"),
    "1d64a9a8eaf9f1bd": CutRule("tekken", extra="/"),
    "bfb6cd412a9c9638": CutRule("deepseek_v3"),
}
"""Pattern key -> the proved rule of that family (the patterns the module docstring covers)."""


def rule_for_patterns(patterns: Iterable[str]) -> CutRule | None:
    """The proved rule for regex pre-tokenization by ``patterns`` (tiktoken, tekken), or None."""
    return PROVED.get(pattern_key(patterns))


def rule_for_hf(backend: Any) -> CutRule | None:
    """The proved rule of a ``tokenizers.Tokenizer``, or None when its pipeline is not one the
    proof covers (:func:`hf_split_patterns`)."""
    patterns = hf_split_patterns(backend)
    return rule_for_patterns(patterns) if patterns else None


def hf_split_patterns(backend: Any) -> list[str] | None:
    """The regex patterns of a ``tokenizers.Tokenizer`` whose pipeline has the shape the proof
    covers: a BPE model without dropout, a normaliser that is absent, empty or NFC, and a
    pre-tokenizer that is a sequence of regex splits (isolated, not inverted) followed by a
    byte-level step that adds no prefix space and uses no regex of its own; else None."""
    import json

    model = backend.model
    if type(model).__name__ != "BPE" or getattr(model, "dropout", None):
        return None
    normalizer = json.loads(backend.normalizer.__getstate__()) if backend.normalizer is not None else None
    if not _normalizer_ok(normalizer):
        return None
    pre = json.loads(backend.pre_tokenizer.__getstate__()) if backend.pre_tokenizer is not None else {}
    steps = pre.get("pretokenizers") if pre.get("type") == "Sequence" else [pre]
    if not steps:
        return None
    *splits, last = steps
    if last.get("type") != "ByteLevel" or last.get("add_prefix_space") or last.get("use_regex", True):
        return None
    patterns = []
    for step in splits:
        pattern = step.get("pattern") or {}
        if (
            step.get("type") != "Split"
            or step.get("behavior") != "Isolated"
            or step.get("invert")
            or "Regex" not in pattern
        ):
            return None
        patterns.append(pattern["Regex"])
    return patterns or None


def _normalizer_ok(normalizer: dict[str, Any] | None) -> bool:
    if normalizer is None:
        return True
    kind = normalizer.get("type")
    if kind == "Sequence":
        return all(_normalizer_ok(n) for n in normalizer.get("normalizers") or ())
    return kind == "NFC"
