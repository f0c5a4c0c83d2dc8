"""``prefixplan analyze LOG...`` — rank the shared token prefixes of a request log."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from prefixplan.cli import common
from prefixplan.cli import options as o
from prefixplan.cli.help import PlainCommand
from prefixplan.report.terminal import report_console

if TYPE_CHECKING:
    pass


def register(app: typer.Typer) -> None:
    @app.command(cls=PlainCommand)
    def analyze(
        logs: o.Logs,
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
        top: o.Top = 20,
        min_tokens: Annotated[
            int, typer.Option("--min-tokens", metavar="N", help="Shortest prefix (block-aligned tokens) to report.")
        ] = 32,
        min_hits: Annotated[int, typer.Option("--min-hits", metavar="N", help="Fewest requests sharing a prefix.")] = 2,
        min_tenants: Annotated[
            int,
            typer.Option(
                "--min-tenants",
                metavar="N",
                help="Fewest distinct users before a prefix's text or ids are shown/stored.",
            ),
        ] = 2,
        show_user_text: Annotated[
            bool,
            typer.Option("--show-user-text", metavar="", help="Allow previews of user-authored text (off by default)."),
        ] = False,
        rag_whatif: Annotated[
            bool,
            typer.Option(
                "--rag-whatif/--no-rag-whatif", metavar="", help="Measure the documents-first layout (a second pass)."
            ),
        ] = True,
        simulate: Annotated[
            bool,
            typer.Option(
                "--simulate/--no-simulate",
                metavar="",
                help="Also replay the log: in-batch vs persistent cache, LRU capacity curve, savings.",
            ),
        ] = True,
        capacity: o.Capacity = None,
        json_out: o.Json = None,
        trace_out: o.TraceOut = None,
        workers: o.Workers = None,
        executor: o.Executor = "local",
        ray_address: o.RayAddress = None,
        html_out: o.Html = None,
        markdown_out: o.Markdown = None,
        store: o.Store = True,
        db: o.Db = None,
        emit_recipes: Annotated[
            Optional[Path],
            typer.Option(
                "--emit-recipes", metavar="DIR", help="Write the top system/tool prefixes as recipe files into DIR."
            ),
        ] = None,
        quiet: o.Quiet = False,
        old_format: Annotated[Optional[str], o.deprecated("--format", "--log-format")] = None,
        old_engine: Annotated[Optional[str], o.deprecated("--engine", "--granularity")] = None,
        old_record: Annotated[Optional[bool], o.deprecated("--record/--no-record", "--store/--no-store")] = None,
    ) -> None:
        """Render each request into exact token ids, build a token radix tree and rank shared prefixes."""
        from prefixplan.analysis.pipeline import AnalyzeOptions
        from prefixplan.api import AnalyzeOutputs, HeadlineOptions, run_analyze
        from prefixplan.errors import UsageError
        from prefixplan.report.console import render_analysis
        from prefixplan.report.console_inputs import mismatch_line, render_models

        top = 20 if top is None else top
        if top < 0:
            raise UsageError("--top must be >= 0 (0 keeps every candidate)", hint="e.g. --top 20")
        to_stdout = [
            flag
            for flag, value in (("--json", json_out), ("--html", html_out), ("--markdown", markdown_out))
            if value == "-"
        ]
        if len(to_stdout) > 1:
            raise UsageError(
                f"only one output can write to stdout, not {' and '.join(to_stdout)}",
                hint="give all but one a file name",
            )
        granularity = o.prefer(granularity, old_engine, "vllm")
        store = store if old_record is None else old_record
        source = common.source_options(
            logs,
            format=o.prefer(log_format, old_format, "auto"),
            columns=columns,
            since=since,
            until=until,
            sample=sample,
            strict=strict,
            trace_block_size=trace_block_size,
            tokenizer=tokenizer,
            tokenizer_map=tokenizer_map,
            chat_template=chat_template,
            template_kwargs=template_kwargs,
            workers=workers,
            executor=executor,
            ray_address=ray_address,
        )
        options = AnalyzeOptions(
            source=source,
            engine=granularity,
            block_size=block_size,
            top=top,
            min_tokens=min_tokens,
            min_hits=min_hits,
            min_tenants=min_tenants,
            show_user_text=show_user_text,
            rag_whatif=rag_whatif,
        )
        headline = HeadlineOptions(configured_capacity=_capacity(capacity)) if simulate else None
        outputs = AnalyzeOutputs(
            store=store,
            db=str(db) if db else None,
            json=json_out,
            html=html_out,
            markdown=markdown_out,
            emit_recipes=str(emit_recipes) if emit_recipes else None,
            trace_out=str(trace_out) if trace_out else None,
        )
        console = report_console(stderr=bool(to_stdout))  # stdout carries the one output written there
        from prefixplan.cli.progress import ConsoleProgress

        progress = ConsoleProgress(report_console(stderr=True), quiet=quiet)
        outcome = run_analyze(options, headline=headline, outputs=outputs, progress=progress)
        notes = report_console(stderr=True)
        if outcome.created_store:
            notes.print(f"created the store {outcome.created_store} (--db or PREFIXPLAN_DB put it elsewhere)")
        for what, path in outcome.written:
            if path != "-":
                notes.print(f"wrote {path} ({what})")
        record = outcome.analysis.record.to_json()
        if not quiet:
            render_analysis(record, console, top=top)
            render_models(record, console)
        elif (warning := mismatch_line(record)) is not None:
            notes.print(warning)


def _capacity(text: str | None) -> float | None:
    if text is None:
        return None
    from prefixplan.errors import UsageError
    from prefixplan.simulation.capacity import parse_capacity

    try:
        return parse_capacity(text, None)
    except UsageError as err:
        if "in bytes" not in str(err):
            raise
        raise UsageError(
            f"analyze takes --capacity in tokens (e.g. 2e6), not {text!r}: a byte size needs the model's KV size",
            hint=f"prefixplan simulate LOG --capacity {text} --model NAME (or --model-config DIR) sizes it in bytes",
        ) from None
