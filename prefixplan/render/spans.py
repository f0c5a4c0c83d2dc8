"""Segment spans: which token ranges of a rendered prompt came from which part of the request.

Every backend produces the same two things for a request: the rendered prompt text and,
for each token, the offset of its first character in that text. From those, this module
locates each message's content and each tool schema in the text (in the order the template
emitted them) and assigns tokens to segments.

Boundary rule (a contract, see docs/analyze.md): a token belongs to the segment that
contains the first character of the token's text. Text not attributed to a message or a tool
(role headers, special tokens, tool preambles) forms ``template`` segments.
"""

from __future__ import annotations

import bisect
import functools
import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from prefixplan.core.hashes import SegmentHash, segment_hash
from prefixplan.core.types import Chunk, Segment, as_token_ids

ROLE_KIND = {
    "system": "system",
    "developer": "system",
    "user": "user",
    "assistant": "assistant",
    "tool": "tool_result",
    "function": "tool_result",
}

# Paragraphs shorter than this are not RAG-chunk candidates (too small to matter for caching).
MIN_CHUNK_CHARS = 200
TOOL_GAP_CHARS = 256
"""How far after the previous tool the next one is looked for first (separators, a header)."""
_PARA_SPLIT = re.compile(r"\n[ \t]*\n+")


# Message kinds whose paragraphs are RAG-chunk candidates (documents pasted into user turns
# or returned by tools). System prompts are cached as a whole and are not chunked.
CHUNK_KINDS = ("user", "tool_result")


def split_paragraphs(body: str, min_chars: int = MIN_CHUNK_CHARS) -> list[tuple[int, int, str]]:
    """Paragraphs of ``body`` (split on blank lines) with at least ``min_chars`` characters
    after stripping: ``(start, end, stripped text)`` with offsets into ``body``."""
    out = []
    pos = 0
    for m in list(_PARA_SPLIT.finditer(body)) + [None]:
        end = m.start() if m else len(body)
        para = body[pos:end]
        stripped = para.strip()
        if len(stripped) >= min_chars:
            out.append((pos, end, stripped))
        if m:
            pos = m.end()
    return out


@dataclass(frozen=True, slots=True)
class CharSpan:
    kind: str
    start: int
    end: int
    text_hash: SegmentHash
    index: int
    name: str | None = None


def _text_parts(content: list[Any]) -> list[str]:
    out = []
    for part in content:
        if isinstance(part, dict):
            text = part.get("text")
            if isinstance(text, str):
                out.append(text)
        elif isinstance(part, str):
            out.append(part)
    return out


def message_text(content: Any) -> str:
    """The text of a message content: a string, or the text parts of a list of parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(_text_parts(content))
    return str(content)


def _content_variants(message: dict[str, Any]) -> list[str]:
    """Texts a template may emit for a message, most specific first. The text parts of a list
    content reach a template joined by a newline (vLLM's normalisation), by a blank line
    (mistral-common) or as they are."""
    content = message.get("content")
    parts = _text_parts(content) if isinstance(content, list) else []
    if len(parts) > 1:
        variants = ["\n".join(parts), "\n\n".join(parts), "".join(parts)]
        text = variants[0]
    else:
        text = message_text(content)
        variants = [text]
    if "</think>" in text:  # templates that drop earlier reasoning keep the answer part
        variants.append(text.split("</think>")[-1].lstrip("\n"))
    stripped = text.strip()
    if stripped and stripped != text:
        variants.append(stripped)
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    if isinstance(reasoning, str) and reasoning.strip():
        variants.append(reasoning.strip("\n"))
    return [v for v in variants if v]


def _tool_variants(tool: dict[str, Any]) -> Iterator[str]:
    """JSON texts a chat template may emit for a tool schema (``tojson`` and friends), most
    common first; generated lazily because the indented forms are slow to build."""
    objs = [tool]
    if isinstance(tool.get("function"), dict):
        objs.append(tool["function"])
    for obj in objs:
        yield json.dumps(obj, ensure_ascii=False)
        yield json.dumps(obj)
        yield json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    for obj in objs:
        yield json.dumps(obj, ensure_ascii=False, indent=4)
        yield json.dumps(obj, ensure_ascii=False, indent=2)


class _ToolTexts:
    """The candidate JSON texts of one tool schema and their hashes, built once per distinct
    schema: a log repeats a few tool sets on every request."""

    __slots__ = ("_gen", "hashes", "name", "texts")

    def __init__(self, tool: dict[str, Any]) -> None:
        self._gen: Iterator[str] | None = _tool_variants(tool)
        self.texts: list[str] = []
        self.hashes: list[SegmentHash] = []
        self.name = tool_name(tool)

    def variant(self, k: int) -> str | None:
        while len(self.texts) <= k and self._gen is not None:
            text = next(self._gen, None)
            if text is None:
                self._gen = None
                break
            self.texts.append(text)
            self.hashes.append(segment_hash(text))
        return self.texts[k] if k < len(self.texts) else None


_TOOL_TEXTS: dict[bytes, _ToolTexts] = {}
_TOOL_TEXTS_MAX = 4096


def _tool_texts(tool: dict[str, Any]) -> _ToolTexts:
    try:
        key = orjson.dumps(tool)  # content key, cheaper than building the first text itself
    except TypeError:  # orjson.JSONEncodeError: not JSON-plain data
        return _ToolTexts(tool)
    got = _TOOL_TEXTS.get(key)
    if got is None:
        if len(_TOOL_TEXTS) >= _TOOL_TEXTS_MAX:
            _TOOL_TEXTS.clear()
        got = _TOOL_TEXTS[key] = _ToolTexts(tool)
    return got


_TOOL_SETS: dict[bytes, list[_ToolTexts]] = {}
_TOOL_SETS_MAX = 1024


def _tool_set_texts(tools: Sequence[dict[str, Any]], key: bytes | None) -> list[_ToolTexts]:
    """:func:`_tool_texts` of each tool; with ``key`` (the tool list's JSON bytes, which a
    renderer that groups requests by tool set already has) one lookup per request."""
    if key is None:
        return [_tool_texts(tool) for tool in tools]
    got = _TOOL_SETS.get(key)
    if got is None:
        if len(_TOOL_SETS) >= _TOOL_SETS_MAX:
            _TOOL_SETS.clear()
        got = _TOOL_SETS[key] = [_tool_texts(tool) for tool in tools]
    return got


def tool_name(tool: dict[str, Any]) -> str | None:
    fn = tool.get("function") if isinstance(tool.get("function"), dict) else tool
    name = fn.get("name") if isinstance(fn, dict) else None
    return name if isinstance(name, str) else None


def schema_tool_name(schema_text: str | bytes) -> str | None:
    """The tool's name from an OpenAI-shape (``function.name``) or flat (``name``) schema."""
    try:
        obj = json.loads(schema_text)
    except ValueError:
        return None
    if isinstance(obj, dict):
        fn = obj.get("function")
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            return fn["name"]
        if isinstance(obj.get("name"), str):
            return obj["name"]
    return None


def locate(
    text: str,
    messages: Sequence[dict[str, Any]] | None,
    tools: Sequence[dict[str, Any]] | None,
    *,
    tools_key: bytes | None = None,
) -> list[CharSpan]:
    """Find message contents and tool schemas in rendered ``text``; return sorted char spans.

    ``tools_key``: ``orjson.dumps(list(tools))`` when the caller has it (saves re-serialising
    each tool to find its cached JSON texts).

    Messages are searched in order with a moving cursor (templates emit them in order);
    tools are searched anywhere outside message spans (templates put them before the system
    text, after it, or inside a user turn). A part the template did not emit verbatim is not
    attributed and its tokens count as ``template``.
    """
    spans: list[CharSpan] = []
    taken: list[tuple[int, int]] = []  # found spans: disjoint, sorted by start
    cursor = 0
    for i, msg in enumerate(messages or ()):
        kind = ROLE_KIND.get(str(msg.get("role")), "user")
        for variant in _content_variants(msg):
            # Templates emit turns in order, but some move the system text (Mistral v3 puts it
            # in the last user turn): system texts and misses are searched anywhere free.
            pos = -1 if kind == "system" else text.find(variant, cursor)
            if pos >= 0 and _overlaps(taken, pos, pos + len(variant)):
                pos = -1
            if pos < 0:
                pos = _find_free(text, variant, taken)
            if pos >= 0:
                spans.append(CharSpan(kind, pos, pos + len(variant), _content_hash(variant), i))
                bisect.insort(taken, (pos, pos + len(variant)))
                if kind != "system":
                    cursor = pos + len(variant)
                break
        # tool calls of an assistant turn belong to that turn
        for call in msg.get("tool_calls") or ():
            fn = call.get("function", call) if isinstance(call, dict) else None
            if not isinstance(fn, dict):
                continue
            for needle in _argument_variants(fn.get("arguments")):
                pos = _find_free(text, needle, taken)
                if pos >= 0:
                    spans.append(CharSpan(kind, pos, pos + len(needle), segment_hash(needle), i))
                    bisect.insort(taken, (pos, pos + len(needle)))
                    cursor = max(cursor, pos + len(needle))
                    break
    after = -1  # end of the last tool found: templates write the tools one after another
    for j, texts in enumerate(_tool_set_texts(tools, tools_key) if tools else ()):
        k = 0
        while (schema := texts.variant(k)) is not None:
            pos = -1
            if after >= 0:  # right after the previous tool (a few separator chars), else anywhere
                pos = text.find(schema, after, after + len(schema) + TOOL_GAP_CHARS)
                if pos >= 0 and _overlaps(taken, pos, pos + len(schema)):
                    pos = -1
            if pos < 0:
                pos = _find_free(text, schema, taken)
            if pos >= 0:
                spans.append(CharSpan("tool", pos, pos + len(schema), texts.hashes[k], j, texts.name))
                bisect.insort(taken, (pos, pos + len(schema)))
                after = pos + len(schema)
                break
            k += 1
    spans.sort(key=lambda s: s.start)
    return spans


def _argument_variants(args: Any) -> Iterator[str]:
    """Texts a template may emit for a tool call's arguments: the object engines parse a JSON
    string into before rendering (``tojson``, :mod:`prefixplan.render.chatnorm`), then the
    string as logged; lazily. The engine's form comes first because it is the one usually
    found: a form that is missing costs a search of the whole prompt."""
    if isinstance(args, str):
        try:
            parsed = json.loads(args)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            dumped = json.dumps(parsed, ensure_ascii=False)
            yield dumped
            if args and args != dumped:
                yield args
        elif args:
            yield args
    elif args is not None:
        yield json.dumps(args, ensure_ascii=False)


def _overlaps(taken: list[tuple[int, int]], start: int, end: int) -> bool:
    """Whether ``[start, end)`` overlaps a span of ``taken`` (disjoint, sorted): only the last
    span starting before ``end`` can (the ends of disjoint sorted spans increase)."""
    j = bisect.bisect_left(taken, (end,)) - 1
    return j >= 0 and taken[j][1] > start


def _find_free(text: str, needle: str, taken: list[tuple[int, int]]) -> int:
    """The first position of ``needle`` in ``text`` that overlaps no span of ``taken``."""
    start = 0
    while True:
        pos = text.find(needle, start)
        if pos < 0:
            return -1
        if not _overlaps(taken, pos, pos + len(needle)):
            return pos
        start = pos + 1


def assign(
    text: str,
    token_starts: np.ndarray,
    spans: Sequence[CharSpan],
    *,
    min_chunk_chars: int = MIN_CHUNK_CHARS,
) -> tuple[tuple[Segment, ...], tuple[Chunk, ...]]:
    """Turn char spans into token segments (covering every token) and paragraph chunks.

    ``token_starts[i]`` is the char offset in ``text`` of token i's first character
    (non-decreasing). A char offset maps to the first token whose first char is at or after
    it (one ``searchsorted`` for all of a prompt's boundaries).
    """
    n = int(token_starts.shape[0])
    paras: list[tuple[CharSpan, tuple[tuple[int, int, SegmentHash, int], ...]]] = []
    chars = [c for span in spans for c in (span.start, span.end)]
    if min_chunk_chars > 0:
        for span in spans:
            if span.kind not in CHUNK_KINDS or span.end - span.start < min_chunk_chars:
                continue
            found = _chunk_paragraphs(text[span.start : span.end], min_chunk_chars)
            if found:
                paras.append((span, found))
                chars.extend(c for a, b, _, _ in found for c in (span.start + a, span.start + b))
    toks: list[int] = np.searchsorted(token_starts, chars, side="left").tolist() if chars else []

    segments: list[Segment] = []
    pos = 0
    template_run = 0
    for k, span in enumerate(spans):
        a, b = toks[2 * k], toks[2 * k + 1]
        if a < pos:
            a = pos
        if b <= a:
            continue
        if a > pos:
            segments.append(Segment("template", pos, a, _template_hash(text, token_starts, pos, a), template_run))
            template_run += 1
        segments.append(Segment(span.kind, a, b, span.text_hash, span.index, span.name))
        pos = b
    if pos < n:
        segments.append(Segment("template", pos, n, _template_hash(text, token_starts, pos, n), template_run))

    chunks: list[Chunk] = []
    j = 2 * len(spans)
    for span, found in paras:
        for _, _, para_hash, para_chars in found:
            a, b = toks[j], toks[j + 1]
            j += 2
            if b > a:
                chunks.append(Chunk(para_hash, a, b, span.index, para_chars))
    return tuple(segments), tuple(chunks)


_content_hash = functools.lru_cache(maxsize=1024)(segment_hash)
"""``segment_hash`` of message contents, which recur from request to request."""


@functools.lru_cache(maxsize=1024)
def _chunk_paragraphs(body: str, min_chars: int) -> tuple[tuple[int, int, SegmentHash, int], ...]:
    """:func:`split_paragraphs` of ``body`` as (start, end, hash, chars) of each paragraph; a
    message that recurs (an earlier turn, a pasted document) is split and hashed once."""
    return tuple((a, b, segment_hash(para), len(para)) for a, b, para in split_paragraphs(body, min_chars))


_glue_hash = functools.lru_cache(maxsize=4096)(segment_hash)
"""``segment_hash`` of short template texts (turn markers, separators), which recur in every prompt."""
GLUE_CHARS = 256
"""Template texts up to this long are hashed through :data:`_glue_hash`."""


def _template_hash(text: str, token_starts: np.ndarray, a: int, b: int) -> SegmentHash:
    ca = int(token_starts[a])
    cb = int(token_starts[b]) if b < token_starts.shape[0] else len(text)
    glue = text[ca:cb]
    return _glue_hash(glue) if len(glue) <= GLUE_CHARS else segment_hash(glue)


def byte_starts_to_char_starts(data: bytes, byte_starts: np.ndarray) -> np.ndarray:
    """Map byte offsets in UTF-8 ``data`` to char offsets of the decoded text.

    A byte inside a multi-byte character maps to that character (byte-level BPE tokens may
    split characters).
    """
    arr = np.frombuffer(data, dtype=np.uint8)
    if arr.size == 0:
        return np.zeros_like(byte_starts)
    is_start = (arr & 0xC0) != 0x80
    char_of_byte = np.cumsum(is_start, dtype=np.int64) - 1
    char_of_byte = np.maximum(char_of_byte, 0)
    clipped = np.minimum(byte_starts, arr.size - 1)
    out = char_of_byte[clipped]
    out[byte_starts >= arr.size] = int(char_of_byte[-1]) + 1
    return out


def join_pieces(
    items: Sequence[tuple[np.ndarray, np.ndarray]], offsets: Sequence[int] | np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Concatenate pieces' (ids, char starts), the starts of piece k shifted by ``offsets[k]``."""
    if not items:
        return as_token_ids(np.zeros(0, np.uint32)), np.zeros(0, np.int64)
    id_parts, start_parts = zip(*items, strict=True)
    ids = np.concatenate(id_parts)
    starts = np.concatenate(start_parts)
    starts += np.repeat(np.asarray(offsets, dtype=np.int64), [len(part) for part in id_parts])
    return as_token_ids(ids), starts


def offset_starts(offsets: Sequence[tuple[int, int]]) -> np.ndarray:
    if not offsets:
        return np.zeros(0, dtype=np.int64)
    arr = np.asarray(offsets, dtype=np.int64)[:, 0]
    # byte-level tokens inside one char may report the same start; keep non-decreasing
    return np.maximum.accumulate(arr)
