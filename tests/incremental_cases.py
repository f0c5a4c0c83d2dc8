"""Generated conversations for the incremental-encoding property tests (hypothesis strategies).

Small pools of system prompts, tool sets, documents and questions make texts recur across
examples (so ids are reused, as in a real log), and random text, Unicode and whitespace at every
boundary (line feeds before spaces, ``/``, combining marks, digits) make the cuts meet the cases
the proof distinguishes.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

DOC = (
    "Ownership rules\n\nEach value in Rust has an owner.\nThere can only be one owner at a time.\n"
    "When the owner goes out of scope, the value will be dropped.\n\n"
    "/usr/local/bin holds the binary.\n  indented line\n\tTabbed line\n1. first\n2. second\n"
)
SYSTEMS = [
    "You are a careful support assistant.\nAnswer briefly.\n\nCite the docs.",
    "Tu es un assistant — réponds en français.\n\nSois précis.\n",
    "你是一个乐于助人的助手。\n请用中文回答。\n\n",
    "Rules:\n- be brief\n- /commands start with a slash\n  - nested\n\n" + DOC,
    "e\u0301 combining start\n\u0301 mark after a line feed\n😀 emoji\n",
    "Trailing spaces   \n   \n\nleading spaces\n\n\n",
]
DOCS = [
    DOC,
    "Alpha paragraph.\n\nBeta paragraph\nwith two lines.\n",
    "日本語の段落です。\n\n次の段落。\n",
    "x" * 300 + "\n",
]
QUESTIONS = [
    "How do I reset my password?",
    "Why is the build failing on main?\nIt says: error[E0382].",
    "  leading spaces, then text",
    "\nstarts with a line feed",
    "/help me with this command",
    "1234 numbers first",
    "\u0301 starts with a mark",
]
EDGES = ["", " ", "\n", "\n\n", " \n", "/", "\u0301", "7", "'s", "\t"]
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city.\nUse metric units.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "description": "City name"}},
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search_docs",
            "description": "Search the manual — returns /paths.",
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
        },
    },
]
TOOL_SETS: list[list[dict[str, Any]] | None] = [None, TOOLS[:1], TOOLS, TOOLS[::-1]]


@st.composite
def texts(draw: st.DrawFn) -> str:
    """A user or tool text: a pooled question or random text, maybe documents, odd edges."""
    body = draw(st.one_of(st.sampled_from(QUESTIONS), st.text(min_size=1, max_size=40)))
    docs = draw(st.lists(st.sampled_from(DOCS), max_size=2))
    if docs:
        body += draw(st.sampled_from(["\n\nUse these documents:\n\n", "\n", "\n\n"])) + "\n\n".join(docs)
    return draw(st.sampled_from(EDGES)) + body + draw(st.sampled_from(EDGES))


@st.composite
def conversations(draw: st.DrawFn, *, tools: bool = True, tool_calls: bool = True) -> dict[str, Any]:
    """``{"messages": [...], "tools": [...] | None}``: an optional system prompt, 1-3 user turns,
    assistant answers between them (tool calls answered by tool results when tools are given)."""
    tool_set = draw(st.sampled_from(TOOL_SETS)) if tools else None
    messages: list[dict[str, Any]] = []
    system = draw(st.sampled_from([*SYSTEMS, None]))
    if system is not None:
        messages.append({"role": "system", "content": draw(st.sampled_from(EDGES)) + system})
    turns = draw(st.integers(1, 3))
    for turn in range(turns):
        messages.append({"role": "user", "content": draw(texts())})
        if turn == turns - 1:
            break
        if tool_set and tool_calls and draw(st.booleans()):
            name = tool_set[0]["function"]["name"]
            call_id = f"call{turn}abcd"[:9]
            arguments = {"city": draw(st.sampled_from(["Zürich", "Paris", "/tmp"]))}
            call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
            messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
            messages.append({"role": "tool", "tool_call_id": call_id, "name": name, "content": draw(texts())})
            messages.append({"role": "assistant", "content": draw(st.sampled_from(["Done.", "It is sunny.\n"]))})
        else:
            messages.append({"role": "assistant", "content": draw(st.sampled_from(["Sure.", "Here:\n\n" + DOC]))})
    return {"messages": messages, "tools": tool_set}


def prefixes(conversation: dict[str, Any]) -> list[dict[str, Any]]:
    """The conversation as its requests were logged: one request per user turn, each carrying
    the turns before it (so later requests begin with text earlier ones had)."""
    messages = conversation["messages"]
    ends = [k + 1 for k, m in enumerate(messages) if m["role"] == "user"]
    return [{"messages": messages[:end], "tools": conversation["tools"]} for end in ends]
