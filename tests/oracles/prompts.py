"""The prompts of a source, token ids included, in input order: the reference the tests hold the
trace rows and the analysis to (production renders through :func:`prefixplan.trace.workers.iter_rendered`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prefixplan.core.types import Prompt, Request
from prefixplan.logs import LineErrors, ReadMeter
from prefixplan.logs.noinput import no_requests_error
from prefixplan.render import RenderSet
from prefixplan.render.stream import RenderFailure, SourceOptions, iter_source_requests


def iter_prompts(
    source: SourceOptions,
    errors: LineErrors,
    renderers: RenderSet | None = None,
    *,
    transform: Callable[[Request], Request] | None = None,
    failures: list[RenderFailure] | None = None,
    meter: ReadMeter | None = None,
) -> Iterator[Prompt]:
    """Read and render ``source`` in order (the module docstring).

    Args:
        source: inputs and tokenizer options.
        errors: receives malformed lines and render failures.
        renderers: reuse loaded renderers (default: ``source.renderers()``).
        transform: rewrite each request before rendering (e.g. the documents-first what-if).
        failures: receives each rejected request.
        meter: follows how many bytes of the input were read (progress bars).
    """
    renderers = renderers or source.renderers()
    requests: Iterator[Request] = iter_source_requests(source, errors, meter)
    if transform is not None:
        requests = (transform(r) for r in requests)

    def on_error(req: Request, exc: Exception) -> None:
        if source.read.strict:
            raise exc
        errors.add(req.source, req.line_no, "render: " + str(exc).replace(f"{req.source}:{req.line_no}: ", ""))
        if failures is not None:
            failures.append(RenderFailure(req.source, req.line_no, str(exc)))

    yield from renderers.render_stream(requests, batch=source.render_batch, on_error=on_error)
    if errors.requests_read == 0 and (errors.lines_read > 0 or errors.count > 0):
        raise no_requests_error(errors, source.display)
