"""Cache breakers found in logs: near-identical prefixes that diverge early.

Two checks over the requests of a log:

* **Dynamic system text** — system prompts that are equal once dates, times, UUIDs, request
  ids and long numbers are masked, but differ as logged. Each distinct variant pays the
  prefill of everything after the first dynamic span again.
* **Unstable tool serialisation** — requests with the same set of tool names whose tool
  list differs in order or in JSON key order. Each variant is a different token sequence.

Cost (reported in tokens, labelled approximate): ``(variants - 1) x tail`` where ``tail`` is
the median number of tokens from the first dynamic position to the end of the
system + tools region (the start of the first non-system message). That is the prefill that
a stable prefix would have reused, under an infinite cache.
"""

from __future__ import annotations

import json
import re
import statistics
from collections import defaultdict
from dataclasses import dataclass, field

from prefixplan.render.spans import message_text
from prefixplan.types import Prompt, content_hash

DYNAMIC_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("uuid", re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b")),
    ("datetime", re.compile(r"\b\d{4}-\d{2}-\d{2}[T ]\d{1,2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?")),
    ("date", re.compile(r"\b\d{4}-\d{2}-\d{2}\b|\b\d{1,2}/\d{1,2}/\d{2,4}\b")),
    ("date", re.compile(
        r"\b\d{1,2} (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]* \d{4}\b"
        r"|\b(January|February|March|April|May|June|July|August|September|October|November|December) \d{1,2},? \d{4}\b")),
    ("time", re.compile(r"\b\d{1,2}:\d{2}(:\d{2})?( ?[AaPp][Mm])?\b")),
    ("hex-id", re.compile(r"\b[0-9a-f]{16,}\b")),  # must mix digits and letters (checked below)
    ("request-id", re.compile(r"\b(req|request|session|trace|run)[-_][A-Za-z0-9]{6,}\b", re.I)),
    ("number", re.compile(r"\b\d{6,}\b")),
)


def find_dynamic(text: str) -> list[tuple[str, int, int]]:
    """Dynamic spans in ``text``: ``(kind, start, end)``, non-overlapping, in order."""
    found: list[tuple[str, int, int]] = []
    for kind, pattern in DYNAMIC_PATTERNS:
        for m in pattern.finditer(text):
            if kind == "hex-id" and (m.group(0).isdigit() or m.group(0).isalpha()):
                continue
            if not any(a < m.end() and m.start() < b for _, a, b in found):
                found.append((kind, m.start(), m.end()))
    return sorted(found, key=lambda f: f[1])


def mask_dynamic(text: str) -> str:
    out, pos = [], 0
    for kind, a, b in find_dynamic(text):
        out.append(text[pos:a])
        out.append(f"<{kind}>")
        pos = b
    out.append(text[pos:])
    return "".join(out)


@dataclass(frozen=True, slots=True)
class Breaker:
    kind: str  # "dynamic-system" | "tool-order" | "tool-key-order"
    pattern: str  # "date", "uuid", ... or "order"
    requests: int
    variants: int
    char_offset: int | None  # position of the first dynamic span in the system text
    line: int | None
    column: int | None
    token_offset: int  # approximate token position in the prompt
    tail_tokens: int
    cost_tokens: int
    example: str  # the dynamic text of the first variant (e.g. "2026-11-29"), or tool names
    preview: str  # masked context around the breaker

    def to_json(self) -> dict:
        return {f: getattr(self, f) for f in self.__slots__}  # type: ignore[attr-defined]


@dataclass
class _Group:
    variants: dict[str, int] = field(default_factory=dict)
    tails: list[int] = field(default_factory=list)
    token_offsets: list[int] = field(default_factory=list)
    first: tuple[str, int, int, str] | None = None  # (kind, start, end, text)
    orders: set[tuple[str, ...]] = field(default_factory=set)  # tool-name orders seen


class BreakerFinder:
    """Streams prompts; :meth:`results` lists breakers by cost."""

    def __init__(self) -> None:
        self._scan_cache: dict[str, tuple[list[tuple[str, int, int]], str | None]] = {}
        self._system: dict[str, _Group] = defaultdict(_Group)
        self._tools: dict[frozenset[str], _Group] = defaultdict(_Group)

    def add(self, prompt: Prompt) -> None:
        req = prompt.request
        if not req.messages and not req.tools:
            return
        region_end = next((s.start for s in prompt.segments if s.kind in ("user", "assistant", "tool_result")), len(prompt))
        if req.messages and str(req.messages[0].get("role")) in ("system", "developer"):
            text = message_text(req.messages[0].get("content"))
            dyn, masked = self._scan(text)
            if dyn and masked is not None:
                group = self._system[masked]
                key = content_hash(text)
                group.variants[key] = group.variants.get(key, 0) + 1
                seg = next((s for s in prompt.segments if s.kind == "system" and s.index == 0), None)
                if seg is not None and text:
                    kind, a, b = dyn[0]
                    tok = seg.start + int((seg.end - seg.start) * a / max(len(text), 1))
                    group.tails.append(max(region_end - tok, 0) * prompt.token_scale)
                    group.token_offsets.append(tok)
                    if group.first is None:
                        group.first = (kind, a, b, text)
        if req.tools:
            order = tuple(str((t.get("function") or t).get("name")) for t in req.tools)
            names = frozenset(order)
            raw = json.dumps(list(req.tools), ensure_ascii=False)
            group = self._tools[names]
            key = content_hash(raw)
            group.variants[key] = group.variants.get(key, 0) + 1
            group.orders.add(order)
            first_tool = next((s.start for s in prompt.segments if s.kind == "tool"), None)
            if first_tool is not None:
                group.tails.append(max(region_end - first_tool, 0) * prompt.token_scale)
                group.token_offsets.append(first_tool)
            if group.first is None:
                group.first = ("order", 0, 0, raw)

    def _scan(self, text: str) -> tuple[list[tuple[str, int, int]], str | None]:
        """find_dynamic + masked hash, cached per distinct system text (most repeat)."""
        hit = self._scan_cache.get(text)
        if hit is None:
            dyn = find_dynamic(text)
            hit = (dyn, content_hash(mask_dynamic(text)) if dyn else None)
            if len(self._scan_cache) > 4096:
                self._scan_cache.clear()
            self._scan_cache[text] = hit
        return hit

    def results(self) -> list[Breaker]:
        out: list[Breaker] = []
        for group in self._system.values():
            if len(group.variants) < 2 or group.first is None:
                continue
            kind, a, b, text = group.first
            tail = int(statistics.median(group.tails)) if group.tails else 0
            line = text.count("\n", 0, a) + 1
            col = a - (text.rfind("\n", 0, a) + 1) + 1
            lo = max(0, a - 40)
            out.append(Breaker(
                "dynamic-system", kind, sum(group.variants.values()), len(group.variants), a, line, col,
                int(statistics.median(group.token_offsets)) if group.token_offsets else 0,
                tail, (len(group.variants) - 1) * tail, text[a:b],
                mask_dynamic(text[lo : b + 40]).replace("\n", " "),
            ))
        for names, group in self._tools.items():
            if len(group.variants) < 2 or group.first is None:
                continue
            tail = int(statistics.median(group.tails)) if group.tails else 0
            # same names, different serialisation: order of tools, or of keys inside them
            kind = "tool-order" if len(group.orders) > 1 else "tool-key-order"
            out.append(Breaker(
                kind, "order", sum(group.variants.values()), len(group.variants), None, None, None,
                int(statistics.median(group.token_offsets)) if group.token_offsets else 0,
                tail, (len(group.variants) - 1) * tail, ", ".join(sorted(names))[:200], "",
            ))
        return sorted(out, key=lambda b: -b.cost_tokens)
