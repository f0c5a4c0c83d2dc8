"""Messages as vLLM hands them to a chat template (vLLM 0.32 ``renderers/chat_utils.py``).

A local ``hf:`` rendering must give the engine's ids, so the messages are normalised the way
vLLM's chat preprocessing does before the template runs:

- ``content: null`` becomes ``""`` (an assistant turn that only calls tools);
- a content list made only of text parts becomes their texts joined with ``"\\n"`` (the
  "string" content format most templates use); lists with other parts are left as they are;
- assistant ``tool_calls`` arguments given as a JSON string become the object they encode
  (``{}`` when empty, not JSON or not an object), as templates expect; an empty ``tool_calls``
  list is dropped.

Messages that need none of this are passed through unchanged (no copy).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any


def _arguments(value: Any) -> Any:
    if isinstance(value, dict):
        return value
    if not value:
        return {}
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except ValueError:
            return {}
        return parsed if isinstance(parsed, dict) else {}
    return value


def _message(msg: dict[str, Any]) -> dict[str, Any]:
    content = msg.get("content")
    calls = msg.get("tool_calls")
    text_list = isinstance(content, list) and all(
        isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str) for p in content
    )
    fix_calls = msg.get("role") == "assistant" and isinstance(calls, list)
    if content is not None and not text_list and not fix_calls:
        return msg
    out = dict(msg)
    if content is None:
        out["content"] = ""
    elif text_list:
        out["content"] = "\n".join(p["text"] for p in content)
    if fix_calls:
        assert isinstance(calls, list)
        if not calls:
            out.pop("tool_calls")
        else:
            fixed = []
            for call in calls:
                fn = call.get("function") if isinstance(call, dict) else None
                if isinstance(fn, dict) and not isinstance(fn.get("arguments"), dict):
                    call = dict(call, function=dict(fn, arguments=_arguments(fn.get("arguments"))))
                fixed.append(call)
            out["tool_calls"] = fixed
    return out


def engine_messages(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` normalised as vLLM does before applying the chat template (module docstring)."""
    return [_message(m) if isinstance(m, dict) else m for m in messages]
