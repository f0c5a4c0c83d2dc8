"""``prefixplan trace LOG... --out FILE`` -- render once into a trace file, or export a Mooncake trace."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from prefixplan.cli import options as o
from prefixplan.cli.help import PlainCommand


def register(app: typer.Typer) -> None:
    @app.command(cls=PlainCommand)
    def trace(
        logs: o.Logs,
        out: Annotated[str, typer.Option("--out", "-o", metavar="FILE", help=o.OUT_HELP)],
        export: Annotated[
            Optional[str],
            typer.Option(
                "--export",
                metavar="FORMAT",
                help="Write another trace format instead: mooncake (JSONL, salted block ids, --block-size default 512).",
            ),
        ] = None,
        log_format: o.LogFormat = "auto",
        columns: o.Columns = None,
        since: o.Since = None,
        until: o.Until = None,
        sample: o.Sample = None,
        strict: o.Strict = False,
        trace_block_size: o.TraceBlock = 512,
        tokenizer: o.Tokenizer = None,
        tokenizer_map: o.TokenizerMap = None,
        chat_template: o.ChatTemplate = None,
        template_kwargs: o.TemplateKwargs = None,
        granularity: o.Granularity = "vllm",
        block_size: o.BlockSize = None,
        workers: o.Workers = None,
        executor: o.Executor = "local",
        ray_address: o.RayAddress = None,
        quiet: o.Quiet = False,
    ) -> None:
        """Render logs once into a trace file that analyze and simulate read without a tokenizer, or
        export them as a Mooncake trace that shares the workload without the prompts."""
        from prefixplan.api import write_trace
        from prefixplan.cli.progress import ConsoleProgress
        from prefixplan.render import parse_template_kwargs, parse_tokenizer_map
        from prefixplan.report.terminal import report_console

        notes = report_console(stderr=True)
        done = write_trace(
            logs,
            out,
            export=export,
            granularity=granularity,
            block_size=block_size,
            progress=ConsoleProgress(notes, quiet=quiet),
            log_format=log_format,
            columns=columns,
            since=since,
            until=until,
            sample=sample,
            strict=strict,
            trace_block_size=trace_block_size,
            tokenizer=tokenizer,
            tokenizer_map=parse_tokenizer_map(tokenizer_map or []),
            chat_template=chat_template,
            template_kwargs=parse_template_kwargs(template_kwargs),
            workers=workers,
            executor=executor,
            ray_address=ray_address,
        )
        what = f"{done.export} trace, {done.blocks:,} distinct blocks" if done.export else "trace"
        notes.print(f"wrote {done.path} ({what}; {done.requests:,} requests)", highlight=False)
        if done.malformed_lines:
            notes.print(f"{done.malformed_lines:,} malformed log lines skipped", highlight=False)
