"""SGLang server logs written with ``--log-requests`` (format ``sglang-log``).

Shapes read here are SGLang 0.5's (``sglang/srt/utils/request_logger.py`` in sglang 0.5.23; SGLang
does not run on the CPU machines this project is tested on, so the tests use lines of these shapes):

- ``[2025-12-01 08:00:56] Receive: obj=GenerateReqInput(rid='..', text=.., input_ids=[..], ...)``
  -- the request as the tokenizer manager received it: for chat requests ``input_ids`` are the
  engine's own token ids (the chat template already applied);
- ``[..] Receive OpenAI: obj={'model': .., 'messages': [..], ...}`` (level >= 2) -- the OpenAI body;
- ``[..] Finish: obj=GenerateReqInput(..), out={..., 'meta_info': {'prompt_tokens', 'cached_tokens', ..}}``;
- with ``--log-requests-format json`` the same as JSON events after the prefix:
  ``{"timestamp", "event": "request.received" | "request.received.openai" | "request.finished", "rid", "obj", "out"}``;
- at start-up ``server_args={'model_path': .., 'served_model_name': .., ...}``.

``--log-requests-level`` decides what is there: 0 and 1 log no input at all (every request is
reported as ``no prompt``), 2 cuts strings and lists longer than 2048 to their first and last
1024 (``'head' ... 'tail'``, ``[..] ... [..]``; JSON: a ``"..."`` item) -- such a request is
reported as ``truncated`` --, 3 logs everything. A request is emitted when its Finish line arrives
(carrying ``cached_tokens``), or at the end of the log.
"""

from __future__ import annotations

import json
import re
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from prefixplan.core.types import Request
from prefixplan.logs.limits import MAX_RECORD_TOKENS, clip
from prefixplan.logs.pyrepr import Call, ListTooLong, ReprError, Truncated, parse_value
from prefixplan.logs.textlog import ANSI, Item, LogClock, Problem, SourceInfo, token_ids
from prefixplan.logs.times import timestamp_value

SGLANG_FORMAT = "sglang-log"
_LINE = re.compile(r"^\[(\d{4})-(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)((?:[.,]\d+)?)(?: [^\]]*)?\] ")
_TEXT_EVENTS = ("Receive: obj=", "Receive OpenAI: obj=", "Finish: obj=", "server_args=")
_JSON_EVENTS = frozenset({"request.received", "request.received.openai", "request.finished"})
_REQUEST_CLASSES = frozenset({"GenerateReqInput", "EmbeddingReqInput"})
_MAX_PENDING = 4096
LEVEL_HINT = "start SGLang with --log-requests --log-requests-level 3"


@dataclass
class _Pending:
    request: Request
    done: bool = False


class SGLangLogReader:
    """Reads one SGLang server log (module docstring); feed lines in order, then finish."""

    def __init__(self, source: str, detected: str, max_tokens: int = MAX_RECORD_TOKENS) -> None:
        self.source = source
        self.max_tokens = max_tokens
        self.info = SourceInfo(SGLANG_FORMAT, detected)
        self.served: str | None = None
        self.model: str | None = None  # the last OpenAI body's model
        self._pending: OrderedDict[str, _Pending] = OrderedDict()
        self._request_lines = 0

    def feed(self, line_no: int, text: str) -> Iterator[Item]:
        if "\x1b[" in text:
            text = ANSI.sub("", text)
        m = _LINE.match(text)
        if m is None:
            return
        year, month, day, hour, minute, second = (int(g) for g in m.groups()[:6])
        frac = float("0" + m.group(7).replace(",", ".")) if m.group(7) else 0.0
        stamp = LogClock.full(year, month, day, hour, minute, second, frac)
        body = text[m.end() :].rstrip("\r\n")
        if body.startswith("{"):
            yield from self._json_event(line_no, body)
            return
        for event in _TEXT_EVENTS:
            if body.startswith(event):
                break
        else:
            return
        try:
            obj, end = parse_value(body, len(event), self.max_tokens)
        except ListTooLong as exc:
            self._request_lines += 1
            yield Problem(
                line_no,
                f"too many tokens: {event.split(':')[0]}: a list of {exc.count:,} items > "
                f"max_record_tokens {exc.limit:,} (skipped)",
            )
            return
        except ReprError as exc:
            self._request_lines += 1
            yield Problem(line_no, f"bad request line: {event.split(':')[0]}: {clip(exc)}")
            return
        if event == "server_args=":
            self._startup(obj)
            return
        self._request_lines += 1
        if event == "Receive OpenAI: obj=":
            self._openai(obj)
            return
        if not isinstance(obj, Call) or obj.name not in _REQUEST_CLASSES:
            name = obj.name if isinstance(obj, Call) else type(obj).__name__
            yield Problem(
                line_no, f"unknown record: {event.split(':')[0]} obj is {clip(name, 60)}, not GenerateReqInput"
            )
            return
        fields = obj.kwargs
        if event == "Finish: obj=":
            out = None
            rest = body[end:]
            i = rest.find("out=")
            if i >= 0:
                try:
                    out, _ = parse_value(rest, i + 4, self.max_tokens)
                except ReprError:
                    out = None
            yield from self._finish(fields.get("rid"), out)
            return
        yield from self._receive(line_no, stamp, fields, obj.name)

    def finish(self) -> Iterator[Item]:
        while self._pending:
            _, pending = self._pending.popitem(last=False)
            yield pending.request
        if self._request_lines == 0:
            self.info.notes.append(f"no request lines: {LEVEL_HINT}")
        elif self.info.counts.get("no prompt") and not self.info.counts.get("requests"):
            self.info.notes.append(f"the requests were logged without their input: {LEVEL_HINT}")
        if self.info.counts.get("truncated"):
            self.info.notes.append(
                f"{self.info.counts['truncated']} request(s) had their input cut to 2048 items "
                f"(--log-requests-level 2): {LEVEL_HINT}"
            )

    # -- events ------------------------------------------------------------------------------
    def _json_event(self, line_no: int, body: str) -> Iterator[Item]:
        try:
            data = json.loads(body)
        except (ValueError, RecursionError) as exc:
            yield Problem(line_no, f"bad JSON: {clip(exc)}")
            return
        if not isinstance(data, dict):
            return
        event = data.get("event")
        if not isinstance(event, str) or not event.startswith("request."):
            return
        self._request_lines += 1
        if event not in _JSON_EVENTS:
            yield Problem(line_no, f"unknown record: event {event[:60]!r} (known: {', '.join(sorted(_JSON_EVENTS))})")
            return
        obj = data.get("obj")
        if not isinstance(obj, dict):
            yield Problem(line_no, f"missing field: {clip(event, 60)} has no obj object")
            return
        if event == "request.received.openai":
            self._openai(obj)
            return
        if event == "request.finished":
            yield from self._finish(data.get("rid", obj.get("rid")), data.get("out"))
            return
        stamp = None
        if data.get("timestamp") is not None:
            try:
                stamp = timestamp_value(data["timestamp"])
            except ValueError:
                yield Problem(line_no, f"bad timestamp: {str(data['timestamp'])[:40]!r}")
                return
        yield from self._receive(line_no, stamp, obj, "GenerateReqInput")

    def _startup(self, obj: Any) -> None:
        args = obj.kwargs if isinstance(obj, Call) else obj
        if isinstance(args, dict):
            name = args.get("served_model_name") or args.get("model_path")
            if isinstance(name, str):
                self.served = name
                self.info.notes.append(f"server: model {name}")

    def _openai(self, obj: Any) -> None:
        if isinstance(obj, dict) and isinstance(obj.get("model"), str):
            self.model = obj["model"]

    def _receive(self, line_no: int, stamp: float | None, fields: dict[str, Any], cls: str) -> Iterator[Item]:
        rid = fields.get("rid")
        rids = rid if isinstance(rid, list) else [rid]
        inputs = fields.get("input_ids")
        texts = fields.get("text")
        if inputs is None and texts is None:
            self.info.count("no prompt", len(rids))
            yield Problem(line_no, f"no prompt: request {clip(rids[0])} was logged without its input; {LEVEL_HINT}")
            return
        batch = isinstance(rid, list)
        for k, one in enumerate(rids):
            ids = _item(inputs, k, batch)
            text = _item(texts, k, batch)
            item = self._request(line_no, stamp, one, ids, text, fields, k, cls)
            if isinstance(item, Problem):
                yield item
                continue
            earlier = self._pending.pop(item.id, None)
            if earlier is not None:  # a client reused the rid: the earlier request is read, not dropped
                self.info.count("rid received again")
                yield earlier.request
            self._pending[item.id] = _Pending(item)
        self.model = None  # an OpenAI body's model names only the request received right after it
        while len(self._pending) > _MAX_PENDING:
            _, old = self._pending.popitem(last=False)
            yield old.request
        yield from self._flush()

    def _request(
        self,
        line_no: int,
        stamp: float | None,
        rid: Any,
        ids: Any,
        text: Any,
        fields: dict[str, Any],
        k: int,
        cls: str,
    ) -> Request | Problem:
        name = str(rid) if rid is not None else f"{self.source}:{line_no}#{k}"
        if _cut(ids) or (ids is None and _cut(text)):
            self.info.count("truncated")
            return Problem(
                line_no, f"truncated: request {clip(name)}: input cut to its first and last 1024 items (not counted)"
            )
        prompt_ids = None
        if ids is not None:
            if isinstance(ids, list) and len(ids) > self.max_tokens:
                return Problem(
                    line_no,
                    f"too many tokens: request {clip(name)}: {len(ids):,} input_ids > "
                    f"max_record_tokens {self.max_tokens:,} (skipped)",
                )
            prompt_ids = token_ids(ids)
            if prompt_ids is None:
                return Problem(line_no, f"wrong type: request {clip(name)} input_ids is not a list of token ids")
        elif not isinstance(text, str):
            return Problem(line_no, f"wrong type: request {clip(name)} text is not a string")
        params = fields.get("sampling_params")
        max_new = params.get("max_new_tokens") if isinstance(params, dict) else None
        lora = _scalar(fields.get("lora_path")) or _scalar(fields.get("lora_id"))
        salt = _scalar(fields.get("cache_salt")) or _scalar(fields.get("extra_key"))
        self.info.count("requests")
        return Request(
            source=self.source,
            line_no=line_no,
            id=name,
            format=SGLANG_FORMAT,
            time=stamp,
            # one server, one model: the served name is the cache namespace, whatever name a
            # client put in its OpenAI body ("default", an alias); that name only without it
            model=self.served or self.model,
            prompt=text if prompt_ids is None else None,
            prompt_ids=prompt_ids,
            input_length=len(prompt_ids) if prompt_ids is not None else None,
            output_length=max_new if isinstance(max_new, int) and not isinstance(max_new, bool) else None,
            lora=lora,
            cache_salt=salt,
            extra={"sglang_class": cls} if cls != "GenerateReqInput" else None,
        )

    def _finish(self, rid: Any, out: Any) -> Iterator[Item]:
        rids = rid if isinstance(rid, list) else [rid]
        outs = out if isinstance(out, list) else [out]
        for k, one in enumerate(rids):
            pending = self._pending.get(str(one))
            if pending is None:
                continue
            meta = outs[k].get("meta_info") if k < len(outs) and isinstance(outs[k], dict) else None
            if isinstance(meta, dict):
                cached, prompt = meta.get("cached_tokens"), meta.get("prompt_tokens")
                pending.request = replace(
                    pending.request,
                    logged_cached_tokens=cached if isinstance(cached, int) else None,
                    logged_prompt_tokens=prompt if isinstance(prompt, int) else None,
                )
            pending.done = True
        yield from self._flush()

    def _flush(self) -> Iterator[Item]:
        while self._pending:
            key, head = next(iter(self._pending.items()))
            if not head.done:
                return
            del self._pending[key]
            yield head.request


def _item(value: Any, k: int, batch: bool) -> Any:
    if not batch:
        return value
    if isinstance(value, list) and k < len(value):
        return value[k]
    return None


def _cut(value: Any) -> bool:
    if isinstance(value, Truncated):
        return True
    if isinstance(value, list):
        return any(v == "..." for v in value)  # the JSON form of a cut list
    if isinstance(value, str):  # the JSON form of a cut string: 1024 + "..." + 1024 characters
        return len(value) == 2 * 1024 + 3 and value[1024:1027] == "..."
    return False


def _scalar(value: Any) -> str | None:
    if isinstance(value, str) and value:
        return value
    return None
