"""A key version's parts as the gateway sends them, taken from requests or recipes, and expanded.

A :class:`WirePart` is one piece of a prefix exactly as it travels in a request: a leading
``system`` (or ``developer``) message's content, a ``tool`` (compact JSON, key order as sent), a
``document`` (text that starts the first user message; recipes only). The version's *wire hash*
is :func:`prefixplan.core.hashes.content_hash` over ``(kind, UTF-8 bytes)`` of its parts in
order. For a prefix registered by a request it is also its content hash; a recipe key keeps the
content hash of its files (the lock's) and gets a wire hash of the request form its files make
(a pretty-printed tool file and its compact JSON are the same tool for an engine).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from prefixplan.core.hashes import content_hash
from prefixplan.keys.recipe_model import Recipe

MESSAGE_KINDS = ("system", "developer")


@dataclass(frozen=True, slots=True)
class WirePart:
    """One part of a prefix as sent (``data``: text; JSON text for tools and list contents)."""

    kind: str  # system | developer | tool | document
    data: str
    is_json: bool = False

    def value(self) -> Any:
        """The part as it goes into a request (parsed JSON for tools and list contents)."""
        return json.loads(self.data) if self.is_json else self.data

    def to_json(self) -> list[Any]:
        return [self.kind, self.data, self.is_json]

    @classmethod
    def from_json(cls, item: Sequence[Any]) -> WirePart:
        return cls(str(item[0]), str(item[1]), bool(item[2]))


def compact(value: Any) -> str:
    """Compact JSON, key order kept (how a tool part is hashed)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def wire_hash(parts: Sequence[WirePart]) -> str:
    """The pp1 content hash of the parts' ``(kind, UTF-8 bytes)``."""
    return str(content_hash([(p.kind, p.data.encode("utf-8", "surrogatepass")) for p in parts]))


def parts_json(parts: Sequence[WirePart]) -> str:
    return json.dumps([p.to_json() for p in parts], ensure_ascii=False)


def parts_from_json(text: str) -> tuple[WirePart, ...]:
    return tuple(WirePart.from_json(item) for item in json.loads(text))


def _leading_messages(messages: Sequence[Any]) -> int:
    n = 0
    for m in messages:
        if not isinstance(m, Mapping) or m.get("role") not in MESSAGE_KINDS:
            break
        n += 1
    return n


def request_parts(body: Mapping[str, Any]) -> tuple[WirePart, ...] | None:
    """The prefix a chat request carries itself (leading system/developer messages, then its
    tools), or None when it carries neither."""
    messages = body.get("messages")
    messages = messages if isinstance(messages, list) else []
    lead = messages[: _leading_messages(messages)]
    tools = body.get("tools")
    tools = tools if isinstance(tools, list) else []
    if not lead and not tools:
        return None
    parts: list[WirePart] = []
    for m in lead:
        content = m.get("content")
        if isinstance(content, str):
            parts.append(WirePart(str(m["role"]), content))
        else:
            parts.append(WirePart(str(m["role"]), compact(content), True))
    parts.extend(WirePart("tool", compact(t), True) for t in tools)
    return tuple(parts)


def comparable(parts: Sequence[WirePart]) -> tuple[WirePart, ...]:
    """The parts a request can carry itself (documents of recipe keys are expand-only)."""
    return tuple(p for p in parts if p.kind != "document")


MAX_CHANGES = 8
"""How many changed parts a conflict message names (then "and N more")."""


def _labels(parts: Sequence[WirePart]) -> list[str]:
    """``system``, ``system[1]``, ``tool[0] (lookup)``, ... for each part, in one pass."""
    seen: dict[str, int] = {}
    out = []
    for p in parts:
        n = seen.get(p.kind, 0)
        seen[p.kind] = n + 1
        if p.kind == "tool":
            try:
                fn = json.loads(p.data) if len(p.data) <= 65536 else None
                name = (fn.get("function") or fn).get("name") if isinstance(fn, dict) else None
            except (ValueError, AttributeError):
                name = None
            shown = name[:40] if isinstance(name, str) else None
            out.append(f"tool[{n}]" + (f" ({shown})" if shown else ""))
        else:
            out.append(f"{p.kind}[{n}]" if p.kind != "system" or n else "system")
    return out


def diff_summary(old: Sequence[WirePart], new: Sequence[WirePart], *, positions: bool = True) -> str:
    """Which parts differ between a registered version and a request's prefix, in words; linear in
    the parts' sizes. ``positions`` adds where a text changed (only for the key's owner: to anyone
    else a character position is an oracle that recovers the text part by part)."""
    changes: list[str] = []
    count = 0
    old_labels: list[str] | None = None
    new_labels: list[str] | None = None
    for i in range(max(len(old), len(new))):
        if i < len(old) and i < len(new) and old[i].kind == new[i].kind and old[i].data == new[i].data:
            continue
        count += 1
        if len(changes) >= MAX_CHANGES:
            continue
        if old_labels is None or new_labels is None:
            old_labels, new_labels = _labels(old), _labels(new)
        if i >= len(old):
            changes.append(f"{new_labels[i]} added")
        elif i >= len(new):
            changes.append(f"{old_labels[i]} removed")
        elif old[i].kind != new[i].kind:
            changes.append(f"part {i} is {new[i].kind[:20]}, was {old_labels[i]}")
        elif positions:
            a, b = old[i].data, new[i].data
            at = next((j for j, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
            changes.append(f"{new_labels[i]} changed at character {at} ({len(a)} -> {len(b)} characters)")
        else:
            changes.append(f"{new_labels[i]} changed")
    if count > len(changes):
        changes.append(f"and {count - len(changes)} more")
    return "; ".join(changes) or "no part differs"


def recipe_parts(recipe: Recipe) -> tuple[WirePart, ...]:
    """A recipe's parts as requests carry them: system texts, tools (parsed from their JSON or YAML
    file, then compact JSON; raw text for ``render: completion``), documents."""
    from prefixplan.warming.recipes import recipe_form

    form = recipe_form(recipe)
    texts = {"system": [], "tool": [], "document": []}  # type: dict[str, list[str]]
    for part in recipe.parts:
        texts[part.kind].append(part.data.decode("utf-8"))
    parts = [WirePart("system", t) for t in texts["system"]]
    if recipe.render == "chat":
        parts.extend(WirePart("tool", compact(t), True) for t in form.tools or ())
    else:
        parts.extend(WirePart("tool", t) for t in texts["tool"])
    parts.extend(WirePart("document", t) for t in texts["document"])
    return tuple(parts)


def expand_chat(body: dict[str, Any], parts: Sequence[WirePart]) -> dict[str, Any]:
    """``body`` with the prefix's messages prepended, its tools set and its documents leading the
    first user message (a new dict; ``body`` is not changed)."""
    lead = [{"role": p.kind, "content": p.value()} for p in parts if p.kind in MESSAGE_KINDS]
    tools = [p.value() for p in parts if p.kind == "tool"]
    docs = "".join(p.data for p in parts if p.kind == "document")
    messages = [dict(m) if isinstance(m, Mapping) else m for m in body.get("messages") or []]
    if docs:
        for m in messages:
            if isinstance(m, dict) and m.get("role") == "user":
                content = m.get("content")
                if isinstance(content, list):
                    m["content"] = [{"type": "text", "text": docs}, *content]
                else:
                    m["content"] = docs + (content or "")
                break
    out = dict(body)
    out["messages"] = lead + messages
    if tools:
        out["tools"] = tools
    return out


def expand_completion(body: dict[str, Any], parts: Sequence[WirePart]) -> dict[str, Any]:
    """``body`` whose text ``prompt`` is continued from the prefix's parts, in order."""
    lead = "".join(p.data for p in parts)
    out = dict(body)
    prompt = body.get("prompt")
    out["prompt"] = lead + (prompt if isinstance(prompt, str) else "")
    return out
