"""``prefixplan simulate`` as one call: :class:`SimulateRequest` in, :class:`SimulationResult`
out; :func:`simulate` and :func:`simulation_config` are the same for a notebook."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from prefixplan.api.source import Inputs, executor, source_options
from prefixplan.core.extras import require
from prefixplan.core.progress import NO_PROGRESS, Progress
from prefixplan.trace.executors import Executor

if TYPE_CHECKING:
    from prefixplan.render.stream import SourceOptions
    from prefixplan.simulation.config import SimConfig
    from prefixplan.simulation.result import SimResult


@dataclass(frozen=True)
class SimulationResult:
    """:func:`simulate`'s result: the typed result, the line errors, and convenience views."""

    result: SimResult
    malformed_lines: int = 0
    errors: dict[str, Any] | None = None
    """The malformed lines as ``analyze`` reports them: count, by reason, samples (file, line, reason)."""

    def to_json(self) -> dict[str, Any]:
        """The JSON document ``prefixplan simulate --json`` writes."""
        from prefixplan.simulation.result import to_json

        doc = to_json(self.result)
        doc["line_errors"] = self.malformed_lines
        doc["errors"] = self.errors or {"count": self.malformed_lines, "by_reason": {}, "samples": []}
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


@dataclass(frozen=True)
class SimulateRequest:
    """Everything ``prefixplan simulate`` is asked: the source, what to simulate (``config``),
    the analysis whose top ``pin_top`` candidates are pinned (``pins_from``), and the outputs
    (``json``: the result document; ``trace_out``: the rendered rows as a trace file)."""

    source: SourceOptions
    config: SimConfig
    pins_from: str | None = None
    pin_top: int = 10
    json: str | None = None
    trace_out: str | None = None
    executor: Executor = field(default_factory=Executor)

    def __post_init__(self) -> None:
        if self.pin_top < 0:
            from prefixplan.errors import UsageError

            raise UsageError("--top must be >= 0", hint="e.g. --top 10")


def run_simulate(request: SimulateRequest, progress: Progress = NO_PROGRESS) -> SimulationResult:
    """The ``prefixplan simulate`` command as one call: read, render (or read a trace), replay,
    write the JSON document."""
    from prefixplan.simulation.source import simulate_source
    from prefixplan.trace.meta import errors_json

    result, errors = simulate_source(
        request.source,
        request.config,
        executor=request.executor,
        pins_from=request.pins_from,
        pin_top=request.pin_top,
        progress=progress,
        trace_out=request.trace_out,
    )
    out = SimulationResult(result, errors.count, errors_json(errors))
    if request.json:
        from prefixplan.core.fileio import atomic_write_json

        atomic_write_json(request.json, out.to_json())
    return out


def simulate(
    inputs: Inputs,
    config: SimConfig | None = None,
    *,
    pins_from: str | os.PathLike[str] | None = None,
    pin_top: int = 10,
    workers: int | None = None,
    **source: Any,
) -> SimulationResult:
    """Replay ``inputs`` through cache models (``prefixplan simulate``).

    Args:
        inputs: as for :func:`analyze`; ``source`` takes :func:`source_options`' keywords,
            ``workers`` is :func:`executor`'s.
        config: what to simulate (:class:`prefixplan.simulation.SimConfig`); default: vLLM blocks,
            in-batch vs an unbounded persistent cache. :func:`simulation_config` builds one from
            command-line style values (``capacity="1e6,40GB"``, ``policy="lru,lfu"``).
        pins_from: an analysis record whose top ``pin_top`` candidates are pinned.
    """
    from prefixplan.simulation.config import SimConfig

    request = SimulateRequest(
        source_options(inputs, **source),
        config or SimConfig(),
        pins_from=os.fspath(pins_from) if pins_from is not None else None,
        pin_top=pin_top,
        executor=executor(workers),
    )
    return run_simulate(request)


def simulation_config(*, profile: str | None = None, db: str | None = None, **options: Any) -> SimConfig:
    """A :class:`~prefixplan.simulation.SimConfig` from ``prefixplan simulate``'s option values
    (:func:`prefixplan.simulation.options.build_config`); ``profile`` may name a built-in, a YAML
    file or a profile stored by ``calibrate``."""
    from prefixplan.simulation.options import build_config
    from prefixplan.store import resolve_profile

    return build_config(profile=resolve_profile(profile, db) if profile else None, **options)
