"""The simulation's view of the block trace (defined in :mod:`prefixplan.trace.blocks`, below the
analysis, which counts shared prefixes on the same blocks)."""

from prefixplan.trace.blocks import BlockTrace, KeyObserver, SimRequest, TraceBuilder, build_trace, request_boundaries

__all__ = ["BlockTrace", "KeyObserver", "SimRequest", "TraceBuilder", "build_trace", "request_boundaries"]
