"""Request forms of a prefix, for servers that do not take token-id prompts.

A :class:`PromptForm` is the request a prefix comes from, minus the part that varies between
requests: the chat messages before the first user message, the tools, and the text that leads
the first user message (documents), or for plain completions the leading prompt text. Adding a
question gives a whole request whose rendering starts with the prefix; two different
questions give two requests that share exactly the prefix, which is how a warm-up and its
verification probe are built when a server must render the prompt itself (generic
OpenAI-compatible servers).

Analysis candidates carry no messages, only ``example`` (source and line of their
representative request) and ``parts``; :func:`form_from_example` reads that log line again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from prefixplan.analysis.record import CandidatePart, ExampleRef
from prefixplan.errors import PrefixplanError

# Questions appended after a prefix: different first characters (and so different first
# tokens), so the rendered requests share the prefix and nothing after it. Real questions are
# assumed to start with a letter or a digit (a leading space or newline may merge with the
# last token of a document).
WARM_QUESTION = "Which options do I have here?"
PROBE_QUESTION = "Please summarise the above in one line."
EXTRA_QUESTIONS = ("42?",)

FORM_MODES = ("chat", "completion")


@dataclass(frozen=True, slots=True)
class PromptForm:
    """The varying-part-free request of a prefix (see module docstring)."""

    mode: str  # chat | completion
    messages: tuple[dict[str, Any], ...] = ()
    tools: tuple[dict[str, Any], ...] | None = None
    user_lead: str = ""  # chat: text that starts the first user message (documents)
    prompt_lead: str = ""  # completion: the prompt text before the question

    def chat(self, question: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
        """Messages and tools of the chat request that asks ``question`` after the prefix."""
        msgs = [dict(m) for m in self.messages] + [{"role": "user", "content": self.user_lead + question}]
        return msgs, [dict(t) for t in self.tools] if self.tools else None

    def prompt(self, question: str) -> str:
        """The completion prompt that continues the prefix with ``question``."""
        return self.prompt_lead + question

    def to_dict(self) -> dict[str, Any]:
        if self.mode == "completion":
            return {"mode": "completion", "prompt_lead": self.prompt_lead}
        out: dict[str, Any] = {"mode": "chat", "messages": [dict(m) for m in self.messages]}
        if self.tools:
            out["tools"] = [dict(t) for t in self.tools]
        if self.user_lead:
            out["user_lead"] = self.user_lead
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PromptForm | None:
        """The form stored in a record (``candidate["prompt_form"]``); None when malformed."""
        mode = data.get("mode")
        if mode == "completion" and isinstance(data.get("prompt_lead"), str):
            return cls(mode="completion", prompt_lead=data["prompt_lead"])
        if mode != "chat" or not isinstance(data.get("messages"), list):
            return None
        msgs = tuple(dict(m) for m in data["messages"] if isinstance(m, Mapping))
        tools = data.get("tools")
        tools_t = tuple(dict(t) for t in tools if isinstance(t, Mapping)) if isinstance(tools, list) and tools else None
        raw_lead = data.get("user_lead")
        lead = raw_lead if isinstance(raw_lead, str) else ""
        return cls(mode="chat", messages=msgs, tools=tools_t, user_lead=lead)


def _tool_name(tool: Mapping[str, Any]) -> str | None:
    fn = tool.get("function") if isinstance(tool.get("function"), Mapping) else tool
    name = fn.get("name") if isinstance(fn, Mapping) else None
    return str(name) if name else None


def form_from_request(
    messages: Sequence[Mapping[str, Any]] | None,
    tools: Sequence[Mapping[str, Any]] | None,
    parts: Sequence[CandidatePart],
) -> tuple[PromptForm | None, str]:
    """The chat form of a candidate whose prefix covers ``parts`` of this request.

    Supported: prefixes made of the leading system/developer messages and tool schemas (labels
    ``system``, ``tools``, ``system+tools``), which end where the first user message starts.
    Returns ``(form, "")`` or ``(None, why not)``.
    """
    kinds = [p.kind for p in parts if p.kind != "template"]
    other = sorted(set(kinds) - {"system", "tool"})
    if other:
        return None, (
            f"the prefix includes {', '.join(other)} content; only system and tool prefixes can be "
            "warmed through a chat request"
        )
    if messages is None:
        return None, "the example request is not a chat request"
    n_system = kinds.count("system")
    lead = [dict(m) for m in messages[:n_system]]
    if any(m.get("role") not in ("system", "developer") for m in lead) or len(lead) < n_system:
        return None, "the example request's leading messages do not match the prefix's system parts"
    covered = [str(p.text) for p in parts if p.kind == "tool"]
    chosen: tuple[dict[str, Any], ...] | None = None
    if covered:
        by_name = {_tool_name(t): t for t in tools or ()}
        if any(name not in by_name for name in covered):
            return None, "the example request lacks a tool the prefix covers"
        chosen = tuple(dict(by_name[name]) for name in covered)
    return PromptForm(mode="chat", messages=tuple(lead), tools=chosen), ""


def form_from_example(
    example: ExampleRef, parts: Sequence[CandidatePart], fmt: str = "auto"
) -> tuple[PromptForm | None, str]:
    """Read the representative request ``{source, line}`` of a candidate from its log again and
    return its chat form (see :func:`form_from_request`)."""
    from prefixplan.logs import LineErrors, iter_requests
    from prefixplan.logs.read import ReadOptions

    source, line = example.source, example.line
    if not source or line < 1:
        return None, "the candidate names no example request"
    if source == "-":
        return None, "the example request was read from stdin"
    try:
        for req in iter_requests([str(source)], ReadOptions(format=fmt), LineErrors()):
            if req.line_no == line:
                return form_from_request(req.messages, req.tools, parts)
            if req.line_no > line:
                break
    except PrefixplanError as err:
        return None, f"cannot read the example request {source}:{line}: {err}"
    return None, f"example request {source}:{line} not found"
