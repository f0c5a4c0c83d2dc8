"""The public Python API: the library half of "CLI plus library".

Each command is one ``run_*`` function taking one typed request (a frozen dataclass per command:
what to read, what to compute, what to write), so a notebook, a service and the command line get
the same results; the keyword functions (:func:`analyze`, :func:`simulate`, :func:`write_trace`)
build the request from plain arguments::

    import prefixplan

    analysis = prefixplan.analyze("logs/*.jsonl.gz", tokenizer="hf:/models/qwen3")
    analysis.candidates[0].label, analysis.candidates[0].preview
    analysis.to_pandas()                      # one row per candidate (needs pandas)

    requests = [{"model": "m", "messages": [...], "tools": [...]}, ...]
    prefixplan.analyze(requests)              # the same analysis, from memory

    result = prefixplan.simulate("logs/*.jsonl.gz", prefixplan.simulation_config(capacity="1e6,1e7"))
    result.hit_rate("lru", 1e6)

Inputs are paths (files, globs, folders), or an iterable of log records (dicts in any log
format prefixplan reads, e.g. OpenAI chat requests). Errors are :mod:`prefixplan.errors`
exceptions, the same the command line turns into messages and exit codes.
"""

from prefixplan.api.analyze import (
    AnalyzeOutcome,
    AnalyzeOutputs,
    AnalyzeRequest,
    HeadlineOptions,
    analyze,
    run_analyze,
)
from prefixplan.api.gate import check, lock
from prefixplan.api.records import load_analysis
from prefixplan.api.simulate import SimulateRequest, SimulationResult, run_simulate, simulate, simulation_config
from prefixplan.api.source import Inputs, source_options
from prefixplan.api.trace import TraceOutcome, TraceRequest, run_trace, write_trace
from prefixplan.api.warming import warm

__all__ = [
    "AnalyzeOutcome",
    "AnalyzeOutputs",
    "AnalyzeRequest",
    "HeadlineOptions",
    "Inputs",
    "SimulateRequest",
    "SimulationResult",
    "TraceOutcome",
    "TraceRequest",
    "analyze",
    "check",
    "load_analysis",
    "lock",
    "run_analyze",
    "run_simulate",
    "run_trace",
    "simulate",
    "simulation_config",
    "source_options",
    "warm",
    "write_trace",
]
