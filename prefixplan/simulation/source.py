"""The simulation of a source: logs read and rendered, or a trace file read, then replayed.

Logs are read and rendered exactly as ``prefixplan analyze`` does (the shared
:func:`prefixplan.trace.workers.iter_rendered`), then replayed by
:func:`prefixplan.simulation.simulator.simulate`. Requests without a timestamp use their position in the
stream as the arrival time. Anthropic ``cache_control`` markers become token offsets: the end of
the system segment, of the marked tool schema, or of the marked message (approximate, like every
Anthropic rendering).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from prefixplan.core.progress import NO_PROGRESS, Progress
from prefixplan.errors import UsageError
from prefixplan.logs import LineErrors
from prefixplan.render.stream import SourceOptions, source_meter
from prefixplan.simulation.config import SimConfig
from prefixplan.simulation.pins import PinSelection
from prefixplan.simulation.result import SimResult
from prefixplan.simulation.simulator import Simulation
from prefixplan.trace.meta import check_block_size, fingerprint_for, line_errors_json, line_errors_of, renderers_json
from prefixplan.trace.parquet import TraceFile, trace_input
from prefixplan.trace.workers import iter_rendered
from prefixplan.trace.writer import TraceWriter, base_meta


def simulate_source(
    source: SourceOptions,
    config: SimConfig,
    *,
    pins_from: str | Path | None = None,
    pin_top: int = 10,
    progress: Progress = NO_PROGRESS,
    trace_out: str | Path | None = None,
) -> tuple[SimResult, LineErrors]:
    """Read, render and simulate ``source`` (logs, or a trace file: no tokenizer then); returns
    (result, line errors). ``trace_out`` writes the rendered rows as a trace file.

    With ``pins_from`` (an analysis record), its top ``pin_top`` candidates become the pins
    of the pinned partition and the hot prefixes of the eviction-risk table; their tokenizer
    fingerprint must match the renderer used here (:class:`UsageError` otherwise).
    """
    from prefixplan.simulation.pins import check_fingerprints, load_pins

    trace_in = trace_input(source)
    renderers = None if trace_in is not None else source.renderers()
    if trace_in is not None:
        check_block_size(trace_in.meta, Simulation(config).block_size, str(trace_in.path))
        if trace_out is not None:
            raise UsageError("--trace-out writes a trace while rendering a log; the input is a trace already")
    if pins_from is not None:
        selection = load_pins(pins_from, pin_top)
        if renderers is not None:
            check_fingerprints(selection, renderers)
        elif trace_in is not None:
            check_trace_fingerprints(selection, trace_in)
        notes = list(selection.notes)
        if not selection.prefixes:
            notes.append(f"no pins: none of the top {pin_top} candidates of {pins_from} has token ids")
        else:
            notes.append(
                f"pinned {len(selection.prefixes)} prefixes from {pins_from}: "
                + ", ".join(p.label for p in selection.prefixes)
            )
        config = replace(
            config,
            cache=replace(config.cache, pins=selection.pins()),
            workload=replace(config.workload, hot_prefixes=selection.hot_prefixes()),
            notes=config.notes + tuple(notes),
        )
    routing = trace_out is not None or config.fleet is not None
    sim = Simulation(config, routing=routing)
    if trace_in is not None:
        progress.begin("reading the trace", trace_in.num_rows)
        n = tokens = 0
        if sim.takes_columns:  # a batch of rows at a time, no object per request
            for cols in trace_in.columns():
                sim.add_columns(cols)
                n += cols.n
                tokens += int(cols.prompt_tokens.sum())
                progress.update(n, tokens, None)
        else:
            for n, row in enumerate(trace_in.rows(), start=1):
                sim.add_row(row)
                tokens += row.prompt_tokens
                if n % 4096 == 1:
                    progress.update(n, tokens, None)
        progress.update(n, tokens, None)
        progress.end()
        errors = line_errors_of(trace_in.meta.get("line_errors"))
    else:
        assert renderers is not None
        errors = LineErrors()
        meter = source_meter(source)
        gran = config.granularity()
        writer = (
            TraceWriter(trace_out, base_meta(sim.block_size, {"describe": gran.describe()}))
            if trace_out is not None
            else None
        )
        try:
            progress.begin("reading and rendering", meter.total_bytes if meter is not None else None)
            tokens = n = 0
            rendered = iter_rendered(source, errors, renderers, block_size=sim.block_size, routing=routing, meter=meter)
            for n, one in enumerate(rendered, start=1):
                sim.add_row(one.row)
                if writer is not None:
                    writer.write(one.row)
                tokens += one.row.prompt_tokens
                if n % 256 == 1:
                    progress.update(n, tokens, meter.done() if meter is not None else None)
            progress.update(n, tokens, meter.done() if meter is not None else None)
            progress.end()
        except BaseException:
            if writer is not None:
                writer.abort()
            raise
        if writer is not None:
            writer.close(
                {
                    "inputs": {"paths": list(source.display)},
                    "line_errors": line_errors_json(errors),
                    "tokenizers": renderers_json(renderers),
                }
            )
    progress.begin("simulating the cache models")
    result = sim.result()
    progress.end()
    return result, errors


def check_trace_fingerprints(selection: PinSelection, trace: TraceFile) -> None:
    """As :func:`~prefixplan.simulation.pins.check_fingerprints`, against the tokenizers a trace
    file says its rows were rendered with."""
    if not selection.fingerprints:
        return
    tokenizers = trace.meta.get("tokenizers") or []
    for prefix in selection.prefixes:
        have = fingerprint_for(tokenizers, prefix.model or None)
        if have is not None and have not in selection.fingerprints:
            raise UsageError(
                f"--analysis {selection.source}: its token ids come from tokenizer "
                f"{', '.join(selection.tokenizer_labels)}, but {trace.path} was rendered with {have}; "
                "pinned ids would never match",
                hint="write the trace with the same --tokenizer as the analysis",
            )
