"""The analyze pipeline: requests -> exact tokens + spans -> trace rows -> block trace -> ranked
shared prefixes -> record.

:func:`analyze` streams the input once (plus a second pass for the RAG what-if when the input
can be read twice). Each rendered request becomes a :class:`~prefixplan.trace.rows.TraceRow`:
its block keys go into the block trace (:mod:`prefixplan.trace.blocks`, the radix tree at the
cache granularity), its spans into compact columns (:mod:`prefixplan.analysis.rowstore`); no
token arrays are kept. Shared prefixes are counted on the block trace
(:mod:`prefixplan.analysis.blocktree`), and the shown candidates' token ids come from rendering
their representative requests again (:mod:`prefixplan.analysis.representatives`). The input may
also be a trace file (``--trace-out``): the same rows, no tokenizer, the same record. Later stages
that want to see the same stream (the simulation headline) pass ``sinks``: each receives every row
as it goes by. Token accounting per segment kind is :mod:`prefixplan.analysis.accounting`.
"""

from __future__ import annotations

import functools
import os
import time as _time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from prefixplan.analysis.accounting import approx_reason, chunk_counts, kind_accounting
from prefixplan.analysis.blocktree import BlockTree, count_tenants, rank_blocks
from prefixplan.analysis.breakers import Breaker, BreakerFinder
from prefixplan.analysis.candidates import Candidate
from prefixplan.analysis.inputs import files_json, mismatch_reason, models_json, tokenizer_infos
from prefixplan.analysis.previews import Previews, candidate_record
from prefixplan.analysis.rag import rag_report, rag_whatif
from prefixplan.analysis.record import (
    AnalysisRecord,
    CandidateRecord,
    ExampleRef,
    Summary,
    TokenizerInfo,
    candidates_frame,
)
from prefixplan.analysis.representatives import representative_tokens, source_json
from prefixplan.analysis.rowstore import RowStore
from prefixplan.analysis.textfacts import TextFacts
from prefixplan.core.granularity import engine_granularity
from prefixplan.core.memory import release_free_memory
from prefixplan.core.progress import NO_PROGRESS, Progress
from prefixplan.core.types import Request, Segment
from prefixplan.errors import UsageError
from prefixplan.logs import LineErrors
from prefixplan.render import RenderSet
from prefixplan.render.stream import RenderFailure, SourceOptions, source_meter
from prefixplan.trace.blocks import BlockTrace, TraceBuilder, request_of_row
from prefixplan.trace.columns import RowColumns
from prefixplan.trace.inprocess import Rendered
from prefixplan.trace.meta import check_block_size, line_errors_json, line_errors_of
from prefixplan.trace.parquet import TraceWriter, base_meta, trace_input
from prefixplan.trace.rows import TraceRow
from prefixplan.trace.shards import ShardResult
from prefixplan.trace.workers import RenderedColumns, iter_rendered, row_segments
from prefixplan.version import __version__

PrefixSink = Callable[[TraceRow], object]
"""Receives every trace row during the single pass (e.g. the simulation headline)."""


@dataclass(frozen=True)
class AnalyzeOptions:
    """What ``prefixplan analyze`` can be told about the analysis itself (the input and its
    tokenizer are :class:`~prefixplan.render.stream.SourceOptions`)."""

    source: SourceOptions = field(default_factory=SourceOptions)
    engine: str = "vllm"
    block_size: int | None = None
    min_tokens: int = 32
    min_hits: int = 2
    top: int = 20
    min_tenants: int = 2
    show_user_text: bool = False
    rag_whatif: bool = True

    def __post_init__(self) -> None:
        if self.top < 0:
            raise UsageError("--top must be >= 0 (0 keeps every candidate)", hint="e.g. --top 20")

    @property
    def granularity(self) -> int:
        """The cache block size the candidates are aligned to."""
        return engine_granularity(self.engine, self.block_size).block_size


@dataclass
class Analysis:
    """Result of :func:`analyze`: the typed record plus in-memory objects for later stages.

    ``ranked`` are the shown block-level candidates (the top ``--top``, rank order; the summary
    counts all of them); the record holds them as
    :class:`~prefixplan.analysis.record.CandidateRecord`. ``trace`` is the block
    trace the candidates were counted on (the simulation headline replays it). ``trace_meta`` is
    what a trace file of this run records besides its rows.
    """

    record: AnalysisRecord
    ranked: list[Candidate]
    breakers: list[Breaker]
    errors: LineErrors
    trace: BlockTrace
    render_failures: list[RenderFailure]
    trace_meta: dict[str, Any] = field(default_factory=dict)
    workers: dict[str, dict[str, float]] = field(default_factory=dict)
    """Processes that rendered files of the log (``host:pid`` -> files, peak RSS in MB, busy
    seconds): run metadata, not part of the record."""

    @property
    def candidates(self) -> tuple[CandidateRecord, ...]:
        """The recorded candidates in rank order (name, label, preview, counts, token ids)."""
        return self.record.candidates

    def to_json(self) -> dict[str, Any]:
        """The analysis record as ``prefixplan analyze --json`` writes it."""
        return self.record.to_json()

    def to_pandas(self) -> Any:
        """The candidates as a pandas DataFrame, one row each (needs ``prefixplan[pandas]``)."""
        return candidates_frame(self.record.candidates)


@dataclass
class TextPass:
    """What only text can tell (previews, breakers), fed one request at a time in input order;
    a worker that rendered one file of the log sends its own, merged in input order
    (:mod:`prefixplan.trace.shards`)."""

    min_tenants: int = 2
    show_user_text: bool = False
    previews: Previews = field(init=False)
    finder: BreakerFinder = field(init=False)

    def __post_init__(self) -> None:
        self.previews = Previews(user_text=self.show_user_text)
        self.finder = BreakerFinder(min_tenants=self.min_tenants)

    def add(self, request: Request, row: TraceRow, segments: tuple[Segment, ...] | None = None) -> None:
        """Take in one request; ``segments``: its spans when the caller has them (else rebuilt
        from the row)."""
        if segments is None:
            segments = row_segments(row)
        self.previews.remember(request, segments)
        self.finder.add_request(request, segments, int(row.units), int(row.token_scale))

    def drop(self, known: set[str]) -> None:
        """Leave out what earlier parts already sent (:meth:`Previews.drop`)."""
        self.previews.drop(known)

    def merge(self, other: TextPass) -> None:
        self.previews.merge(other.previews)
        self.finder.merge(other.finder)


class _FirstPass:
    """What the first pass keeps: the block trace, the row store, and the text pass."""

    def __init__(self, options: AnalyzeOptions) -> None:
        self.granularity = engine_granularity(options.engine, options.block_size)
        # candidates need at least two requests: blocks of one request are not indexed
        self.builder = TraceBuilder(self.granularity, index_singletons=options.min_hits < 2)
        self.store = RowStore()
        self.text = TextPass(options.min_tenants, options.show_user_text)
        self.total = 0
        self.workers: dict[str, dict[str, float]] = {}

    @property
    def previews(self) -> Previews:
        return self.text.previews

    @property
    def finder(self) -> BreakerFinder:
        return self.text.finder

    def add_rendered(self, rendered: Rendered) -> TraceRow:
        row = rendered.row
        self.add_row(row)
        if rendered.request is not None:  # else the text pass of its file comes with the file's rows
            self.text.add(rendered.request, row, rendered.segments)
        return row

    def add_shard(self, result: ShardResult) -> None:
        seen = self.workers.setdefault(result.worker, {"files": 0, "peak_rss_mb": 0.0, "seconds": 0.0})
        seen["files"] += 1
        seen["seconds"] += result.seconds
        seen["peak_rss_mb"] = max(seen["peak_rss_mb"], result.peak_rss_mb)
        if result.text is not None:
            self.text.merge(result.text)  # type: ignore[arg-type]

    def add_row(self, row: TraceRow) -> None:
        self.builder.add(request_of_row(row))
        self.store.add(row)
        self.total += int(row.prompt_tokens)

    def add_columns(self, cols: RowColumns) -> None:
        """A batch of rows at once (the same as :meth:`add_row` of each)."""
        self.builder.add_columns(cols)
        self.store.add_columns(cols)
        self.total += int(cols.prompt_tokens.sum())


def run_analysis(
    options: AnalyzeOptions,
    progress: Progress = NO_PROGRESS,
    *,
    sinks: Iterable[PrefixSink] = (),
    trace_out: str | os.PathLike[str] | None = None,
) -> Analysis:
    """Run the analysis (module docstring); ``sinks`` see every trace row in input order;
    ``progress`` hears about each pass (reading and rendering, the documents-first what-if);
    ``trace_out`` also writes the rows as a trace file. ``options.source.workers`` says how many
    processes render (:func:`~prefixplan.trace.workers.default_workers`)."""
    started = _time.monotonic()
    source = options.source
    trace_in = trace_input(source)
    first = _FirstPass(options)
    sink_list = list(sinks)
    failures: list[RenderFailure] = []
    writer: TraceWriter | None = None
    if trace_in is not None:
        if trace_out is not None:
            raise UsageError("--trace-out writes a trace while rendering a log; the input is a trace already")
        check_block_size(trace_in.meta, first.granularity.block_size, str(trace_in.path))
        facts: TextFacts | None = TextFacts.from_meta(trace_in.meta)
        errors = line_errors_of(trace_in.meta.get("line_errors"))
        progress.begin("reading the trace", None)
        n = 0
        if sink_list:  # sinks see each row
            for n, row in enumerate(trace_in.rows(), start=1):
                first.add_row(row)
                for sink in sink_list:
                    sink(row)
                if n % 4096 == 1:
                    progress.update(n, first.total, None)
        else:  # a batch of rows at a time, no object per request
            for cols in trace_in.columns():
                first.add_columns(cols)
                n += cols.n
                progress.update(n, first.total, None)
        progress.update(n, first.total, None)
        progress.end()
        renderers = None
    else:
        errors = LineErrors()
        renderers = source.renderers()
        meter = source_meter(source)
        if trace_out is not None:
            gran = first.granularity
            writer = TraceWriter(trace_out, base_meta(gran.block_size, {"describe": gran.describe()}))
        progress.begin("reading and rendering", meter.total_bytes if meter is not None else None)
        rendered = iter_rendered(
            source,
            errors,
            renderers,
            block_size=first.granularity.block_size,
            failures=failures,
            meter=meter,
            text=functools.partial(TextPass, options.min_tenants, options.show_user_text),
            on_shard=first.add_shard,
            preload=True,  # the shown candidates' token ids are rendered here at the end
            columns=writer is None and not sink_list,  # workers' rows a job at a time, as columns
        )
        try:
            n = 0
            for one in rendered:
                if isinstance(one, RenderedColumns):
                    first.add_columns(one.columns)
                    n += one.columns.n
                    progress.update(n, first.total, meter.done() if meter is not None else None)
                    continue
                row = first.add_rendered(one)
                if writer is not None:
                    writer.write(row)
                for sink in sink_list:
                    sink(row)
                if n % 256 == 0:
                    progress.update(n + 1, first.total, meter.done() if meter is not None else None)
                n += 1
            progress.update(n, first.total, meter.done() if meter is not None else None)
        except BaseException:
            if writer is not None:
                writer.abort()
            raise
        finally:
            progress.end()
        facts = None
    try:
        analysis = _rank_and_record(
            options,
            first,
            errors,
            failures,
            renderers,
            facts,
            trace_in.meta if trace_in is not None else None,
            progress,
        )
    except BaseException:
        if writer is not None:
            writer.abort()
        raise
    analysis.workers = first.workers
    summary = replace(analysis.record.summary, elapsed_s=round(_time.monotonic() - started, 3))
    analysis.record = replace(analysis.record, summary=summary)
    if writer is not None:
        writer.close(analysis.trace_meta)
    return analysis


def _distinct(values: np.ndarray) -> int:
    """Distinct values of ``values``, which it sorts in place (pass a copy: no further
    temporaries)."""
    if not values.shape[0]:
        return 0
    values.sort()
    return 1 + int(np.count_nonzero(values[1:] != values[:-1]))


def _rank_and_record(
    options: AnalyzeOptions,
    first: _FirstPass,
    errors: LineErrors,
    failures: Sequence[RenderFailure],
    renderers: RenderSet | None,
    facts: TextFacts | None,
    meta: Mapping[str, Any] | None,
    progress: Progress,
) -> Analysis:
    """Everything after the first pass: block counts, candidates, the record."""
    source = options.source
    store = first.store
    release_free_memory()  # what reading freed (a trace file's batches, parsed lines)
    trace = first.builder.finish()
    release_free_memory()  # what building the block trace freed (key batches, the twice filter)

    def between_passes() -> None:
        """Hand back what the pass just done freed or read in (mapped columns: trace.storage.mapped)."""
        trace.drop_resident()
        store.drop_resident()
        release_free_memory()

    tree = BlockTree(trace)
    between_passes()
    n_requests = len(store)
    c = store.columns()
    # reusable tokens of each request with an infinite cache, in input order
    reused_rows = np.minimum(trace.known_blocks, trace.cap_blocks) * trace.block_tokens
    reused = np.zeros(n_requests, dtype=np.int64)
    reused[trace.order] = reused_rows
    del reused_rows
    total = int(c["prompt"].sum())
    reused_total = int(reused.sum())
    between_passes()
    rag, recurring = rag_report(store, reused)
    between_passes()

    def is_recurring(text_hash: str) -> bool:
        h = np.uint64(int(text_hash, 16))
        at = int(np.searchsorted(recurring, h))
        return at < recurring.shape[0] and recurring[at] == h

    def segments_of(row: int) -> Sequence[Segment]:
        i = int(trace.order[row])
        segs = store.segments(i)
        docs = [
            Segment("doc", ch.start, ch.end, ch.text_hash, ch.message_index)
            for ch in store.chunks(i)
            if is_recurring(ch.text_hash)
        ]
        if not docs:
            return segs
        return tuple(sorted(segs + tuple(docs), key=lambda s: (s.start, s.kind != "doc")))

    ranking = rank_blocks(
        tree,
        min_tokens=options.min_tokens,
        min_hits=options.min_hits,
        segments_of=segments_of,
        limit=options.top or None,
    )
    shown = ranking.candidates
    between_passes()

    def tenant_of(row: int, tenant_col: np.ndarray = c["tenant"]) -> str:
        i = int(trace.order[row])
        t = int(tenant_col[i])
        return f"anon:{i}" if t == 0 else f"t:{t}"

    counted = count_tenants(tree, shown, tenant_of)
    del tenant_of
    arena_tokens = tree.arena_tokens()
    del tree  # the per-block counts are done with; the headline replays the trace itself
    between_passes()
    shown = [replace(cand, tenants=counted[cand.node_id][0], tenants_capped=counted[cand.node_id][1]) for cand in shown]
    rag_whatif_json: dict[str, Any] | None
    if facts is None:
        assert renderers is not None
        tokenizers = tokenizer_infos(renderers)
        engine_ids = dict(renderers.engine_ids)
        spec_of = {m: spec for spec, models in renderers.models_by_spec.items() for m in models}
        engine_used = bool(renderers.engine_ids.get("used"))
        if options.rag_whatif and recurring.shape[0] and source.rereadable:
            rag.update(rag_whatif(source, renderers, chunk_counts(store), first.granularity, reused_total, progress))
        breakers: list[Any] = list(first.finder.results())
        previews = first.previews
        rag_whatif_json = rag.get("whatif")
    else:
        tokenizers = list(facts.tokenizers)
        engine_ids = dict(facts.engine_ids)
        spec_of = {m: t.spec for t in tokenizers for m in t.log_models}
        spec_of.update(facts.spec_of)
        engine_used = bool(engine_ids.get("used"))
        if facts.rag_whatif is not None:
            rag["whatif"] = facts.rag_whatif
        breakers = list(facts.breakers)
        previews = facts.previews
        rag_whatif_json = facts.rag_whatif
    primary = tokenizers[0] if tokenizers else TokenizerInfo("trace", "trace blocks", None, False)
    mismatch = mismatch_reason(tokenizers)
    rows_exact = bool(c["exact"].all()) if n_requests else True
    exact = rows_exact and all(t.exact for t in tokenizers) and mismatch is None
    approx = [mismatch] if mismatch else []
    format_counts = np.bincount(c["format"], minlength=len(store.formats.names))
    formats = Counter({store.formats.names[k]: int(v) for k, v in enumerate(format_counts)})
    if not (rows_exact and all(t.exact for t in tokenizers)):
        approx.append(approx_reason(tokenizers, formats))
    times = c["time"][c["has_time"]]
    cached = c["cached"]
    logged = cached >= 0
    tenants = c["tenant"]
    summary = Summary(
        requests=n_requests,
        malformed_lines=errors.count,
        render_failures=len(failures) if meta is None else int(meta.get("render_failures") or 0),
        prompt_tokens=total,
        reusable_tokens=reused_total,
        hit_rate_tokens=reused_total / total if total else 0.0,
        hit_rate_requests=float((reused > 0).sum()) / n_requests if n_requests else 0.0,
        shared_prefix_tokens=ranking.marginal_tokens,
        candidates=ranking.count,
        namespaces=len(store.namespaces.names),
        distinct_tenants=_distinct(tenants[tenants != 0]),
        exact=exact,
        approximate_reason="; ".join(approx) or None,
        logged_cached_tokens=int(cached[logged].sum()) if logged.any() else None,
        time_span_s=float(times.max() - times.min()) if times.shape[0] > 1 else None,
        tree_nodes=trace.n_distinct_blocks,
        tree_arena_tokens=arena_tokens,
        elapsed_s=0.0,
    )

    def where(cand: Candidate) -> tuple[Sequence[Segment], ExampleRef]:
        i = int(trace.order[cand.request_index])
        cols = store.columns()
        return store.segments(i), ExampleRef(store.sources.names[int(cols["source"][i])], int(cols["line"][i]))

    # what the record needs of every request, before the per-request columns go (the
    # representatives may load a tokenizer: its peak should not sit on top of them)
    places = {cand.id: where(cand) for cand in shown}
    meta_inputs = meta.get("inputs") if meta is not None else None
    if isinstance(meta_inputs, Mapping):
        paths = [str(p) for p in meta_inputs.get("paths") or ()]
        files = list(meta_inputs.get("files") or files_json(store, errors))
    else:
        paths = list(source.display)
        files = files_json(store, errors)
    ns_counts = np.bincount(c["ns"], minlength=len(store.namespaces.names))
    model_counts = np.bincount(c["model"], minlength=len(store.models.names))
    per_model = models_json(store, reused, spec_of, engine_used)
    between_passes()
    kinds = kind_accounting(store, reused, recurring)
    namespaces, models = list(store.namespaces.names), list(store.models.names)
    del c, cached, tenants, times, logged, reused
    store.release()
    between_passes()
    rep_tokens = representative_tokens(
        source, trace, {k: ref for k, (_, ref) in places.items()}, shown, renderers, meta
    )
    between_passes()  # and what the tokenizer it may have loaded for a trace's log freed

    candidates = tuple(
        candidate_record(
            cand,
            previews,
            places[cand.id][0],
            rep_tokens.get(cand.id),
            places[cand.id][1],
            min_tenants=options.min_tenants,
            show_user_text=options.show_user_text,
            fingerprint=primary.fingerprint,
        )
        for cand in shown
    )
    breaker_json = tuple(b.to_json() if isinstance(b, Breaker) else dict(b) for b in breakers)
    record = AnalysisRecord(
        tool=f"prefixplan {__version__}",
        created=_time.strftime("%Y-%m-%dT%H:%M:%SZ", _time.gmtime()),
        inputs={
            "paths": paths,
            "formats": dict(formats),
            "models": {models[k]: int(v) for k, v in enumerate(model_counts)},
            "namespaces": {namespaces[k]: int(v) for k, v in enumerate(ns_counts)},
            "files": files,
            "per_model": per_model,
            "engine_ids": engine_ids,
        },
        tokenizer=primary,
        tokenizers=tuple(tokenizers),
        granularity={
            "engine": options.engine if options.block_size is None else None,
            "block_size": first.granularity.block_size,
            "rule": "full blocks only; the last prompt token is never reused",
        },
        privacy={
            "min_tenants": options.min_tenants,
            "show_user_text": options.show_user_text,
            "rule": "token ids and text are withheld for candidates shared by fewer than min_tenants distinct users; "
            "user-authored text is never previewed unless show_user_text",
        },
        summary=summary,
        kinds=kinds,
        candidates=candidates,
        rag=rag,
        simulation=None,
        breakers=breaker_json,
        errors={
            "count": errors.count,
            "by_reason": dict(sorted(errors.by_reason.items())),
            "samples": [{"source": e.source, "line": e.line_no, "reason": e.reason} for e in errors.samples],
        },
    )
    analysis = Analysis(record, shown, [b for b in breakers if isinstance(b, Breaker)], errors, trace, list(failures))
    analysis.trace_meta = {
        "inputs": {"paths": paths, "files": files, "source": source_json(source)},
        "line_errors": line_errors_json(errors),
        "render_failures": summary.render_failures,
        "tokenizers": [t.to_json() for t in tokenizers],
        "text": TextFacts.to_meta(previews, breaker_json, rag_whatif_json, engine_ids, spec_of),
    }
    return analysis
