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

Privacy: like candidates, a breaker seen from fewer than ``min_tenants`` distinct users
(requests without a user count as distinct) shows no text: ``example`` is empty and
``preview`` says it was withheld, because a per-user system prompt would otherwise be quoted.
"""

from __future__ import annotations

import functools
import json
import secrets
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from prefixplan.analysis import dynamic as lint
from prefixplan.core.hashes import segment_hash
from prefixplan.core.types import Prompt, Request, Segment
from prefixplan.render.spans import message_text


def find_dynamic(text: str) -> list[tuple[str, int, int]]:
    """Dynamic spans in ``text`` as ``(code, start, end)`` (the recipe lint's patterns)."""
    return [(code, a, b) for a, b, code, _ in lint.find_dynamic(text)]


def mask_dynamic(text: str, spans: Sequence[tuple[str, int, int]] | None = None) -> str:
    """``text`` with each dynamic span (``spans``, else found here) replaced by ``<code>``."""
    out, pos = [], 0
    for kind, a, b in find_dynamic(text) if spans is None else spans:
        out.append(text[pos:a])
        out.append(f"<{kind}>")
        pos = b
    out.append(text[pos:])
    return "".join(out)


@functools.lru_cache(maxsize=4096)
def scan_system_text(text: str) -> tuple[tuple[tuple[str, int, int], ...], str | None]:
    """The dynamic spans of a system text and the hash of its masked form (None when it has no
    dynamic span); most system texts repeat, so the answers are kept, per process, for every
    finder (a render worker makes one per batch of lines)."""
    dyn = tuple(find_dynamic(text))
    return dyn, segment_hash(mask_dynamic(text, dyn)) if dyn else None


@dataclass(frozen=True, slots=True)
class Breaker:
    kind: str  # "dynamic-system" | "tool-order" | "tool-content" | "tool-key-order"
    pattern: str  # a lint code ("date-time", "uuid", "request-id", "long-number") or "order"
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
    tenants: int = 0  # distinct users seen (at most the finder's min_tenants)
    withheld: bool = False  # fewer than min_tenants users: example and preview hold no text

    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass
class _Group:
    variants: dict[str, int] = field(default_factory=dict)
    tails: list[int] = field(default_factory=list)
    token_offsets: list[int] = field(default_factory=list)
    first: tuple[str, int, int, str] | None = None  # (kind, start, end, text)
    orders: set[tuple[str, ...]] = field(default_factory=set)  # tool-name orders seen
    contents: set[str] = field(default_factory=set)  # the tool set's content, order and key order aside
    tenants: set[str] = field(default_factory=set)  # distinct users, kept up to min_tenants


TOOL_SET_MEMO = 4096
"""Distinct rendered tool sets whose names and content hash a finder remembers (then it starts over)."""


def _tool_set(tools: Sequence[dict[str, Any]]) -> tuple[tuple[str, ...], frozenset[str], str]:
    """A tool set's name order, its names, and the hash of its content (tools sorted by name,
    keys sorted): what tells a tool-order breaker from a content or key-order one."""
    order = tuple(str((t.get("function") or t).get("name")) for t in tools)
    by_name = sorted(tools, key=lambda t: str((t.get("function") or t).get("name")))
    return order, frozenset(order), segment_hash(json.dumps(by_name, sort_keys=True, ensure_ascii=False))


class BreakerFinder:
    """Streams prompts; :meth:`results` lists breakers by cost."""

    def __init__(self, min_tenants: int = 2) -> None:
        self.min_tenants = min_tenants
        self._anon = 0
        self._anon_tag = secrets.token_hex(8)  # anonymous users of different finders never collide
        self._system: dict[str, _Group] = defaultdict(_Group)
        self._tools: dict[frozenset[str], _Group] = defaultdict(_Group)
        # rendered tool serialisation -> (name order, names, content hash): the same tool set
        # recurs in most requests and is serialised for its content hash once
        self._tool_sets: dict[str, tuple[tuple[str, ...], frozenset[str], str]] = {}

    def add(self, prompt: Prompt) -> None:
        self.add_request(prompt.request, prompt.segments, len(prompt), prompt.token_scale)

    def add_request(self, req: Request, segments: Sequence[Segment], n_units: int, token_scale: int) -> None:
        """Add one request: its text, its segment spans, its length in units."""
        if not req.messages and not req.tools:
            return
        tenant = req.tenant
        if not tenant:
            self._anon += 1
            tenant = f"anon:{self._anon_tag}:{self._anon}"
        region_end = next((s.start for s in segments if s.kind in ("user", "assistant", "tool_result")), n_units)
        if req.messages and str(req.messages[0].get("role")) in ("system", "developer"):
            text = message_text(req.messages[0].get("content"))
            dyn, masked = scan_system_text(text)
            if dyn and masked is not None:
                group = self._system[masked]
                self._seen(group, tenant)
                key = segment_hash(text)
                group.variants[key] = group.variants.get(key, 0) + 1
                seg = next((s for s in segments if s.kind == "system" and s.index == 0), None)
                if seg is not None and text:
                    kind, a, b = dyn[0]
                    tok = seg.start + int((seg.end - seg.start) * a / max(len(text), 1))
                    group.tails.append(max(region_end - tok, 0) * token_scale)
                    group.token_offsets.append(tok)
                    if group.first is None:
                        group.first = (kind, a, b, text)
        if req.tools:
            # the rendered tool segments' hashes identify the serialisation the engine saw
            tool_hashes = [s.text_hash for s in segments if s.kind == "tool"]
            if len(tool_hashes) == len(req.tools):  # every tool rendered: memo by what was rendered
                key = segment_hash("\0".join(tool_hashes))
                known = self._tool_sets.get(key)
                if known is None:
                    if len(self._tool_sets) >= TOOL_SET_MEMO:
                        self._tool_sets.clear()
                    known = self._tool_sets[key] = _tool_set(req.tools)
            else:
                key = segment_hash(json.dumps(list(req.tools), ensure_ascii=False))
                known = _tool_set(req.tools)
            order, names, content = known
            group = self._tools[names]
            self._seen(group, tenant)
            group.variants[key] = group.variants.get(key, 0) + 1
            group.orders.add(order)
            group.contents.add(content)
            first_tool = next((s.start for s in segments if s.kind == "tool"), None)
            if first_tool is not None:
                group.tails.append(max(region_end - first_tool, 0) * token_scale)
                group.token_offsets.append(first_tool)
            if group.first is None:
                group.first = ("order", 0, 0, "")

    def merge(self, other: BreakerFinder) -> None:
        """Add what ``other`` found in a later part of the same input (another process's file):
        the breakers are those of one finder fed both parts in turn (groups in first-seen order,
        medians over the same values, distinct users counted up to ``min_tenants``)."""
        for mine, theirs in ((self._system, other._system), (self._tools, other._tools)):
            for key, group in theirs.items():
                into = mine[key]  # type: ignore[index]
                for variant, n in group.variants.items():
                    into.variants[variant] = into.variants.get(variant, 0) + n
                into.tails.extend(group.tails)
                into.token_offsets.extend(group.token_offsets)
                if into.first is None:
                    into.first = group.first
                into.orders.update(group.orders)
                into.contents.update(group.contents)
                for tenant in group.tenants:
                    self._seen(into, tenant)

    def _seen(self, group: _Group, tenant: str) -> None:
        if len(group.tenants) < max(self.min_tenants, 1):
            group.tenants.add(tenant)

    def _private(self, group: _Group, example: str, preview: str) -> tuple[str, str, int, bool]:
        """``(example, preview, tenants, withheld)`` after the min_tenants rule."""
        n = len(group.tenants)
        if n >= self.min_tenants:
            return example, preview, n, False
        return "", f"(withheld: {n} user(s) < min_tenants {self.min_tenants})", n, True

    def results(self) -> list[Breaker]:
        out: list[Breaker] = []
        for group in self._system.values():
            if len(group.variants) < 2 or group.first is None:
                continue
            kind, a, b, text = group.first
            tail = int(statistics.median(group.tails)) if group.tails else 0
            line, col = lint.line_col(text, a)
            lo = max(0, a - 40)
            out.append(
                Breaker(
                    "dynamic-system",
                    kind,
                    sum(group.variants.values()),
                    len(group.variants),
                    a,
                    line,
                    col,
                    int(statistics.median(group.token_offsets)) if group.token_offsets else 0,
                    tail,
                    (len(group.variants) - 1) * tail,
                    *self._private(group, text[a:b], mask_dynamic(text[lo : b + 40]).replace("\n", " ")),
                )
            )
        for names, group in self._tools.items():
            if len(group.variants) < 2 or group.first is None:
                continue
            tail = int(statistics.median(group.tails)) if group.tails else 0
            # same names, different serialisation: order of tools, other content (a description
            # or schema that varies), or only the order of keys inside them
            if len(group.orders) > 1:
                kind = "tool-order"
            elif len(group.contents) > 1:
                kind = "tool-content"
            else:
                kind = "tool-key-order"
            out.append(
                Breaker(
                    kind,
                    "order",
                    sum(group.variants.values()),
                    len(group.variants),
                    None,
                    None,
                    None,
                    int(statistics.median(group.token_offsets)) if group.token_offsets else 0,
                    tail,
                    (len(group.variants) - 1) * tail,
                    *self._private(group, ", ".join(sorted(names))[:200], ""),
                )
            )
        return sorted(out, key=lambda b: -b.cost_tokens)
