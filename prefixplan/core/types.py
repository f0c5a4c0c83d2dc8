"""Records passed between the stages of the pipeline.

logs -> :class:`Request` -> render -> :class:`Prompt` (token ids + :class:`Segment` spans)
-> radix tree -> candidates -> simulation / keys / warm.

All records are frozen, slotted dataclasses. Token ids are 1-D ``numpy.uint32`` arrays
(:data:`TokenIds`), never Python lists of ints, so a day of traffic fits in memory.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NewType

import numpy as np

from prefixplan.core.hashes import SegmentHash, segment_hash
from prefixplan.core.promptids import PromptIds

TokenIds = NewType("TokenIds", np.ndarray)
"""A 1-D ``numpy.uint32`` array of token ids."""

TOKEN_DTYPE = np.uint32


def as_token_ids(ids: Any) -> TokenIds:
    """Return ``ids`` as a contiguous 1-D uint32 array (no copy when already one)."""
    arr = np.ascontiguousarray(ids, dtype=TOKEN_DTYPE)
    if arr.ndim != 1:
        arr = arr.reshape(-1)
    return TokenIds(arr)


# Log formats a reader can produce (described in prefixplan/logs/detect.py and docs/logs.md).
FORMATS = (
    "openai-chat",
    "openai-completion",
    "openai-batch",
    "raw",
    "anthropic",
    "mooncake",
    "vllm-log",
    "sglang-log",
    "litellm",
    "otel-genai",
    "langfuse",
)

# Formats whose requests carry the engine's own token ids (``Request.prompt_ids``): they are
# analysed from those ids, whatever the tokenizer.
ENGINE_FORMATS = ("vllm-log", "sglang-log")


@dataclass(frozen=True, slots=True)
class Breakpoint:
    """An Anthropic ``cache_control`` marker: where a cached prefix ends.

    ``where`` is ``"tools"``, ``"system"`` or ``"message"``; ``index`` is the tool index,
    system block index or message index that carried the marker; ``ttl`` is "5m" or "1h".
    """

    where: str
    index: int
    ttl: str = "5m"


@dataclass(frozen=True, slots=True)
class Request:
    """One logged request, normalised across log formats.

    Chat requests keep ``messages`` in OpenAI Chat Completions shape (Anthropic requests
    are converted: ``system`` becomes a leading system message, ``tool_use`` blocks become
    ``tool_calls``, ``tool_result`` blocks become ``role: tool`` messages) and ``tools`` in
    OpenAI function-tool shape. Completions keep ``prompt`` (text) or ``prompt_ids``.
    Mooncake traces keep ``hash_ids`` (one id per block of ``trace_block_size`` tokens).
    """

    source: str  # file name, or "-" for stdin
    line_no: int  # 1-based line number in ``source``
    id: str
    format: str  # one of FORMATS
    time: float | None = None  # seconds since epoch (or trace-relative seconds)
    model: str | None = None
    messages: tuple[dict[str, Any], ...] | None = None
    tools: tuple[dict[str, Any], ...] | None = None
    prompt: str | None = None
    prompt_ids: tuple[int, ...] | PromptIds | None = None  # PromptIds: an engine log's ids, 4 bytes each
    hash_ids: tuple[int, ...] | None = None
    trace_block_size: int | None = None
    input_length: int | None = None
    output_length: int | None = None  # max_tokens or logged completion tokens
    tenant: str | None = None  # user / tenant id when the log has one
    lora: str | None = None
    cache_salt: str | None = None
    logged_cached_tokens: int | None = None  # usage.prompt_tokens_details.cached_tokens
    logged_prompt_tokens: int | None = None  # usage.prompt_tokens
    breakpoints: tuple[Breakpoint, ...] = ()
    extra: dict[str, Any] | None = field(default=None, compare=False)

    @property
    def namespace(self) -> str:
        """Cache namespace: requests in different namespaces never share KV blocks."""
        return namespace_key(self.model, self.lora, self.cache_salt)


def namespace_key(model: str | None, lora: str | None = None, salt: str | None = None) -> str:
    """Stable string for a (model, LoRA, cache salt) namespace."""
    parts = [model or "-"]
    if lora:
        parts.append(f"lora={lora}")
    if salt:
        parts.append(f"salt={segment_hash(salt)}")
    return "|".join(parts)


# Segment kinds. A shared prefix is labelled from the kinds of the segments it covers.
SEGMENT_KINDS = (
    "template",  # tokens the chat template adds (role headers, special tokens, tool preamble)
    "system",  # a system (or developer) message's content
    "tool",  # one tool schema as rendered by the template
    "user",  # a user message's content
    "assistant",  # an assistant message's content (incl. reasoning and tool calls)
    "tool_result",  # a role=tool message's content
    "doc",  # a document chunk recurring across requests (assigned by analysis)
    "raw",  # a raw prompt (completions / plain text), no template
    "block",  # an opaque trace block (Mooncake hash id)
)


@dataclass(frozen=True, slots=True)
class Segment:
    """A token range ``[start, end)`` of a :class:`Prompt` and where it came from.

    Boundary rule: a token belongs to the segment that contains the first character of the
    token's text. Template tokens between contents form ``template`` segments. ``index`` is
    the message index (for message kinds) or the tool index (for ``tool``).
    """

    kind: str
    start: int
    end: int
    text_hash: SegmentHash
    index: int = 0
    name: str | None = None  # tool name, when kind == "tool"


@dataclass(frozen=True, slots=True)
class Chunk:
    """A paragraph/block inside a message: a RAG-chunk candidate.

    ``text_hash`` identifies the chunk text across requests; ``[start, end)`` are token
    offsets in the prompt (same boundary rule as :class:`Segment`).
    """

    text_hash: SegmentHash
    start: int
    end: int
    message_index: int
    chars: int


@dataclass(frozen=True, slots=True)
class Prompt:
    """A request rendered to the exact token ids the engine computes.

    ``exact`` is False when the rendering is a documented approximation (hosted APIs,
    tiktoken renderings of chat, Anthropic logs, trace blocks).
    """

    request: Request
    tokens: TokenIds
    segments: tuple[Segment, ...]
    chunks: tuple[Chunk, ...] = ()
    exact: bool = True
    token_scale: int = 1  # each id stands for this many tokens (Mooncake trace blocks)

    def __len__(self) -> int:
        return int(self.tokens.shape[0])

    @property
    def n_tokens(self) -> int:
        """Prompt length in real tokens: ids x token_scale, or a trace line's ``input_length``
        when it has one (Mooncake hash ids stand for 512-token blocks; the last may be partial)."""
        if self.token_scale > 1 and self.request.input_length is not None and self.request.input_length >= 0:
            return int(self.request.input_length)
        return int(self.tokens.shape[0]) * self.token_scale
