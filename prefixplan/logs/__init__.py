"""Read request logs (OpenAI chat / completions / batch, Anthropic Messages, Mooncake traces).

See docs/logs.md. Public API::

    errors = LineErrors()
    for request in iter_requests(expand_paths(["logs/*.jsonl.gz"]), ReadOptions(), errors):
        ...
"""

from __future__ import annotations

from prefixplan.logs.lineerrors import LineErrorRecord, LineErrors
from prefixplan.logs.paths import ReadMeter, expand_paths
from prefixplan.logs.read import ReadOptions, iter_objects, iter_requests
from prefixplan.logs.times import parse_time

__all__ = [
    "LineErrorRecord",
    "LineErrors",
    "ReadMeter",
    "ReadOptions",
    "expand_paths",
    "iter_objects",
    "iter_requests",
    "parse_time",
]
