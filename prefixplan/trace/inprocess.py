"""Rendering in the calling process: requests in, :class:`Rendered` rows out, in input order.

The one renderer every executor ends in (a worker process or a Ray actor runs it on its shard; with
one worker it runs here), with what happens to a request the tokenizer rejects. A pass that knows
a request's row from an earlier pass (the documents-first what-if, for the requests it leaves as
they are) hands it over as :class:`Unrendered`: its row is a reference
(:meth:`~prefixplan.trace.rows.RowMaker.reference`), made without the tokenizer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prefixplan.core.types import Prompt, Request, Segment
from prefixplan.errors import PrefixplanError, TokenizerError
from prefixplan.logs import LineErrors
from prefixplan.render import RenderSet
from prefixplan.render.stream import RenderFailure, SourceOptions
from prefixplan.trace.rows import RowMaker, TraceRow


@dataclass(frozen=True, slots=True)
class Unrendered:
    """A request not to render: an earlier pass rendered it as it is, and its row there is found
    by its source and line (:data:`~prefixplan.trace.rows.REFERENCE_UNITS`)."""

    request: Request


@dataclass(frozen=True, slots=True)
class Rendered:
    """One rendered request: its row, and the request itself for text-level analysis (None when
    a worker kept the text: :mod:`prefixplan.trace.shards`) with its segments when rendered in
    this process (else :func:`row_segments` rebuilds them from the row)."""

    request: Request | None
    row: TraceRow
    segments: tuple[Segment, ...] | None = None


def failure_handler(
    source: SourceOptions, errors: LineErrors, failures: list[RenderFailure] | None
) -> Callable[[Request, str], None]:
    """What to do with a request the renderer rejects: raise (strict), else count it with the
    malformed lines and list it in ``failures``."""

    def failed(req: Request, reason: str) -> None:
        if source.read.strict:
            raise TokenizerError(reason)
        errors.add(req.source, req.line_no, "render: " + reason.replace(f"{req.source}:{req.line_no}: ", ""))
        if failures is not None:
            failures.append(RenderFailure(req.source, req.line_no, reason))

    return failed


def render_in_process(
    requests: Iterator[Request | Unrendered],
    renderers: RenderSet,
    maker: RowMaker,
    batch_size: int,
    failed: Callable[[Request, str], None],
) -> Iterator[Rendered]:
    """Render ``requests`` here in batches of ``batch_size`` (an :class:`Unrendered` one becomes
    a reference row in its place). A reading error (strict mode) is raised after the requests
    read before it are rendered, so that the first bad line in input order is the one reported,
    whether it failed to parse or to render."""
    index = 0
    pending: list[Request | Unrendered] = []

    def flush() -> Iterator[Rendered]:
        nonlocal index
        todo = [r for r in pending if not isinstance(r, Unrendered)]
        results = iter(renderers.render_batch(todo) if todo else ())
        for req in pending:
            if isinstance(req, Unrendered):
                yield Rendered(None, maker.reference(req.request, index))
                index += 1
                continue
            result = next(results)
            if isinstance(result, Prompt):
                yield Rendered(req, maker.row(result, index), result.segments)
                index += 1
            else:
                failed(req, str(result))
        pending.clear()

    it = iter(requests)
    while True:
        try:
            req = next(it)
        except StopIteration:
            break
        except PrefixplanError:
            yield from flush()
            raise
        pending.append(req)
        if len(pending) >= batch_size:
            yield from flush()
    yield from flush()
