"""Which reader a file needs, and the table of every format (``prefixplan formats``).

JSON-lines formats are detected per line (a file may mix them). Engine server logs are plain
text and are detected per file: the first lines are looked at (up to :data:`SNIFF_LINES`
non-blank lines) until one decides -- a line starting with ``{`` means JSON lines, vLLM's logger
prefix (``INFO 12-01 08:00:56``) a vLLM log, SGLang's (``[2025-12-01 08:00:56]``) an SGLang log.
``--log-format NAME`` skips the guess.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import chain

from prefixplan.core.types import FORMATS
from prefixplan.logs.open import RawLine
from prefixplan.logs.vllm_log import PREFIX as VLLM_PREFIX

SNIFF_LINES = 200
SGLANG_PREFIX = re.compile(r"^\[(\d{4})-(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)(?:[.,]\d+)?(?: [^\]]*)?\] ")
TEXT_FORMATS = ("vllm-log", "sglang-log")
JSONL = "jsonl"


@dataclass(frozen=True, slots=True)
class FormatInfo:
    """One input format as ``prefixplan formats`` and docs/logs.md describe it."""

    name: str
    source: str  # who writes it
    detected_by: str
    needs: str  # what the log must contain / how to produce it
    tokens: str  # where the token ids come from

    def to_json(self) -> dict[str, str]:
        return {
            "name": self.name,
            "source": self.source,
            "detected_by": self.detected_by,
            "needs": self.needs,
            "tokens": self.tokens,
        }


FORMAT_INFO: dict[str, FormatInfo] = {
    f.name: f
    for f in (
        FormatInfo(
            "openai-chat",
            "OpenAI Chat Completions request bodies (or {request, response} records)",
            "JSON line with messages (no Anthropic markers)",
            "messages; tools, model, user optional",
            "rendered with --tokenizer",
        ),
        FormatInfo(
            "openai-completion",
            "OpenAI Completions request bodies",
            "JSON line with prompt and model",
            "prompt (text, or token ids)",
            "token ids as sent, else rendered with --tokenizer",
        ),
        FormatInfo(
            "openai-batch",
            "OpenAI Batch input files",
            "JSON line with custom_id, method, url, body",
            "a chat, completions or messages url",
            "rendered with --tokenizer",
        ),
        FormatInfo(
            "raw",
            "plain prompts",
            "JSON line with prompt or input and no model",
            "prompt or input",
            "rendered with --tokenizer (no template)",
        ),
        FormatInfo(
            "anthropic",
            "Anthropic Messages requests and Message Batches lines",
            "JSON line with messages and a top-level system, tool input_schema, cache_control, ...",
            "messages",
            "rendered with --tokenizer (approximate: Anthropic's tokenizer is not public)",
        ),
        FormatInfo(
            "mooncake",
            "Mooncake traces (FAST'25)",
            "JSON line with hash_ids",
            "hash_ids; timestamp, input_length optional",
            "one id per block of --trace-block-size tokens",
        ),
        FormatInfo(
            "vllm-log",
            "a vLLM server's own log (vLLM 0.32; older INFO layout too)",
            "text lines with vLLM's logger prefix, e.g. 'DEBUG 12-01 08:00:56 [...request_logger.py:55]'",
            "--enable-log-requests and --log-level debug (INFO alone has no prompts); --max-log-len large enough",
            "the engine's own prompt_token_ids (exact, no tokenizer needed)",
        ),
        FormatInfo(
            "sglang-log",
            "an SGLang server's own log (SGLang 0.5; text or --log-requests-format json)",
            "text lines starting '[YYYY-MM-DD HH:MM:SS] ' with 'Receive: obj=GenerateReqInput(' or JSON events",
            "--log-requests and --log-requests-level 3 (level 2 cuts prompts at 2048, 0-1 log none)",
            "the engine's own input_ids (exact); text prompts rendered with --tokenizer",
        ),
        FormatInfo(
            "litellm",
            "LiteLLM proxy: StandardLoggingPayload lines, or LiteLLM_SpendLogs rows exported as JSON",
            "JSON line with call_type and (startTime or request_id) and LiteLLM's field names",
            "messages (payload), or messages / proxy_server_request (spend logs with store_prompts_in_spend_logs)",
            "rendered with --tokenizer",
        ),
        FormatInfo(
            "otel-genai",
            "OpenTelemetry GenAI spans as OTLP JSON (collector file exporter, one export request a line)",
            "JSON line with resourceSpans",
            "gen_ai.input.messages (semconv 1.37+) or gen_ai.prompt (event gen_ai.content.prompt, 1.26-1.27) with content capture on",
            "rendered with --tokenizer",
        ),
        FormatInfo(
            "langfuse",
            "Langfuse observations (GET /api/public/observations pages or one observation a line)",
            "JSON line with traceId and type GENERATION (or a page {data: [...], meta})",
            "input of GENERATION observations (messages, or {messages, tools})",
            "rendered with --tokenizer",
        ),
    )
}
assert set(FORMAT_INFO) == set(FORMATS), "every format in core.types.FORMATS is described here"


def formats_table() -> list[FormatInfo]:
    """Every input format, in :data:`~prefixplan.core.types.FORMATS` order (``prefixplan formats``)."""
    return [FORMAT_INFO[name] for name in FORMATS]


def sniff(lines: Iterator[RawLine], forced: str) -> tuple[str, str, Iterator[RawLine]]:
    """(reader, how it was chosen, all lines again) for one file.

    ``reader`` is ``"vllm-log"``, ``"sglang-log"`` or ``"jsonl"`` (JSON formats, detected per line).
    """
    if forced in TEXT_FORMATS:
        return forced, "forced by --log-format", lines
    if forced != "auto":
        return JSONL, "forced by --log-format", lines
    seen: list[RawLine] = []
    kind, how = JSONL, "auto-detected: JSON lines"
    looked = 0
    for raw in lines:
        seen.append(raw)
        data = raw.data
        if data is None or not data.strip():
            continue
        looked += 1
        head = data.lstrip()[:4096]
        if head[:1] == b"{":
            break
        text = head.decode("utf-8", "replace")
        if SGLANG_PREFIX.match(text):
            kind, how = "sglang-log", f"auto-detected: SGLang logger prefix at line {raw.line_no}"
            break
        if head[:1] == b"[":
            break
        if VLLM_PREFIX.search(text):
            kind, how = "vllm-log", f"auto-detected: vLLM logger prefix at line {raw.line_no}"
            break
        if looked >= SNIFF_LINES:
            break
    return kind, how, chain(seen, lines)
