"""The simulation of a source: logs read and rendered, or a trace file read, then replayed.

Logs are read and rendered exactly as ``prefixplan analyze`` does (the shared
:class:`~prefixplan.trace.intake.Intake`), then replayed by
:class:`prefixplan.simulation.simulator.Simulation`. Requests without a timestamp use their position in the
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
from prefixplan.render.stream import SourceOptions
from prefixplan.simulation.config import SimConfig
from prefixplan.simulation.pins import PinSelection
from prefixplan.simulation.result import SimResult
from prefixplan.simulation.simulator import Simulation
from prefixplan.trace.columns import RowColumns
from prefixplan.trace.executors import Executor, session
from prefixplan.trace.intake import Intake, IntakePlan
from prefixplan.trace.meta import fingerprint_for
from prefixplan.trace.parquet import TraceFile, trace_input


def simulate_source(
    source: SourceOptions,
    config: SimConfig,
    *,
    executor: Executor | None = None,
    pins_from: str | Path | None = None,
    pin_top: int = 10,
    progress: Progress = NO_PROGRESS,
    trace_out: str | Path | None = None,
) -> tuple[SimResult, LineErrors]:
    """Read, render (where ``executor`` says) and simulate ``source`` (logs, or a trace file: no
    tokenizer then); returns (result, line errors). ``trace_out`` writes the rendered rows as a
    trace file.

    With ``pins_from`` (an analysis record), its top ``pin_top`` candidates become the pins
    of the pinned partition and the hot prefixes of the eviction-risk table; their tokenizer
    fingerprint must match the renderer used here (:class:`UsageError` otherwise).
    """

    source = _tenant_source(source, config)
    routing = trace_out is not None or config.fleet is not None
    # the waterfall's token-level run takes rows with a key per token: not when they are written
    # out, nor from a trace file written at a coarser block size
    trace = trace_input(source)
    token_level = trace_out is None and (trace is None or int(trace.meta.get("block_size") or 0) == 1)
    block_size = Simulation(config, token_level=token_level).row_block_size
    plan = IntakePlan(
        source,
        executor or Executor(),
        block_size,
        describe=config.granularity().describe(),
        routing=routing,
        trace_out=trace_out,
    )
    with session(), Intake(plan, progress) as intake:
        if pins_from is not None:
            config = _with_pins(config, intake, pins_from, pin_top)
            if config.waterfall is not None:
                from prefixplan.analysis.record_io import load_record
                from prefixplan.simulation.waterfall import breaker_model

                record = load_record(pins_from)
                breakers = breaker_model(record.breakers, f"the breakers of {pins_from}")
                config = replace(config, waterfall=replace(breakers, engine=config.waterfall.engine))
        sim = Simulation(config, routing=routing, token_level=token_level)
        for item in intake.batches(columns=sim.takes_columns):
            if isinstance(item, RowColumns):
                sim.add_columns(item)
            else:
                sim.add_row(item)
    progress.begin("simulating the cache models")
    result = sim.result()
    progress.end()
    return result, intake.errors


def _tenant_source(source: SourceOptions, config: SimConfig) -> SourceOptions:
    """``source`` reading each request's tenant id from ``--isolate-by FIELD``'s field."""
    field = config.isolation.field if config.isolation is not None else None
    if field is None:
        return source
    if trace_input(source) is not None:
        raise UsageError(
            f"--isolate-by {field}: a trace file's rows carry the tenant id read when it was written",
            hint="simulate the logs, or use --isolate-by tenant",
        )
    return replace(source, read=replace(source.read, tenant_field=field))


def _with_pins(config: SimConfig, intake: Intake, pins_from: str | Path, pin_top: int) -> SimConfig:
    """``config`` with the top ``pin_top`` candidates of the analysis record ``pins_from`` pinned
    (and watched as hot prefixes), their tokenizer checked against the input's."""
    from prefixplan.simulation.pins import check_fingerprints, load_pins

    selection = load_pins(pins_from, pin_top)
    if intake.renderers is not None:
        check_fingerprints(selection, intake.renderers)
    elif intake.trace is not None:
        check_trace_fingerprints(selection, intake.trace)
    notes = list(selection.notes)
    if not selection.prefixes:
        notes.append(f"no pins: none of the top {pin_top} candidates of {pins_from} has token ids")
    else:
        notes.append(
            f"pinned {len(selection.prefixes)} prefixes from {pins_from}: "
            + ", ".join(p.label for p in selection.prefixes)
        )
    return replace(
        config,
        cache=replace(config.cache, pins=selection.pins()),
        workload=replace(config.workload, hot_prefixes=selection.hot_prefixes()),
        notes=config.notes + tuple(notes),
    )


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
