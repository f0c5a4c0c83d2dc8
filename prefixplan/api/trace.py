"""``prefixplan trace`` as one call: render once into a trace file, or export a Mooncake trace."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from prefixplan.api.source import Inputs, source_options
from prefixplan.core.progress import NO_PROGRESS, Progress

if TYPE_CHECKING:
    from prefixplan.render.stream import SourceOptions


@dataclass(frozen=True)
class TraceRequest:
    """Everything ``prefixplan trace`` is asked: the source, where to write, and the format:
    a trace file at the ``granularity`` preset's (or ``block_size``) blocks, or with
    ``export="mooncake"`` a Mooncake JSONL trace with per-export salted block ids at
    ``block_size`` tokens (default 512; ``salt`` fixes the salt, else a fresh one)."""

    source: SourceOptions
    out: str
    export: str | None = None
    granularity: str = "vllm"
    block_size: int | None = None
    salt: bytes | None = None


def write_trace(
    inputs: Inputs,
    out: str | os.PathLike[str],
    *,
    export: str | None = None,
    granularity: str = "vllm",
    block_size: int | None = None,
    salt: bytes | None = None,
    progress: Progress = NO_PROGRESS,
    **source: Any,
) -> TraceOutcome:
    """Render ``inputs`` once into a trace file (``prefixplan trace``), or export them
    (:class:`TraceRequest`). ``inputs`` may be a trace file (no tokenizer then)."""
    request = TraceRequest(source_options(inputs, **source), os.fspath(out), export, granularity, block_size, salt)
    return run_trace(request, progress)


def run_trace(request: TraceRequest, progress: Progress = NO_PROGRESS) -> TraceOutcome:
    """The ``prefixplan trace`` command as one call (:class:`TraceRequest`)."""
    from prefixplan.core.granularity import engine_granularity
    from prefixplan.errors import UsageError
    from prefixplan.logs import LineErrors
    from prefixplan.render.stream import source_meter
    from prefixplan.trace.meta import line_errors_json, line_errors_of, renderers_json
    from prefixplan.trace.parquet import trace_input
    from prefixplan.trace.workers import iter_rendered
    from prefixplan.trace.writer import TraceWriter, base_meta

    out, export, granularity, block_size, salt = (
        request.out,
        request.export,
        request.granularity,
        request.block_size,
        request.salt,
    )
    if export not in (None, "mooncake"):
        raise UsageError(f"unknown export format {export!r}", hint="use --export mooncake")
    from prefixplan.logs.remote import is_url

    if export is not None and is_url(os.fspath(out)):
        raise UsageError("a Mooncake export is written to a local file", hint="give a path, then copy it where it goes")
    src = request.source
    trace_in = trace_input(src)
    gran = engine_granularity(granularity, block_size if export is None else None)
    errors = LineErrors()
    renderers = None

    def rows() -> Any:
        nonlocal errors, renderers
        if trace_in is not None:
            errors = line_errors_of(trace_in.meta.get("line_errors"))
            yield from trace_in.rows()
            return
        renderers = src.renderers()
        meter = source_meter(src)
        progress.begin("reading and rendering", meter.total_bytes if meter is not None else None)
        n = tokens = 0
        for n, one in enumerate(
            iter_rendered(src, errors, renderers, block_size=gran.block_size, routing=export is None, meter=meter),
            start=1,
        ):
            tokens += one.row.prompt_tokens
            if n % 256 == 1:
                progress.update(n, tokens, meter.done() if meter is not None else None)
            yield one.row
        progress.update(n, tokens, meter.done() if meter is not None else None)
        progress.end()

    if export == "mooncake":
        from prefixplan.trace.export import DEFAULT_BLOCK, export_mooncake

        done = export_mooncake(rows(), out, block_size=block_size or DEFAULT_BLOCK, salt=salt)
        return TraceOutcome(str(done.path), done.requests, errors.count, export="mooncake", blocks=done.blocks)
    if trace_in is not None:
        raise UsageError("the input is a trace already", hint="pass the log to write a trace from it")
    with TraceWriter(out, base_meta(gran.block_size, {"describe": gran.describe()})) as writer:
        for row in rows():
            writer.write(row)
        writer.meta.update(
            inputs={"paths": list(src.display)},
            line_errors=line_errors_json(errors),
            tokenizers=renderers_json(renderers) if renderers is not None else [],
        )
    return TraceOutcome(writer.target, writer.count, errors.count)


@dataclass(frozen=True)
class TraceOutcome:
    """What :func:`write_trace` wrote."""

    path: str
    requests: int
    malformed_lines: int
    export: str | None = None
    blocks: int | None = None
