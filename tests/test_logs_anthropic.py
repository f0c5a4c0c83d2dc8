"""Property test: Anthropic -> OpenAI conversion keeps every text, tool call, tool result and
cache marker, in order, against a direct walk of the original blocks."""

from __future__ import annotations

import itertools
import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from prefixplan.core.types import Breakpoint
from prefixplan.logs.anthropic import convert

USER_BLOCK = st.sampled_from(["text", "text", "tool_result", "image"])
ASSISTANT_BLOCK = st.sampled_from(["text", "tool_use", "thinking"])


@st.composite
def conversations(draw: Any) -> dict[str, Any]:
    counter = itertools.count()
    n = draw(st.integers(1, 6))
    messages = []
    for turn in range(n):
        role = "user" if turn % 2 == 0 else "assistant"
        if draw(st.booleans()) and draw(st.booleans()):
            messages.append({"role": role, "content": f"plain {next(counter)}"})
            continue
        blocks = []
        for kind in draw(st.lists(USER_BLOCK if role == "user" else ASSISTANT_BLOCK, min_size=1, max_size=5)):
            k = next(counter)
            if kind == "text":
                block: dict[str, Any] = {"type": "text", "text": f"t{k}"}
            elif kind == "image":
                block = {"type": "image", "source": {"type": "url", "url": f"https://x/{k}.png"}}
            elif kind == "tool_result":
                block = {"type": "tool_result", "tool_use_id": f"id{k}", "content": f"r{k}"}
            elif kind == "tool_use":
                block = {"type": "tool_use", "id": f"id{k}", "name": f"f{k}", "input": {"a": k}}
            else:
                block = {"type": "thinking", "thinking": f"th{k}", "signature": "s"}
            if draw(st.integers(0, 4)) == 0:
                block["cache_control"] = {"type": "ephemeral"}
            blocks.append(block)
        messages.append({"role": role, "content": blocks})
    body: dict[str, Any] = {"model": "claude", "messages": messages}
    if draw(st.booleans()):
        body["system"] = "sys"
    return body


def _texts(content: Any) -> list[str]:
    if content is None:
        return []
    if isinstance(content, str):
        return [content]
    return [p["text"] for p in content if p.get("type") == "text"]


def _marker_key(block: dict[str, Any]) -> str:
    kind = block["type"]
    if kind == "text":
        return block["text"]
    if kind == "image":
        return block["source"]["url"]
    if kind == "tool_result":
        return block["tool_use_id"]
    if kind == "tool_use":
        return block["id"]
    return block["thinking"]


def _keys_of(msg: dict[str, Any]) -> set[str]:
    keys = set(_texts(msg.get("content")))
    if isinstance(msg.get("content"), list):
        keys |= {p["image_url"]["url"] for p in msg["content"] if p.get("type") == "image_url"}
    keys |= {c["id"] for c in msg.get("tool_calls", [])}
    if msg.get("reasoning_content"):
        keys |= set(msg["reasoning_content"].split("\n"))
    if msg["role"] == "tool":
        keys.add(msg["tool_call_id"])
    return keys


@settings(max_examples=300, deadline=None)
@given(conversations())
def test_conversion_keeps_everything_in_order(body: dict[str, Any]) -> None:
    messages, tools, bps, _ = convert(body)
    assert tools is None
    # oracle: walk the original blocks
    texts, calls, results, marked = [], [], [], []
    for msg in body["messages"]:
        content = msg["content"]
        if isinstance(content, str):
            texts.append(content)
            continue
        for block in content:
            if block["type"] == "text":
                texts.append(block["text"])
            elif block["type"] == "tool_use":
                calls.append((block["id"], block["name"], block["input"]))
            elif block["type"] == "tool_result":
                results.append((block["tool_use_id"], block["content"]))
            if "cache_control" in block:
                marked.append(_marker_key(block))
    if "system" in body:
        assert messages[0] == {"role": "system", "content": "sys"}
        messages_wo_system = messages[1:]
    else:
        messages_wo_system = messages
    got_texts = [t for m in messages_wo_system if m["role"] != "tool" for t in _texts(m["content"])]
    assert got_texts == texts
    got_calls = [
        (c["id"], c["function"]["name"], json.loads(c["function"]["arguments"]))
        for m in messages
        for c in m.get("tool_calls", [])
    ]
    assert got_calls == calls
    assert [(m["tool_call_id"], m["content"]) for m in messages if m["role"] == "tool"] == results
    # every marked block sits in a message that carries a breakpoint, and nothing else does
    assert all(bp.where == "message" for bp in bps)
    marked_msgs = {i for i, m in enumerate(messages) if _keys_of(m) & set(marked)}
    assert {bp.index for bp in bps} == marked_msgs
    assert len(bps) == len(marked_msgs)
    assert all(bp == Breakpoint("message", bp.index, "5m") for bp in bps)
