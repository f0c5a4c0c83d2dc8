"""vLLM server logs written with ``--enable-log-requests`` (format ``vllm-log``).

vLLM 0.32's request logger (``vllm/entrypoints/serve/utils/request_logger.py``) writes, per request:

- DEBUG ``Request {body id} JSON body: {json}`` -- the OpenAI request (model, messages, tools),
  cut to ``--max-log-len`` characters;
- DEBUG ``Request {id} details: prompt: '...', prompt_token_ids: [...], prompt_embeds shape: ...``
  -- the prompt the engine received and **its token ids**, both cut to ``--max-log-len``;
- INFO ``Received request {id}: params: SamplingParams(...), lora_request: ...``.

Older versions logged prompt, params, ids and LoRA in one INFO ``Received request`` line. Lines
carry the logger's prefix (``(APIServer pid=N) DEBUG 12-01 08:00:56 [file.py:55]``) and are mixed
with every other server line, which are ignored. The details id is ``chatcmpl-{body id}`` (chat),
``cmpl-{body id}-{i}`` (completions) or ``tokenize-...`` (``/tokenize`` calls: skipped); a body whose
id does not match (an ``X-Request-Id`` header) is paired with the next details line of the same
process whose prompt it is consistent with.

The token ids are the engine's own: a request with complete ids needs no tokenizer. Ids cut by
``--max-log-len`` (known from the startup line ``non-default args: {..., 'max_log_len': N}``, or
from a JSON body cut at the same length) are never analysed as a short prompt: the request is
rendered from its JSON body when that is complete, else reported as ``truncated``.
"""

from __future__ import annotations

import json
import re
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from prefixplan.core.promptids import PromptIds
from prefixplan.core.types import Request
from prefixplan.logs.badline import BadLine
from prefixplan.logs.envelope import LineContext
from prefixplan.logs.formats import parse_object
from prefixplan.logs.limits import MAX_RECORD_TOKENS, clip
from prefixplan.logs.pyrepr import Call, ListTooLong, ReprError, parse_labelled, parse_value
from prefixplan.logs.textlog import ANSI, Item, LogClock, Problem, SourceInfo, token_ids

VLLM_FORMAT = "vllm-log"
PREFIX = re.compile(r"\b(DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)\b")
_PID = re.compile(r"\((\w+) pid=(\d+)\)")
_MESSAGE = re.compile(r"Request (\S+) (details|JSON body): |Received request (\S+?): |non-default args: ")
_DETAILS = frozenset({"prompt", "prompt_token_ids", "prompt_embeds shape"})
_RECEIVED = frozenset(
    {"prompt", "params", "prompt_token_ids", "prompt_embeds shape", "lora_request", "prompt_adapter_request"}
)
_ID_PREFIXES = ("chatcmpl-", "cmpl-", "embd-", "pool-", "score-", "classify-", "resp_", "resp-")
_JSON_TOKENS = re.compile(r'("(?:[^"\\]|\\.)*(")?)|[{}\[\]]')
_MAX_PENDING = 256
_MAX_PENDING_IDS = 16_000_000  # ids held by requests waiting for their INFO line (64 MB)
_MAX_UNPAIRED = 4096
ENABLE_HINT = "start vLLM with --enable-log-requests and --log-level debug (or VLLM_LOGGING_LEVEL=DEBUG)"


@dataclass
class _Body:
    line_no: int
    pid: str | None
    data: dict[str, Any] | None  # None when cut by --max-log-len or unreadable
    cut: bool
    raw_len: int


@dataclass
class _Pending:
    rid: str
    line_no: int
    time: float | None
    pid: str | None
    prompt: str | None
    ids: PromptIds | None
    body: _Body | None
    lora: str | None = None
    max_tokens: int | None = None
    received: bool = False


def _json_prefix(raw: str) -> bool:
    """True when ``raw`` is an unfinished JSON value (a string or bracket still open at its end)."""
    depth = 0
    for m in _JSON_TOKENS.finditer(raw):
        if m.group(1) is not None:
            if m.group(2) is None:
                return True  # a string runs to the end
            continue
        depth += 1 if m.group(0) in "{[" else -1
    return depth > 0


def _base_ids(rid: str) -> list[str]:
    """Body ids a details id may belong to (``chatcmpl-X`` -> X; ``cmpl-X-0`` -> X)."""
    out = [rid]
    for prefix in _ID_PREFIXES:
        if rid.startswith(prefix):
            base = rid[len(prefix) :]
            out.append(base)
            head, sep, tail = base.rpartition("-")
            if sep and tail.isdigit():
                out.append(head)
            break
    return out


def _sub_index(rid: str) -> int:
    _, sep, tail = rid.rpartition("-")
    return int(tail) if sep and tail.isdigit() and rid.startswith("cmpl-") else 0


class VLLMLogReader:
    """Reads one vLLM server log (module docstring); feed lines in order, then finish."""

    def __init__(self, source: str, detected: str, max_tokens: int = MAX_RECORD_TOKENS) -> None:
        self.source = source
        self.max_tokens = max_tokens
        self.info = SourceInfo(VLLM_FORMAT, detected)
        self.clock = LogClock(source)
        self.served: str | None = None
        self.max_log_len: int | None = None
        self.cut_at: int | None = None  # inferred from a cut JSON body
        self._bodies: OrderedDict[str, _Body] = OrderedDict()
        self._unpaired: OrderedDict[str, _Body] = OrderedDict()
        self._pending: OrderedDict[str, _Pending] = OrderedDict()
        self._failed: OrderedDict[str, None] = OrderedDict()  # details lines already reported
        self._request_lines = 0
        self._pending_ids = 0

    # -- lines ------------------------------------------------------------------------------
    def feed(self, line_no: int, text: str) -> Iterator[Item]:
        if "equest" not in text and "non-default args" not in text:
            return
        if "\x1b[" in text:
            text = ANSI.sub("", text)
        m = _MESSAGE.search(text)
        if m is None:
            return
        start = m.end()
        stamp = self._time(text[: m.start()])
        pid_m = _PID.search(text, 0, m.start())
        pid = pid_m.group(2) if pid_m else None
        if m.group(0) == "non-default args: ":
            self._startup(text, start)
            return
        self._request_lines += 1
        if m.group(2) == "JSON body":
            self._body(line_no, pid, m.group(1), text[start:])
        elif m.group(2) == "details":
            yield from self._details(line_no, stamp, pid, m.group(1), text, start)
        else:
            yield from self._received(line_no, stamp, pid, m.group(3), text, start)

    def finish(self) -> Iterator[Item]:
        while self._pending:
            _, pending = self._pending.popitem(last=False)
            yield self._emit(pending)
        self._pending_ids = 0
        if self._request_lines == 0:
            self.info.notes.append(f"no request-logger lines: {ENABLE_HINT}")
        elif self.info.counts.get("no prompt") and not self.info.counts.get("requests"):
            self.info.notes.append(
                f"the log has only INFO 'Received request' lines, no prompts or token ids: {ENABLE_HINT}"
            )
        cut = self.info.counts.get("truncated", 0) + self.info.counts.get("ids cut, rendered from the JSON body", 0)
        if cut:
            limit = self.max_log_len or self.cut_at
            self.info.notes.append(
                f"{cut} request(s) had their prompt cut by --max-log-len"
                + (f" {limit}" if limit else "")
                + ": restart vLLM with a larger --max-log-len (or none) to analyse them from their token ids"
            )

    def _time(self, prefix: str) -> float | None:
        m = PREFIX.search(prefix)
        if m is None:
            return None
        month, day, hour, minute, second = (int(g) for g in m.groups()[1:])
        return self.clock.month_day(month, day, hour, minute, second)

    def _startup(self, text: str, start: int) -> None:
        try:
            args, _ = parse_value(text, start)
        except ReprError:
            return
        if not isinstance(args, dict):
            return
        served = args.get("served_model_name")
        if isinstance(served, list) and served and isinstance(served[0], str):
            self.served = served[0]
        elif isinstance(served, str):
            self.served = served
        else:
            model = args.get("model_tag") or args.get("model")
            if isinstance(model, str):
                self.served = model
        limit = args.get("max_log_len")
        if isinstance(limit, int) and limit > 0:
            self.max_log_len = limit
        self.info.notes.append(
            f"server: model {self.served or '?'}, --max-log-len {self.max_log_len or 'unlimited (default)'}"
        )

    def _body(self, line_no: int, pid: str | None, bid: str, raw: str) -> None:
        if bid == "N/A":  # /tokenize and other calls without a request id
            return
        raw = raw.rstrip("\r\n")
        data: dict[str, Any] | None = None
        cut = False
        try:
            value = json.loads(raw)
            data = value if isinstance(value, dict) else None
        except (ValueError, RecursionError):
            if _json_prefix(raw):
                cut = True
                self.cut_at = max(self.cut_at or 0, len(raw))
            else:
                self.info.count("JSON body unreadable")
        body = _Body(line_no, pid, data, cut, len(raw))
        self._bodies[bid] = body
        self._bodies.move_to_end(bid)
        self._unpaired[bid] = body
        # A paired body stays findable by id (the n choices of one request, cmpl-X-0 and cmpl-X-1,
        # share body X) until 4096 newer bodies arrived: memory does not grow with the log.
        while len(self._bodies) > _MAX_UNPAIRED:
            old, _ = self._bodies.popitem(last=False)
            self._unpaired.pop(old, None)

    def _pair(self, rid: str, pid: str | None, prompt: str | None) -> _Body | None:
        for key in _base_ids(rid):
            body = self._bodies.get(key)
            if body is not None:
                self._unpaired.pop(key, None)
                return body
        for key, body in self._unpaired.items():  # oldest first: an X-Request-Id header
            if body.pid == pid and body.data is not None and _consistent(body.data, prompt):
                del self._unpaired[key]
                self._bodies.pop(key, None)
                return body
        return None

    def _details(
        self, line_no: int, stamp: float | None, pid: str | None, rid: str, text: str, start: int
    ) -> Iterator[Item]:
        if rid.startswith("tokenize-"):
            self.info.count("/tokenize calls skipped")
            return
        try:
            fields = parse_labelled(text, start, _DETAILS, self.max_tokens)
        except ReprError as exc:
            self._fail(rid)
            yield self._unreadable(line_no, f"request {clip(rid)} details", exc)
            return
        pending = self._new_pending(line_no, stamp, pid, rid, fields)
        if isinstance(pending, Problem):
            self._fail(rid)
            yield pending
            return
        self._hold(pending)
        yield from self._flush(force=len(self._pending) > _MAX_PENDING or self._pending_ids > _MAX_PENDING_IDS)

    def _hold(self, pending: _Pending) -> None:
        self._pending[pending.rid] = pending
        self._pending_ids += len(pending.ids or ())

    def _unreadable(self, line_no: int, what: str, exc: ReprError) -> Problem:
        if isinstance(exc, ListTooLong):
            return Problem(
                line_no,
                f"too many tokens: {what}: {exc.count:,} token ids > max_record_tokens {exc.limit:,} (skipped)",
            )
        return Problem(line_no, f"bad request line: {what}: {clip(exc)}")

    def _new_pending(
        self, line_no: int, stamp: float | None, pid: str | None, rid: str, fields: dict[str, Any]
    ) -> _Pending | Problem:
        prompt = fields.get("prompt")
        raw = fields.get("prompt_token_ids")
        if prompt is not None and not isinstance(prompt, str):
            return Problem(line_no, f"wrong type: request {clip(rid)} prompt is not a string")
        ids = token_ids(raw)
        if raw is not None and ids is None:
            return Problem(line_no, f"wrong type: request {clip(rid)} prompt_token_ids is not a list of token ids")
        return _Pending(rid, line_no, stamp, pid, prompt, ids, self._pair(rid, pid, prompt))

    def _received(
        self, line_no: int, stamp: float | None, pid: str | None, rid: str, text: str, start: int
    ) -> Iterator[Item]:
        if rid.startswith("tokenize-"):
            return
        try:
            fields = parse_labelled(text, start, _RECEIVED, self.max_tokens)
        except ReprError as exc:
            yield self._unreadable(line_no, f"received request {clip(rid)}", exc)
            return
        lora, max_tokens = _lora_name(fields.get("lora_request")), _max_tokens(fields.get("params"))
        pending = self._pending.get(rid)
        if pending is None and "prompt" in fields:  # older vLLM: everything on this INFO line
            made = self._new_pending(line_no, stamp, pid, rid, fields)
            if isinstance(made, Problem):
                yield made
                return
            pending = made
            self._hold(pending)
        if pending is None and rid in self._failed:
            return  # its details line was reported already
        if pending is None:
            self.info.count("no prompt")
            yield Problem(line_no, f"no prompt: request {clip(rid)} was logged at INFO only; {ENABLE_HINT}")
            return
        pending.lora, pending.max_tokens, pending.received = lora, max_tokens, True
        yield from self._flush()

    def _fail(self, rid: str) -> None:
        self._failed[rid] = None
        while len(self._failed) > _MAX_UNPAIRED:
            self._failed.popitem(last=False)

    def _flush(self, force: bool = False) -> Iterator[Item]:
        while self._pending:
            rid, head = next(iter(self._pending.items()))
            if not head.received and not force:
                return
            del self._pending[rid]
            self._pending_ids -= len(head.ids or ())
            force = False
            yield self._emit(head)

    # -- requests -----------------------------------------------------------------------------
    def _cut(self, p: _Pending) -> bool:
        assert p.ids is not None
        limit = self.max_log_len or self.cut_at
        n = len(p.ids)
        if limit is not None:
            return n >= limit
        return p.prompt is not None and n >= 16 and len(p.prompt) == n

    def _emit(self, p: _Pending) -> Item:
        ctx = LineContext(self.source, p.line_no)
        if p.ids is None:
            return Problem(p.line_no, f"unsupported: request {clip(p.rid)} has prompt embeddings, not token ids")
        body_req = self._from_body(p, ctx)
        if self._cut(p):
            if body_req is not None and (p.body is not None and not p.body.cut):
                self.info.count("ids cut, rendered from the JSON body")
                self.info.count("requests")
                return body_req
            self.info.count("truncated")
            return Problem(
                p.line_no,
                f"truncated: request {clip(p.rid)}: prompt_token_ids cut at {len(p.ids)} tokens by --max-log-len "
                "(the prompt is longer; not counted)",
            )
        self.info.count("requests")
        base = body_req or Request(source=self.source, line_no=p.line_no, id=p.rid, format=VLLM_FORMAT)
        model = base.model or self.served
        if p.lora and self.served and model == p.lora:
            model = self.served  # a LoRA is requested by its name; the namespace keeps both
        return replace(
            base,
            source=self.source,
            line_no=p.line_no,
            id=p.rid,
            format=VLLM_FORMAT,
            time=p.time if p.time is not None else base.time,
            model=model,
            lora=p.lora or base.lora,
            prompt=None,
            prompt_ids=p.ids,
            input_length=len(p.ids),
            output_length=p.max_tokens if p.max_tokens is not None else base.output_length,
        )

    def _from_body(self, p: _Pending, ctx: LineContext) -> Request | None:
        if p.body is None or p.body.data is None:
            return None
        try:
            found = parse_object(p.body.data, ctx)
        except (BadLine, RecursionError, TypeError, ValueError) as exc:
            self.info.count("JSON body unreadable")
            if len(self.info.notes) < 20:
                self.info.notes.append(f"line {p.body.line_no}: JSON body of {clip(p.rid)} not used: {clip(exc)}")
            return None
        req = found[min(_sub_index(p.rid), len(found) - 1)]
        return replace(req, id=p.rid, format=VLLM_FORMAT, time=p.time, lora=p.lora or req.lora)


def _consistent(body: dict[str, Any], prompt: str | None) -> bool:
    """Whether a JSON body can be the request whose engine prompt text is ``prompt``."""
    if prompt is None:
        return False
    text = body.get("prompt")
    if isinstance(text, str):
        return text == prompt or text.startswith(prompt)
    if isinstance(text, list):
        return prompt in [t for t in text if isinstance(t, str)]
    messages = body.get("messages")
    if isinstance(messages, list) and messages:
        first = messages[0]
        content = first.get("content") if isinstance(first, dict) else None
        return isinstance(content, str) and content[:200] in prompt
    return False


def _lora_name(value: Any) -> str | None:
    if isinstance(value, Call):
        name = value.kwargs.get("lora_name")
        if name is None and value.args:
            name = value.args[0]
        return name if isinstance(name, str) and name else None
    return None


def _max_tokens(value: Any) -> int | None:
    if isinstance(value, Call):
        n = value.kwargs.get("max_tokens")
        return n if isinstance(n, int) and not isinstance(n, bool) else None
    return None
