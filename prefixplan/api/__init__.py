"""The public Python API: the library half of "CLI plus library".

Each command is one ``run_*`` function taking one typed request (a frozen dataclass per command:
what to read, what to compute, what to write), so a notebook, a service and the command line get
the same results: ``run_analyze``, ``run_simulate``, ``run_trace``, ``run_lock``, ``run_check``,
``run_warm``, ``run_status``, ``run_calibrate``, ``run_report``, ``run_diff``, ``run_formats``,
``run_gateway`` and ``run_keys_list|show|history|expire|gc``. The keyword functions
(:func:`analyze`, :func:`simulate`, :func:`write_trace`, :func:`lock`, :func:`check`,
:func:`warm`) build the request from plain arguments::

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

from prefixplan.analysis.options import AnalyzeOptions
from prefixplan.api.analyze import (
    AnalyzeOutcome,
    AnalyzeOutputs,
    AnalyzeRequest,
    HeadlineOptions,
    analyze,
    run_analyze,
)
from prefixplan.api.gate import CheckRequest, LockRequest, check, lock, run_check, run_lock
from prefixplan.api.gateway import GatewayRequest, gateway_config, run_gateway
from prefixplan.api.keys import (
    KeysExpireRequest,
    KeysGcRequest,
    KeysHistoryRequest,
    KeysListRequest,
    KeysShowRequest,
    run_keys_expire,
    run_keys_gc,
    run_keys_history,
    run_keys_list,
    run_keys_show,
)
from prefixplan.api.records import load_analysis
from prefixplan.api.reports import (
    DiffRequest,
    FormatsRequest,
    ReportRequest,
    run_diff,
    run_formats,
    run_report,
)
from prefixplan.api.simulate import SimulateRequest, SimulationResult, run_simulate, simulate, simulation_config
from prefixplan.api.source import Inputs, executor, source_options
from prefixplan.api.trace import TraceOutcome, TraceRequest, run_trace, write_trace
from prefixplan.api.warming import (
    CalibrateOutcome,
    CalibrateRequest,
    StatusOutcome,
    StatusRequest,
    WarmOptions,
    WarmOutcome,
    WarmRequest,
    run_calibrate,
    run_status,
    run_warm,
    warm,
)
from prefixplan.trace.executors import Executor

__all__ = [
    "AnalyzeOptions",
    "AnalyzeOutcome",
    "AnalyzeOutputs",
    "AnalyzeRequest",
    "CalibrateOutcome",
    "CalibrateRequest",
    "CheckRequest",
    "DiffRequest",
    "Executor",
    "FormatsRequest",
    "GatewayRequest",
    "HeadlineOptions",
    "Inputs",
    "KeysExpireRequest",
    "KeysGcRequest",
    "KeysHistoryRequest",
    "KeysListRequest",
    "KeysShowRequest",
    "LockRequest",
    "ReportRequest",
    "SimulateRequest",
    "SimulationResult",
    "StatusOutcome",
    "StatusRequest",
    "TraceOutcome",
    "TraceRequest",
    "WarmOptions",
    "WarmOutcome",
    "WarmRequest",
    "analyze",
    "check",
    "executor",
    "gateway_config",
    "load_analysis",
    "lock",
    "run_analyze",
    "run_calibrate",
    "run_check",
    "run_diff",
    "run_formats",
    "run_gateway",
    "run_keys_expire",
    "run_keys_gc",
    "run_keys_history",
    "run_keys_list",
    "run_keys_show",
    "run_lock",
    "run_report",
    "run_simulate",
    "run_status",
    "run_trace",
    "run_warm",
    "simulate",
    "simulation_config",
    "source_options",
    "warm",
    "write_trace",
]
