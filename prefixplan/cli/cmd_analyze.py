"""``prefixplan analyze LOG...`` — rank the shared token prefixes of a request log."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from prefixplan.cli import options as o
from prefixplan.cli.groups import with_source
from prefixplan.cli.help import PlainCommand

if TYPE_CHECKING:
    from prefixplan.api import Executor
    from prefixplan.render.stream import SourceOptions

MinTokens = Annotated[
    int, typer.Option("--min-tokens", metavar="N", help="Shortest prefix (block-aligned tokens) to report.")
]
MinHits = Annotated[int, typer.Option("--min-hits", metavar="N", help="Fewest requests sharing a prefix.")]
MinTenants = Annotated[
    int,
    typer.Option(
        "--min-tenants", metavar="N", help="Fewest distinct users before a prefix's text or ids are shown/stored."
    ),
]
ShowUserText = Annotated[
    bool, typer.Option("--show-user-text", metavar="", help="Allow previews of user-authored text (off by default).")
]
RagWhatif = Annotated[
    bool,
    typer.Option(
        "--rag-whatif/--no-rag-whatif", metavar="", help="Measure the documents-first layout (a second pass)."
    ),
]
SimulateToo = Annotated[
    bool,
    typer.Option(
        "--simulate/--no-simulate",
        metavar="",
        help="Also replay the log: in-batch vs persistent cache, LRU capacity curve, savings.",
    ),
]
EmitRecipes = Annotated[
    Optional[Path],
    typer.Option("--emit-recipes", metavar="DIR", help="Write the top system/tool prefixes as recipe files into DIR."),
]


def register(app: typer.Typer) -> None:
    app.command("analyze", cls=PlainCommand)(analyze)


@with_source(execution_after="trace_out")
def analyze(
    logs: o.Logs,
    source: SourceOptions,
    executor: Executor,
    granularity: o.Granularity = "vllm",
    block_size: o.BlockSize = None,
    top: o.Top = 20,
    min_tokens: MinTokens = 32,
    min_hits: MinHits = 2,
    min_tenants: MinTenants = 2,
    show_user_text: ShowUserText = False,
    rag_whatif: RagWhatif = True,
    simulate: SimulateToo = True,
    capacity: o.Capacity = None,
    isolate_by: o.IsolateBy = None,
    json_out: o.Json = None,
    trace_out: o.TraceOut = None,
    html_out: o.Html = None,
    markdown_out: o.Markdown = None,
    store: o.Store = True,
    db: o.Db = None,
    emit_recipes: EmitRecipes = None,
    quiet: o.Quiet = False,
) -> None:
    """Render each request into exact token ids, build a token radix tree and rank shared prefixes."""
    from prefixplan.api import AnalyzeOptions, AnalyzeOutputs, AnalyzeRequest, HeadlineOptions, run_analyze
    from prefixplan.cli.output import one_stdout
    from prefixplan.cli.progress import ConsoleProgress
    from prefixplan.report.console import render_analysis
    from prefixplan.report.console_inputs import mismatch_line, render_models
    from prefixplan.report.terminal import report_console
    from prefixplan.simulation.capacity import headline_capacity

    top = 20 if top is None else top
    to_stdout = one_stdout(("--json", json_out), ("--html", html_out), ("--markdown", markdown_out))
    options = AnalyzeOptions(
        source=source,
        executor=executor,
        engine=granularity,
        block_size=block_size,
        top=top,
        min_tokens=min_tokens,
        min_hits=min_hits,
        min_tenants=min_tenants,
        show_user_text=show_user_text,
        rag_whatif=rag_whatif,
    )
    headline = (
        HeadlineOptions(configured_capacity=headline_capacity(capacity), isolate_by=isolate_by) if simulate else None
    )
    outputs = AnalyzeOutputs(
        store=store,
        db=str(db) if db else None,
        json=json_out,
        html=html_out,
        markdown=markdown_out,
        emit_recipes=str(emit_recipes) if emit_recipes else None,
        trace_out=str(trace_out) if trace_out else None,
    )
    notes = report_console(stderr=True)
    outcome = run_analyze(AnalyzeRequest(options, headline, outputs), ConsoleProgress(notes, quiet=quiet))
    if outcome.created_store:
        notes.print(f"created the store {outcome.created_store} (--db or PREFIXPLAN_DB put it elsewhere)")
    for what, path in outcome.written:
        if path != "-":
            notes.print(f"wrote {path} ({what})")
    record = outcome.analysis.record.to_json()
    if not quiet:
        console = report_console(stderr=to_stdout)  # stdout carries the one output written there
        render_analysis(record, console, top=top)
        render_models(record, console)
    elif (warning := mismatch_line(record)) is not None:
        notes.print(warning)
