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
from collections.abc import Callable, Iterable
from dataclasses import replace

from prefixplan.analysis.first_pass import FirstPass, TextPass
from prefixplan.analysis.options import Analysis, AnalyzeOptions
from prefixplan.analysis.ranking import rank_and_record
from prefixplan.analysis.textfacts import TextFacts
from prefixplan.core.progress import NO_PROGRESS, Progress
from prefixplan.errors import UsageError
from prefixplan.logs import LineErrors
from prefixplan.render.stream import RenderFailure, source_meter
from prefixplan.trace.meta import check_block_size, line_errors_of
from prefixplan.trace.parquet import trace_input
from prefixplan.trace.rows import TraceRow
from prefixplan.trace.workers import RenderedColumns, iter_rendered
from prefixplan.trace.writer import TraceWriter, base_meta

PrefixSink = Callable[[TraceRow], object]
"""Receives every trace row during the single pass (e.g. the simulation headline)."""


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
    first = FirstPass(options)
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
        analysis = rank_and_record(
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
