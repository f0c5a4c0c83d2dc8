"""Where a rendered prompt's parts end: Anthropic breakpoints as token offsets, and the leading
system/tool prefix a gateway key stands for."""

from __future__ import annotations

from prefixplan.core.hashes import segment_hash
from prefixplan.core.types import Prompt

_MESSAGE_KINDS = ("user", "assistant", "tool_result")


def breakpoint_offsets(prompt: Prompt) -> tuple[int, ...]:
    """Token offsets (prefix lengths) of a request's ``cache_control`` breakpoints."""
    req = prompt.request
    if not req.breakpoints:
        return ()
    segs = prompt.segments
    messages = sorted({s.index for s in segs if s.kind in _MESSAGE_KINDS})
    out = set()
    for bp in req.breakpoints:
        if bp.where == "system":
            ends = [s.end for s in segs if s.kind == "system"]
        elif bp.where == "tools":
            ends = [s.end for s in segs if s.kind == "tool" and s.index == bp.index] or [
                s.end for s in segs if s.kind == "tool"
            ]
        else:
            idx = messages[bp.index] if 0 <= bp.index < len(messages) else None
            ends = [s.end for s in segs if s.kind in _MESSAGE_KINDS and s.index == idx]
        if ends:
            out.add(max(ends))
    return tuple(sorted(out))


def key_prefix(prompt: Prompt) -> tuple[str | None, int]:
    """``(identity, tokens)`` of a chat prompt's leading system/tool prefix, up to where the first
    user message's content starts (what a gateway key registers); ``(None, 0)`` without one."""
    users = [s.start for s in prompt.segments if s.kind == "user"]
    if not users:
        return None, 0
    cut = min(users)
    if not any(s.kind in ("system", "tool") and s.end <= cut for s in prompt.segments):
        return None, 0
    ident = segment_hash(prompt.request.namespace.encode() + b"\x00" + prompt.tokens[:cut].tobytes())
    return f"prefix-{ident}", cut
