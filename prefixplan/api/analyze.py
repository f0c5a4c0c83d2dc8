"""``prefixplan analyze`` as one call: :class:`AnalyzeRequest` in, :class:`AnalyzeOutcome` out;
:func:`analyze` is the same for a notebook, with keyword arguments."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from prefixplan.analysis.options import Analysis, AnalyzeOptions
from prefixplan.api.source import Inputs, source_options
from prefixplan.api.source import executor as make_executor
from prefixplan.core.progress import NO_PROGRESS, Progress


@dataclass(frozen=True)
class HeadlineOptions:
    """The simulation ``analyze`` shows beside its candidates (in-batch vs persistent cache and an
    LRU capacity curve); ``configured_capacity`` (tokens) is marked and the savings refer to it."""

    capacities: tuple[float, ...] | None = None  # None: 10 per decade up to the log's footprint
    configured_capacity: float | None = None
    isolate_by: str | None = None  # user | tenant: what per-tenant cache_salt costs (simulation.isolation)


@dataclass(frozen=True)
class AnalyzeOutputs:
    """What ``analyze`` writes besides its result (all optional)."""

    store: bool = False
    db: str | None = None
    json: str | None = None
    html: str | None = None
    markdown: str | None = None
    emit_recipes: str | None = None
    trace_out: str | None = None


@dataclass
class AnalyzeOutcome:
    """:func:`run_analyze`'s result: the analysis (record named by the store when stored) and what
    was written."""

    analysis: Analysis
    written: list[tuple[str, str]] = field(default_factory=list)  # (what, path)
    analysis_id: int | None = None
    created_store: str | None = None  # the store file this run created


@dataclass(frozen=True)
class AnalyzeRequest:
    """Everything ``prefixplan analyze`` is asked: what to analyze and how (``options``: the
    source, granularity, thresholds), the simulation headline (None: none) and the outputs."""

    options: AnalyzeOptions
    headline: HeadlineOptions | None = HeadlineOptions()
    outputs: AnalyzeOutputs = AnalyzeOutputs()


def run_analyze(request: AnalyzeRequest, progress: Progress = NO_PROGRESS) -> AnalyzeOutcome:
    """The ``prefixplan analyze`` command as one call: analyze (with the simulation headline in
    the same pass), record in the store, write the JSON record, reports and recipes."""
    from dataclasses import replace

    options, headline, outputs = request.options, request.headline, request.outputs
    from prefixplan.analysis.pipeline import run_analysis

    created_store = None
    if outputs.store:  # an unusable --db fails before the analysis, not after it
        from prefixplan.store import open_store

        with open_store(outputs.db) as opened:
            created_store = str(opened.path) if opened.created else None
    sinks = []
    sim = None
    shared = False
    if headline is not None:
        from prefixplan.core.granularity import engine_granularity
        from prefixplan.simulation.headline import headline_simulation

        sim = headline_simulation(
            options.engine,
            options.granularity,
            headline.capacities,
            headline.configured_capacity,
            isolate_by=headline.isolate_by,
        )
        # the analysis's block trace is the headline's: replayed as is, not built twice
        shared = sim.can_share(engine_granularity(options.engine, options.block_size))
        if not shared:
            sinks.append(sim.add_row)
    analysis = run_analysis(options, progress, sinks=sinks, trace_out=outputs.trace_out)
    if sim is not None and shared:
        sim.use_trace(analysis.trace)
    if outputs.trace_out:
        outcome_trace = [("trace", outputs.trace_out)]
    else:
        outcome_trace = []
    if sim is not None and headline is not None:
        progress.begin("simulating the cache")
        sim.result()
        progress.end()
        section = sim.section(headline.configured_capacity, analysis.record.candidates)
        from prefixplan.simulation.waterfall import record_waterfall

        waterfall = record_waterfall(sim.trace, sim.config, sim.result(), analysis.record)
        if waterfall is not None:
            section = {**section, "waterfall": waterfall.to_json()}
        analysis.record = replace(analysis.record, simulation=section)
    outcome = AnalyzeOutcome(analysis, written=outcome_trace, created_store=created_store)
    if outputs.store:
        from prefixplan.store.register import register_analysis

        record_path = outputs.json if outputs.json not in (None, "-") else None
        analysis.record, outcome.analysis_id = register_analysis(
            analysis.record, db=outputs.db, record_path=record_path
        )
    from prefixplan.errors import OutputsFailed, UsageError

    # Each output is written on its own: one that cannot be written (a bad path, a full disk)
    # does not cost the others; the failures are reported together at the end.
    failures: list[str] = []
    if outputs.emit_recipes is not None:
        from prefixplan.keys.emit import emit_recipes

        try:
            for path in emit_recipes(analysis.record, options.source, outputs.emit_recipes, top=options.top):
                outcome.written.append(("recipe", str(path)))
        except UsageError as err:
            failures.append(str(err))
    if outputs.json:
        from prefixplan.core.fileio import atomic_write_json

        try:
            atomic_write_json(outputs.json, analysis.record.to_json())
            outcome.written.append(("analysis record", outputs.json))
        except UsageError as err:
            failures.append(str(err))
    if outputs.html or outputs.markdown:
        from prefixplan.report.files import write_reports

        try:
            written = write_reports(analysis.record, html=outputs.html, markdown=outputs.markdown, top=options.top)
            outcome.written.extend((f"{fmt} report", path) for fmt, path in written.files)
        except OutputsFailed as err:
            failures.extend(err.failures)
            outcome.written.extend((f"{fmt} report", path) for fmt, path in err.written)
    if failures:
        raise OutputsFailed(failures, outcome.written)
    return outcome


def analyze(
    inputs: Inputs,
    *,
    tokenizer: str | None = None,
    tokenizer_map: Mapping[str, str] | None = None,
    chat_template: str | os.PathLike[str] | None = None,
    template_kwargs: Mapping[str, Any] | None = None,
    log_format: str = "auto",
    since: str | float | None = None,
    until: str | float | None = None,
    sample: float | None = None,
    strict: bool = False,
    trace_block_size: int = 512,
    workers: int | None = None,
    executor: str = "local",
    ray_address: str | None = None,
    columns: str | Mapping[str, str] | None = None,
    engine: str = "vllm",
    block_size: int | None = None,
    min_tokens: int = 32,
    min_hits: int = 2,
    top: int = 20,
    min_tenants: int = 2,
    show_user_text: bool = False,
    rag_whatif: bool = True,
    simulate: bool = True,
    capacities: Sequence[float] | None = None,
    configured_capacity: float | None = None,
    isolate_by: str | None = None,
    store: bool = False,
    db: str | None = None,
) -> Analysis:
    """Find and rank the shared token prefixes of ``inputs`` (``prefixplan analyze``).

    Args:
        inputs: log paths/globs/folders, or an iterable of request records (see
            :func:`source_options` for these and the reading/tokenizer arguments).
        workers, executor, ray_address: where requests render (:func:`executor`): by default
            in this process for small inputs, else one process per core.
        engine: cache granularity preset: ``vllm`` (16-token blocks), ``sglang`` (1), ``lmcache`` (256).
        block_size: cache block size in tokens (overrides ``engine``).
        min_tokens: shortest prefix (block-aligned tokens) to report.
        min_hits: fewest requests sharing a prefix.
        top: candidates kept in the record (0 keeps all).
        min_tenants: fewest distinct users before a prefix's text or ids are shown.
        show_user_text: allow previews of user-authored text.
        rag_whatif: measure the documents-first layout (a second pass over the input).
        simulate: also replay the requests (in-batch vs persistent cache, LRU capacity curve).
        capacities: capacities (tokens) of that curve (default: 10 per decade from 1e4 up to the
            log's block footprint); ``configured_capacity`` is marked on it.
        isolate_by: ``"tenant"`` (or ``"user"``): also the hit rate with per-tenant ``cache_salt``
            (the record's ``simulation.isolation``).
        store: record the analysis (and lineage-named keys) in the SQLite store at ``db``.

    Returns:
        An :class:`~prefixplan.analysis.options.Analysis`: ``.candidates`` (ranked, with name,
        label and preview), ``.record`` (the typed record), ``.to_json()``, ``.to_pandas()``.
    """
    source = source_options(
        inputs,
        tokenizer=tokenizer,
        tokenizer_map=tokenizer_map,
        chat_template=chat_template,
        template_kwargs=template_kwargs,
        log_format=log_format,
        since=since,
        until=until,
        sample=sample,
        strict=strict,
        trace_block_size=trace_block_size,
        columns=columns,
    )
    options = AnalyzeOptions(
        source=source,
        executor=make_executor(workers, executor, ray_address),
        engine=engine,
        block_size=block_size,
        min_tokens=min_tokens,
        min_hits=min_hits,
        top=top,
        min_tenants=min_tenants,
        show_user_text=show_user_text,
        rag_whatif=rag_whatif,
    )
    caps = tuple(capacities) if capacities is not None else None
    headline = HeadlineOptions(caps, configured_capacity, isolate_by) if simulate else None
    return run_analyze(AnalyzeRequest(options, headline, AnalyzeOutputs(store=store, db=db))).analysis
