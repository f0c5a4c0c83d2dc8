"""The public Python API: the library half of "CLI plus library".

Every function here is what a ``prefixplan`` command calls, with keyword arguments instead of
flags, so a notebook or a service gets the same results as the command line::

    import prefixplan

    analysis = prefixplan.analyze("logs/*.jsonl.gz", tokenizer="hf:/models/qwen3")
    analysis.candidates[0].label, analysis.candidates[0].preview
    analysis.to_pandas()                      # one row per candidate (needs pandas)

    requests = [{"model": "m", "messages": [...], "tools": [...]}, ...]
    prefixplan.analyze(requests)              # the same analysis, from memory

    result = prefixplan.simulation("logs/*.jsonl.gz", capacity="1e6,1e7", policy="lru,lfu")
    result.hit_rate("lru", 1e6)

Inputs are paths (files, globs, folders), or an iterable of log records (dicts in any log
format prefixplan reads, e.g. OpenAI chat requests). Errors are :mod:`prefixplan.errors`
exceptions, the same the command line turns into messages and exit codes.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prefixplan.analysis.pipeline import Analysis, AnalyzeOptions
from prefixplan.analysis.record import AnalysisRecord
from prefixplan.core.extras import require
from prefixplan.core.progress import NO_PROGRESS, Progress
from prefixplan.logs import ReadOptions, parse_time
from prefixplan.logs.tables import parse_columns
from prefixplan.render.stream import SourceOptions

if TYPE_CHECKING:
    from prefixplan.gate.findings import CheckResult, LockResult
    from prefixplan.simulation.config import SimConfig
    from prefixplan.simulation.result import SimResult
    from prefixplan.warming.service import WarmOutcome

Inputs = str | os.PathLike[str] | Sequence[str | os.PathLike[str]] | Iterable[Mapping[str, Any]]


def source_options(
    inputs: Inputs | None = None,
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
    columns: str | Mapping[str, str] | None = None,
    executor: str = "local",
    ray_address: str | None = None,
) -> SourceOptions:
    """Where requests come from and how they are tokenized (shared by analyze and simulate).

    Args:
        inputs: a path, glob or folder; several of them; or an iterable of log records (dicts
            such as OpenAI chat requests ``{"model", "messages", "tools"}``). Paths may be URLs:
            ``s3://``, ``gs://``, ``az://``, ``https://`` (needs ``prefixplan[s3]``, ``[gcs]``,
            ``[azure]`` or ``[http]``; credentials from the cloud's usual environment).
        tokenizer: ``hf:PATH``, ``mistral:nemo`` (default), ``tiktoken:NAME`` or ``vllm:URL``.
        tokenizer_map: ``{model: spec}`` for logs that mix models.
        chat_template: a Jinja chat template file overriding an ``hf:`` tokenizer's.
        template_kwargs: extra chat-template variables (e.g. ``{"date_string": "26 Jul 2024"}``).
        log_format: ``auto`` or one log format (``openai-chat``, ``anthropic``, ``mooncake``, ...).
        since, until: keep requests in this time window (ISO-8601 or epoch seconds).
        sample: keep this deterministic fraction of lines.
        strict: raise on the first malformed line instead of counting it.
        trace_block_size: tokens per block of Mooncake ``hash_ids`` traces.
        workers: render in this many processes (None: one per core for inputs of 4 MiB and more).
        columns: the column of each request field in Parquet and CSV logs, e.g.
            ``{"messages": "request.messages", "timestamp": "ts"}`` or ``"messages=request.messages,timestamp=ts"``.
        executor: ``"local"`` (processes here) or ``"ray"`` (one actor per input file on a Ray
            cluster; needs ``prefixplan[ray]``; ``workers`` then sizes the actor pool, default one
            per cluster CPU). The record is the same either way.
        ray_address: the Ray cluster to join (``auto``, ``ray://HOST:10001``; default
            ``RAY_ADDRESS``, else a new local cluster).
    """
    from prefixplan.errors import UsageError

    if sample is not None and not 0 < sample <= 1:
        raise UsageError("--sample must be in (0, 1]", hint="e.g. --sample 0.1 keeps one line in ten")
    if workers is not None and workers < 1:
        raise UsageError("--workers must be >= 1", hint="omit it for one worker per core")
    read = ReadOptions(
        format=log_format,
        since=_time(since),
        until=_time(until),
        sample=sample,
        strict=strict,
        trace_block_size=trace_block_size,
        columns=parse_columns(columns),
    )
    paths: tuple[str, ...] = ()
    objects: list[Any] | None = None
    if isinstance(inputs, (str, os.PathLike)):
        paths = (os.fspath(inputs),)
    elif inputs is not None:
        items = list(inputs)
        if items and all(isinstance(i, (str, os.PathLike)) for i in items):
            paths = tuple(os.fspath(i) for i in items)  # type: ignore[arg-type]
        else:
            objects = items
    if not paths and objects is None:
        raise UsageError("no input: pass log paths or an iterable of request records")
    return SourceOptions(
        paths=paths,
        objects=objects,
        read=read,
        tokenizer=tokenizer,
        tokenizer_map=dict(tokenizer_map or {}),
        chat_template=os.fspath(chat_template) if chat_template is not None else None,
        template_kwargs=dict(template_kwargs or {}),
        workers=workers,
        executor=executor,
        ray_address=ray_address,
    )


def _time(value: str | float | None) -> float | None:
    if value is None:
        return None
    return float(value) if isinstance(value, (int, float)) else parse_time(value)


@dataclass(frozen=True)
class HeadlineOptions:
    """The simulation ``analyze`` shows beside its candidates (in-batch vs persistent cache and an
    LRU capacity curve); ``configured_capacity`` (tokens) is marked and the savings refer to it."""

    capacities: tuple[float, ...] | None = None  # None: 10 per decade up to the log's footprint
    configured_capacity: float | None = None


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


def run_analyze(
    options: AnalyzeOptions,
    *,
    headline: HeadlineOptions | None = HeadlineOptions(),
    outputs: AnalyzeOutputs = AnalyzeOutputs(),
    progress: Progress = NO_PROGRESS,
) -> AnalyzeOutcome:
    """The ``prefixplan analyze`` command as one call: analyze (with the simulation headline in
    the same pass), record in the store, write the JSON record, reports and recipes."""
    from dataclasses import replace

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
            options.engine, options.granularity, headline.capacities, headline.configured_capacity
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
    store: bool = False,
    db: str | None = None,
) -> Analysis:
    """Find and rank the shared token prefixes of ``inputs`` (``prefixplan analyze``).

    Args:
        inputs: log paths/globs/folders, or an iterable of request records (see
            :func:`source_options` for these and the reading/tokenizer arguments).
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
        store: record the analysis (and lineage-named keys) in the SQLite store at ``db``.

    Returns:
        An :class:`~prefixplan.analysis.pipeline.Analysis`: ``.candidates`` (ranked, with name,
        label and preview), ``.record`` (the typed record), ``.to_json()``, ``.to_pandas()``.
    """
    from prefixplan.errors import UsageError

    if top < 0:
        raise UsageError("top must be >= 0 (0 keeps every candidate)")
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
        workers=workers,
        columns=columns,
    )
    options = AnalyzeOptions(
        source=source,
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
    headline = HeadlineOptions(caps, configured_capacity) if simulate else None
    return run_analyze(options, headline=headline, outputs=AnalyzeOutputs(store=store, db=db)).analysis


@dataclass(frozen=True)
class Simulation:
    """:func:`simulate`'s result: the typed result, the line errors, and convenience views."""

    result: SimResult
    malformed_lines: int = 0

    def to_json(self) -> dict[str, Any]:
        """The JSON document ``prefixplan simulate --json`` writes."""
        from prefixplan.simulation.result import to_json

        doc = to_json(self.result)
        doc["line_errors"] = self.malformed_lines
        return doc

    def hit_rate(self, policy: str, capacity_tokens: float | None = None) -> float:
        """Token hit rate of ``policy`` at ``capacity_tokens`` (None: the unbounded cache)."""
        for run in self.result.runs:
            if capacity_tokens is None and run.policy == "infinite":
                return run.hit_rate_tokens
            if run.policy == policy and run.capacity_tokens == capacity_tokens:
                return run.hit_rate_tokens
        raise KeyError(f"no run for policy {policy!r} at capacity {capacity_tokens!r}")

    def to_pandas(self) -> Any:
        """One row per cache model run (needs pandas: ``pip install "prefixplan[pandas]"``)."""
        pd = require("pandas", "pandas")
        rows = [{k: v for k, v in run.items() if k != "cached_tokens_per_request"} for run in self.to_json()["runs"]]
        return pd.DataFrame(rows)


def simulate(
    inputs: Inputs,
    config: SimConfig | None = None,
    *,
    pins_from: str | os.PathLike[str] | None = None,
    pin_top: int = 10,
    **source: Any,
) -> Simulation:
    """Replay ``inputs`` through cache models (``prefixplan simulate``).

    Args:
        inputs: as for :func:`analyze`; ``source`` takes :func:`source_options`' keywords.
        config: what to simulate (:class:`prefixplan.simulation.SimConfig`); default: vLLM blocks,
            in-batch vs an unbounded persistent cache. :func:`simulation_config` builds one from
            command-line style values (``capacity="1e6,40GB"``, ``policy="lru,lfu"``).
        pins_from: an analysis record whose top ``pin_top`` candidates are pinned.
    """
    from prefixplan.simulation.config import SimConfig
    from prefixplan.simulation.source import simulate_source

    result, errors = simulate_source(
        source_options(inputs, **source),
        config or SimConfig(),
        pins_from=os.fspath(pins_from) if pins_from is not None else None,
        pin_top=pin_top,
    )
    return Simulation(result, errors.count)


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
    """Render ``inputs`` once into a trace file (``prefixplan trace``), or export them: with
    ``export="mooncake"``, a Mooncake JSONL trace with per-export salted block ids at
    ``block_size`` tokens (default 512). ``inputs`` may be a trace file (no tokenizer then)."""
    from prefixplan.core.granularity import engine_granularity
    from prefixplan.errors import UsageError
    from prefixplan.logs import LineErrors
    from prefixplan.render.stream import source_meter
    from prefixplan.trace.meta import line_errors_json, line_errors_of, renderers_json
    from prefixplan.trace.parquet import TraceWriter, base_meta, trace_input
    from prefixplan.trace.workers import iter_rendered

    if export not in (None, "mooncake"):
        raise UsageError(f"unknown export format {export!r}", hint="use --export mooncake")
    from prefixplan.logs.remote import is_url

    if export is not None and is_url(os.fspath(out)):
        raise UsageError("a Mooncake export is written to a local file", hint="give a path, then copy it where it goes")
    src = source_options(inputs, **source)
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


def simulation_config(*, profile: str | None = None, db: str | None = None, **options: Any) -> SimConfig:
    """A :class:`~prefixplan.simulation.SimConfig` from ``prefixplan simulate``'s option values
    (:func:`prefixplan.simulation.options.build_config`); ``profile`` may name a built-in, a YAML
    file or a profile stored by ``calibrate``."""
    from prefixplan.simulation.options import build_config
    from prefixplan.store import resolve_profile

    return build_config(profile=resolve_profile(profile, db) if profile else None, **options)


def lock(
    recipes: str | os.PathLike[str] = "recipes",
    lock_path: str | os.PathLike[str] = "prefixplan.lock",
    *,
    db: str | None = None,
    store: bool = True,
) -> LockResult:
    """Write ``prefixplan.lock`` from the recipes and register each ``name@vN`` (``prefixplan lock``)."""
    from prefixplan.gate.lock import lock_recipes

    if not store:
        return lock_recipes(recipes, lock_path)
    from prefixplan.store import open_store

    with open_store(db) as opened:
        return lock_recipes(recipes, lock_path, store=opened)


def check(
    recipes: str | os.PathLike[str] = "recipes",
    lock_path: str | os.PathLike[str] = "prefixplan.lock",
    *,
    base_ref: str | None = None,
    fail_on: str = "error",
    lint: bool = True,
) -> CheckResult:
    """Compare recipes with the lock (and the lock with ``base_ref``'s), lint them (``prefixplan check``).
    ``result.exit_code`` is what the command exits with."""
    from prefixplan.gate.check import run_check

    return run_check(recipes, lock_path, base_ref=base_ref, fail_on=fail_on, lint=lint)


def warm(
    endpoints: Sequence[str] = (),
    *,
    top: int | None = None,
    analysis: str | os.PathLike[str] | None = None,
    recipes: str | os.PathLike[str] | None = None,
    keys: Sequence[str] = (),
    endpoints_file: str | os.PathLike[str] | None = None,
    dry_run: bool = False,
    db: str | None = None,
    **options: Any,
) -> WarmOutcome:
    """Send the top prefixes to every replica and verify each hit (``prefixplan warm``).

    ``options`` are :class:`prefixplan.warming.service.WarmRequest` fields (``budget_gb``,
    ``api_key_env``, ``tokenizer``, ``lock``, ...) or :class:`prefixplan.warming.run.WarmOptions`
    fields (``timeout``, ``retries``, ``via``, ...).
    """
    from dataclasses import fields

    from prefixplan.warming.results import WarmOptions
    from prefixplan.warming.service import WarmRequest
    from prefixplan.warming.service import warm as run_warm

    run_fields = {f.name for f in fields(WarmOptions)}
    run_opts = WarmOptions(**{k: v for k, v in options.items() if k in run_fields})
    req = WarmRequest(
        endpoints=tuple(endpoints),
        endpoints_file=os.fspath(endpoints_file) if endpoints_file else None,
        analysis=os.fspath(analysis) if analysis else None,
        recipes=os.fspath(recipes) if recipes else None,
        top=top,
        keys=tuple(keys),
        dry_run=dry_run,
        db=db,
        options=run_opts,
        **{k: v for k, v in options.items() if k not in run_fields},
    )
    return run_warm(req)


def load_analysis(path: str | os.PathLike[str]) -> AnalysisRecord:
    """Read an analysis record written by ``prefixplan analyze --json``."""
    from prefixplan.analysis.record import load_record

    return load_record(Path(path))
