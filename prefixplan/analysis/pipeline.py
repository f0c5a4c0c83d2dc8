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
from prefixplan.trace.columns import RowColumns
from prefixplan.trace.executors import session
from prefixplan.trace.intake import Intake, IntakePlan
from prefixplan.trace.rows import TraceRow

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
    ``trace_out`` also writes the rows as a trace file. ``options.executor`` says where the
    requests render (:class:`~prefixplan.trace.executors.Executor`)."""
    started = _time.monotonic()
    first = FirstPass(options)
    sink_list = list(sinks)
    plan = IntakePlan(
        options.source,
        options.executor,
        first.granularity.block_size,
        describe=first.granularity.describe(),
        text=functools.partial(TextPass, options.min_tenants, options.show_user_text),
        trace_out=trace_out,
        preload=True,  # the shown candidates' token ids are rendered here at the end
    )
    with session(), Intake(plan, progress, on_shard=first.add_shard) as intake:
        for item in intake.batches(columns=not sink_list):  # sinks see each row
            if isinstance(item, RowColumns):
                first.add_columns(item)
                continue
            first.add_row(item)
            for sink in sink_list:
                sink(item)
        trace_in = intake.trace
        facts = TextFacts.from_meta(trace_in.meta) if trace_in is not None else None
        analysis = rank_and_record(
            options,
            first,
            intake.errors,
            intake.failures,
            intake.renderers,
            facts,
            trace_in.meta if trace_in is not None else None,
            progress,
        )
        intake.close(analysis.trace_meta)
    analysis.workers = intake.workers
    summary = replace(analysis.record.summary, elapsed_s=round(_time.monotonic() - started, 3))
    analysis.record = replace(analysis.record, summary=summary)
    return analysis
