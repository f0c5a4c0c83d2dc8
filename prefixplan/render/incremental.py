"""Encode each distinct part of the rendered text once: the ids of a text that begins with text
encoded before are those ids followed by the ids of the rest.

A renderer hands :class:`SegmentEncoder` the texts between special tokens (which the tokenizer
itself encodes independently). Each text is looked up whole; if it was not encoded before, it is
cut where :mod:`prefixplan.render.boundaries` proves that encoding the parts gives the ids of the
whole (after a line feed, before a character that is not whitespace), and:

- its longest known *prefix* (a run of parts that an earlier text also began with: a system
  prompt before this request's question, an earlier turn) is reused as one item;
- every remaining paragraph (cut after blank lines) is looked up, a paragraph not known whole
  is cut into lines (each with any blank lines after it) that are looked up, and the parts no
  earlier text had are encoded together in one batch.

A text or paragraph whose parts were all known is kept whole (the next occurrence costs one
lookup), and a run of known paragraphs at the start of a text is remembered as a prefix. With no proved rule (a tokenizer
family the proof does not cover), texts are only looked up and encoded whole.

:class:`EncodeStats` counts requests encoded incrementally (some of their ids reused from an
earlier encode) and in full (every id encoded for them).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

import numpy as np

from prefixplan.core.types import as_token_ids
from prefixplan.render.boundaries import CutRule
from prefixplan.render.pieces import PieceCache
from prefixplan.render.spans import join_pieces

Item = tuple[np.ndarray, np.ndarray]
"""Token ids and the char offset of each token's first character (relative to its text)."""

MIN_CUT_CHARS = 64
"""Texts shorter than this are encoded whole: cutting them saves less than the lookups cost."""
PREFIXES_PER_START = 8
"""Known prefixes kept per first part (the most recently used ones)."""


class EncodeStats:
    """Requests encoded incrementally vs in full; :meth:`as_dict` is what renderers'
    ``encode_stats()`` return."""

    __slots__ = ("full", "incremental")

    def __init__(self) -> None:
        self.incremental = 0
        self.full = 0

    def count(self, reused: bool) -> None:
        if reused:
            self.incremental += 1
        else:
            self.full += 1

    def as_dict(self) -> dict[str, int]:
        return {"incremental": self.incremental, "full": self.full}


class SegmentEncoder:
    """Ids of texts without special tokens, each distinct part encoded once (module docstring).

    ``encode_batch`` encodes a list of texts exactly as the tokenizer does (ids and first-char
    offsets, or ids and an empty array with ``starts=False``); ``rule`` is the proved cut rule of
    the tokenizer, or None (no cuts)."""

    def __init__(
        self,
        encode_batch: Callable[[list[str]], list[Item]],
        rule: CutRule | None,
        cache: PieceCache,
        *,
        starts: bool = True,
    ) -> None:
        self.encode_batch = encode_batch
        self._join = join_pieces if starts else join_ids
        self.rule = rule
        self.cache = cache
        self._finder: re.Pattern[str] | None = rule.pattern() if rule is not None else None
        self._paragraphs: re.Pattern[str] | None = rule.paragraph_pattern() if rule is not None else None
        self._prefixes: dict[str, list[str]] = {}  # first part -> known prefixes starting with it

    def encode(self, text: str) -> tuple[Item, bool]:
        """(ids, starts) of ``text``, and whether any of its ids were reused."""
        chunks, reused = self.encode_many([text])[0]
        if len(chunks) == 1:
            return chunks[0][0], reused
        return self._join([c[0] for c in chunks], [c[1] for c in chunks]), reused

    def encode_many(self, texts: Sequence[str]) -> list[tuple[list[tuple[Item, int]], bool]]:
        """For each of ``texts`` (distinct): its ids as chunks ``(item, char offset in the
        text)`` to concatenate, and whether any of its ids were reused from an earlier encode.

        A text not known whole is cut into paragraphs (at allowed cuts after a blank line), and
        a paragraph not known whole into lines (at every allowed cut)."""
        cache = self.cache
        found: dict[str, Item] = {}
        missing: dict[str, None] = {}
        lines_of: dict[str, list[str]] = {}  # paragraph not known whole -> its lines
        plans: list[tuple[str, Item | None, int, list[str]]] = []  # text, whole or prefix item, prefix end, paragraphs
        for text in texts:
            got = cache.get(text)
            if got is not None:
                plans.append((text, got, -1, []))
                continue
            head, start = self._known_prefix(text)
            rest = text[start:]
            paras = self._cut(rest, self._paragraphs)
            for para in paras:
                if para in found or para in missing or para in lines_of:
                    continue
                item = cache.get(para) if len(paras) > 1 or head is not None else None  # else: the text, a miss
                if item is not None:
                    found[para] = item
                    continue
                lines = self._cut(para, self._finder)
                if len(lines) == 1:
                    missing[para] = None
                    continue
                lines_of[para] = lines
                for line in lines:
                    if line not in found and line not in missing:
                        got = cache.get(line)
                        if got is None:
                            missing[line] = None
                        else:
                            found[line] = got
            plans.append((text, head, start, paras))
        fresh = dict(zip(missing, self.encode_batch(list(missing)), strict=True)) if missing else {}
        for part, item in fresh.items():
            cache.put(part, item)
        split = {para: self._lines(para, lines, found, fresh) for para, lines in lines_of.items()}
        return [self._assemble(plan, found, fresh, split) for plan in plans]

    def _lines(
        self, para: str, lines: list[str], found: dict[str, Item], fresh: dict[str, Item]
    ) -> tuple[list[tuple[Item, int]], bool, bool]:
        """A paragraph from its lines: (chunks, any line reused, every line reused); a paragraph
        whose lines were all known recurs: it is kept whole, and is one chunk."""
        chunks: list[tuple[Item, int]] = []
        pos = 0
        known = 0
        for line in lines:
            item = fresh.get(line)
            if item is None:
                item = found[line]
                known += 1
            chunks.append((item, pos))
            pos += len(line)
        if known == len(lines):
            whole = self._join([c[0] for c in chunks], [c[1] for c in chunks])
            self.cache.put(para, whole)
            return [(whole, 0)], True, True
        return chunks, known > 0, False

    def _assemble(
        self,
        plan: tuple[str, Item | None, int, list[str]],
        found: dict[str, Item],
        fresh: dict[str, Item],
        split: dict[str, tuple[list[tuple[Item, int]], bool, bool]],
    ) -> tuple[list[tuple[Item, int]], bool]:
        text, head, start, paras = plan
        if start < 0:
            assert head is not None
            return [(head, 0)], True
        chunks: list[tuple[Item, int]] = [(head, 0)] if head is not None else []
        pos = start
        known = 0  # leading paragraphs an earlier encode had
        leading = True
        reused = head is not None
        for para in paras:
            item = fresh.get(para)
            if item is not None:
                chunks.append((item, pos))
                leading = False
            elif para in found:
                chunks.append((found[para], pos))
                reused = True
                known += leading
            else:
                parts, any_known, all_known = split[para]
                chunks.extend((it, pos + at) for it, at in parts)
                reused = reused or any_known
                leading = leading and all_known
                known += leading
            pos += len(para)
        if len(chunks) > 1:
            if known == len(paras):  # every part known: the text recurs, keep it whole
                self.cache.put(text, self._join([c[0] for c in chunks], [c[1] for c in chunks]))
                self._remember(text)
            elif known >= (1 if head is not None else 2):  # a run of known parts begins it: a prefix
                end = start + sum(len(p) for p in paras[:known])
                if self.cache.get(text[:end]) is None:
                    head_chunks = [c for c in chunks if c[1] < end]
                    self.cache.put(text[:end], self._join([c[0] for c in head_chunks], [c[1] for c in head_chunks]))
                self._remember(text[:end])
        return chunks, reused

    @staticmethod
    def _cut(text: str, finder: re.Pattern[str] | None) -> list[str]:
        """``text`` cut after each line feed ``finder`` matches (whole when short or no rule)."""
        if finder is None or len(text) < MIN_CUT_CHARS:
            return [text]
        parts: list[str] = []
        pos = 0
        for m in finder.finditer(text):
            parts.append(text[pos : m.end()])
            pos = m.end()
        parts.append(text[pos:])
        return parts

    def _first(self, text: str) -> str | None:
        """``text`` up to its first allowed cut, or None where it has none."""
        m = self._finder.search(text) if self._finder is not None else None
        return text[: m.end()] if m is not None else None

    def _known_prefix(self, text: str) -> tuple[Item | None, int]:
        """The longest remembered prefix of ``text`` ending where a cut is allowed, and its length."""
        if not self._prefixes:
            return None, 0
        first = self._first(text)
        candidates = self._prefixes.get(first) if first is not None else None
        if not candidates:
            return None, 0
        assert self.rule is not None
        best = -1
        for k, prefix in enumerate(candidates):
            if (
                (best < 0 or len(prefix) > len(candidates[best]))
                and len(prefix) < len(text)
                and text.startswith(prefix)
                and self.rule.allows(text, len(prefix))
            ):
                best = k
        if best < 0:
            return None, 0
        prefix = candidates.pop(best)
        item = self.cache.get(prefix)
        if item is None:  # evicted
            return None, 0
        candidates.insert(0, prefix)  # most recently used first
        return item, len(prefix)

    def _remember(self, prefix: str) -> None:
        """Remember ``prefix`` (cached) as a possible beginning of later texts."""
        first = self._first(prefix)
        if first is None:
            return
        known = self._prefixes.setdefault(first, [])
        if prefix in known:
            return
        known.insert(0, prefix)  # most recently used first; the least recently used goes
        del known[PREFIXES_PER_START:]


_NO_STARTS = np.zeros(0, dtype=np.int64)


def join_ids(items: Sequence[Item], offsets: Sequence[int]) -> Item:
    """Concatenate the ids of ``items`` (encoders that keep no offsets)."""
    return as_token_ids(np.concatenate([item[0] for item in items])), _NO_STARTS
