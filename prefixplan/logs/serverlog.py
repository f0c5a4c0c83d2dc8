"""Read one engine server log (vLLM or SGLang): its lines go to the format's reader in order.

The reader joins the lines of each request by id and yields requests and problems; this loop
counts the lines (for the zero-requests error), applies sampling by the request's line and
reports problems with their line numbers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from prefixplan.core.types import Request
from prefixplan.logs.limits import MAX_RECORD_TOKENS, clip
from prefixplan.logs.open import CorruptInput, RawLine
from prefixplan.logs.textlog import Problem, TextLogReader

if TYPE_CHECKING:
    from prefixplan.logs.lineerrors import LineErrors


def make_reader(name: str, path: str, how: str, max_tokens: int = MAX_RECORD_TOKENS) -> TextLogReader:
    """The reader of format ``name`` (``vllm-log`` or ``sglang-log``) for one file; a request
    with more than ``max_tokens`` token ids is a malformed line."""
    from prefixplan.logs.sglang_log import SGLangLogReader
    from prefixplan.logs.vllm_log import VLLMLogReader

    if name == "vllm-log":
        return VLLMLogReader(path, how, max_tokens)
    return SGLangLogReader(path, how, max_tokens)


def read_server_log(
    path: str,
    name: str,
    how: str,
    lines: Iterator[RawLine],
    errors: LineErrors,
    keep: Callable[[int], bool],
    bad: Callable[[int, str], None],
    max_line_bytes: int,
    max_tokens: int = MAX_RECORD_TOKENS,
) -> Iterator[Request]:
    """Requests of one server log in order; problems go to ``bad(line_no, reason)``.

    Args:
        keep: whether the request (or problem) at a line survives ``--sample``.
        max_tokens: token ids a request may have (more: a malformed line, never read).
    """
    reader = make_reader(name, path, how, max_tokens)
    errors.sources[path] = reader.info

    def items() -> Iterator[Request | Problem]:
        last = 0
        try:
            for raw in lines:
                last = raw.line_no
                data = raw.data
                if data is None:
                    yield Problem(
                        raw.line_no, f"line too long: {raw.size} bytes > max_line_bytes {max_line_bytes} (skipped)"
                    )
                    continue
                if not data or data.isspace():
                    continue
                errors.saw(path, raw.line_no, data)
                try:
                    found = list(reader.feed(raw.line_no, data.decode("utf-8", "replace")))
                except (ValueError, RecursionError, KeyError, TypeError, IndexError) as exc:
                    # A line no reader rule foresaw is that line's problem, never the whole log's.
                    yield Problem(raw.line_no, f"unreadable line: {type(exc).__name__}: {clip(exc)}")
                    continue
                yield from found
        except CorruptInput as exc:
            yield Problem(last + 1, f"corrupt input: {exc}; the rest of the file is skipped")
        yield from reader.finish()

    for item in items():
        if not keep(item.line_no):
            continue
        if isinstance(item, Problem):
            bad(item.line_no, item.reason)
            continue
        errors.requests_read += 1
        yield item
