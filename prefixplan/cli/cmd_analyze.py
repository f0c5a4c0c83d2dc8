"""``prefixplan analyze LOG...`` — rank the shared token prefixes of a request log."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from prefixplan.cli import common
from prefixplan.report.terminal import report_console

if TYPE_CHECKING:
    from rich.console import Console


def register(app: typer.Typer) -> None:
    @app.command(no_args_is_help=True)
    def analyze(
        logs: common.Logs,
        format: common.Format = "auto",
        since: common.Since = None,
        until: common.Until = None,
        sample: common.Sample = None,
        strict: common.Strict = False,
        trace_block_size: common.TraceBlock = 512,
        tokenizer: common.Tokenizer = None,
        tokenizer_map: common.TokenizerMap = None,
        chat_template: common.ChatTemplate = None,
        template_kwargs: common.TemplateKwargs = None,
        engine: common.Engine = "vllm",
        block_size: common.BlockSize = None,
        top: Annotated[int, typer.Option("--top", help="Candidates to show and record.")] = 20,
        min_tokens: Annotated[
            int, typer.Option("--min-tokens", help="Shortest prefix (aligned tokens) to report.")
        ] = 32,
        min_hits: Annotated[int, typer.Option("--min-hits", help="Fewest requests sharing a prefix.")] = 2,
        min_tenants: Annotated[
            int,
            typer.Option("--min-tenants", help="Fewest distinct users before a prefix's text or ids are shown/stored."),
        ] = 2,
        show_user_text: Annotated[
            bool, typer.Option("--show-user-text", help="Allow previews of user-authored text (off by default).")
        ] = False,
        rag_whatif: Annotated[
            bool,
            typer.Option("--rag-whatif/--no-rag-whatif", help="Measure the documents-first layout (a second pass)."),
        ] = True,
        simulate: Annotated[
            bool,
            typer.Option(
                "--simulate/--no-simulate",
                help="Also replay the log: in-batch vs persistent cache, LRU capacity curve, savings.",
            ),
        ] = True,
        capacity: Annotated[
            Optional[str],
            typer.Option(
                "--capacity",
                help="Your KV cache capacity in tokens (e.g. 2e6): marked on the curve; savings refer to it.",
            ),
        ] = None,
        json_out: Annotated[
            Optional[str], typer.Option("--json", help="Write the analysis record (JSON) to FILE, or - for stdout.")
        ] = None,
        html_out: Annotated[
            Optional[str], typer.Option("--html", help="Write a self-contained HTML report to FILE.")
        ] = None,
        markdown_out: Annotated[
            Optional[str], typer.Option("--markdown", help="Write a Markdown report (PR comments) to FILE.")
        ] = None,
        record: Annotated[
            bool, typer.Option("--record/--no-record", help="Record the run in the SQLite store.")
        ] = True,
        db: Annotated[
            Optional[Path], typer.Option("--db", help="Store path (default $PREFIXPLAN_DB or ./prefixplan.db).")
        ] = None,
        emit_recipes: Annotated[
            Optional[Path],
            typer.Option("--emit-recipes", help="Write the top system/tool prefixes as recipe files into DIR."),
        ] = None,
        quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No console report.")] = False,
    ) -> None:
        """Render each request into exact token ids, build a token radix tree and rank shared prefixes."""
        from prefixplan.analysis.pipeline import AnalyzeOptions
        from prefixplan.api import AnalyzeOutputs, HeadlineOptions, run_analyze
        from prefixplan.errors import UsageError
        from prefixplan.report.console import render_analysis

        if top < 0:
            raise UsageError("--top must be >= 0 (0 keeps every candidate)")
        source = common.source_options(
            logs,
            format=format,
            since=since,
            until=until,
            sample=sample,
            strict=strict,
            trace_block_size=trace_block_size,
            tokenizer=tokenizer,
            tokenizer_map=tokenizer_map,
            chat_template=chat_template,
            template_kwargs=template_kwargs,
        )
        options = AnalyzeOptions(
            source=source,
            engine=engine,
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
            store=record,
            db=str(db) if db else None,
            json=json_out,
            html=html_out,
            markdown=markdown_out,
            emit_recipes=str(emit_recipes) if emit_recipes else None,
        )
        console = report_console(stderr=json_out == "-")
        with common_progress(console, quiet or not console.is_terminal) as progress:
            outcome = run_analyze(options, headline=headline, outputs=outputs, progress=progress)
        for what, path in outcome.written:
            if what == "recipe":
                console.print(f"wrote recipe {path}")
        if not quiet:
            render_analysis(outcome.analysis.record.to_json(), console, top=top)


def _capacity(text: str | None) -> float | None:
    if text is None:
        return None
    from prefixplan.simulation.capacity import parse_capacity

    return parse_capacity(text, None)


class common_progress:
    """A transient rich progress line counting requests (disabled when not a terminal)."""

    def __init__(self, console: Console, disabled: bool) -> None:
        self.console = console
        self.disabled = disabled
        self._progress: Any = None

    def __enter__(self) -> Callable[[int], None] | None:
        if self.disabled:
            return None
        from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        progress = Progress(
            SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=self.console, transient=True
        )
        progress.start()
        task = progress.add_task("reading and rendering", total=None)
        self._progress = progress

        def update(n: int) -> None:
            progress.update(task, description=f"rendered {n:,} requests")

        return update

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()
