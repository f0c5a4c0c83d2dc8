"""``prefixplan trace LOG... --out FILE`` -- render once into a trace file, or export a Mooncake trace."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Optional

import typer

from prefixplan.cli import options as o
from prefixplan.cli.groups import with_source
from prefixplan.cli.help import PlainCommand

if TYPE_CHECKING:
    from prefixplan.api import Executor
    from prefixplan.render.stream import SourceOptions

Out = Annotated[str, typer.Option("--out", "-o", metavar="FILE", help=o.OUT_HELP)]
Export = Annotated[
    Optional[str],
    typer.Option(
        "--export",
        metavar="FORMAT",
        help="Write another trace format instead: mooncake (JSONL, salted block ids, --block-size default 512).",
    ),
]


def register(app: typer.Typer) -> None:
    app.command("trace", cls=PlainCommand)(trace)


@with_source(reading_after="export", execution_after="block_size")
def trace(
    logs: o.Logs,
    out: Out,
    source: SourceOptions,
    executor: Executor,
    export: Export = None,
    granularity: o.Granularity = "vllm",
    block_size: o.BlockSize = None,
    quiet: o.Quiet = False,
) -> None:
    """Render logs once into a trace file that analyze and simulate read without a tokenizer, or
    export them as a Mooncake trace that shares the workload without the prompts."""
    from prefixplan.api import TraceRequest, run_trace
    from prefixplan.cli.progress import ConsoleProgress
    from prefixplan.report.terminal import report_console

    notes = report_console(stderr=True)
    request = TraceRequest(
        source, out, export=export, granularity=granularity, block_size=block_size, executor=executor
    )
    done = run_trace(request, ConsoleProgress(notes, quiet=quiet))
    what = f"{done.export} trace, {done.blocks:,} distinct blocks" if done.export else "trace"
    notes.print(f"wrote {done.path} ({what}; {done.requests:,} requests)", highlight=False)
    if done.malformed_lines:
        notes.print(f"{done.malformed_lines:,} malformed log lines skipped", highlight=False)
