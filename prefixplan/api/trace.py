"""``prefixplan trace`` as one call: render once into a trace file, or export a Mooncake trace."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from prefixplan.api.source import Inputs, executor, source_options
from prefixplan.core.progress import NO_PROGRESS, Progress
from prefixplan.trace.executors import Executor

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
    executor: Executor = field(default_factory=Executor)


def write_trace(
    inputs: Inputs,
    out: str | os.PathLike[str],
    *,
    export: str | None = None,
    granularity: str = "vllm",
    block_size: int | None = None,
    salt: bytes | None = None,
    progress: Progress = NO_PROGRESS,
    workers: int | None = None,
    **source: Any,
) -> TraceOutcome:
    """Render ``inputs`` once into a trace file (``prefixplan trace``), or export them
    (:class:`TraceRequest`). ``inputs`` may be a trace file (no tokenizer then); ``source``
    takes :func:`source_options`' keywords, ``workers`` is :func:`executor`'s."""
    request = TraceRequest(
        source_options(inputs, **source), os.fspath(out), export, granularity, block_size, salt, executor(workers)
    )
    return run_trace(request, progress)


def run_trace(request: TraceRequest, progress: Progress = NO_PROGRESS) -> TraceOutcome:
    """The ``prefixplan trace`` command as one call (:class:`TraceRequest`)."""
    from prefixplan.core.granularity import engine_granularity
    from prefixplan.errors import UsageError
    from prefixplan.logs.remote import is_url
    from prefixplan.trace.executors import session
    from prefixplan.trace.intake import Intake, IntakePlan

    out, export, block_size = request.out, request.export, request.block_size
    if export not in (None, "mooncake"):
        raise UsageError(f"unknown export format {export!r}", hint="use --export mooncake")
    if export is not None and is_url(os.fspath(out)):
        raise UsageError("a Mooncake export is written to a local file", hint="give a path, then copy it where it goes")
    gran = engine_granularity(request.granularity, block_size if export is None else None)
    plan = IntakePlan(
        request.source,
        request.executor,
        gran.block_size,
        describe=gran.describe(),
        routing=export is None,
        trace_out=out if export is None else None,
        accept_trace=export is not None,
    )
    with session(), Intake(plan, progress) as intake:
        if export == "mooncake":
            from prefixplan.trace.export import DEFAULT_BLOCK, export_mooncake

            done = export_mooncake(intake.rows(), out, block_size=block_size or DEFAULT_BLOCK, salt=request.salt)
            return TraceOutcome(
                str(done.path), done.requests, intake.errors.count, export="mooncake", blocks=done.blocks
            )
        for _ in intake.rows():  # the intake writes each row
            pass
        assert intake.writer is not None
        target = intake.writer.target
    return TraceOutcome(target, intake.requests, intake.errors.count)


@dataclass(frozen=True)
class TraceOutcome:
    """What :func:`write_trace` wrote."""

    path: str
    requests: int
    malformed_lines: int
    export: str | None = None
    blocks: int | None = None
