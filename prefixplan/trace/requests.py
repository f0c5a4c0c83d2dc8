"""The simulation's input contract: one :class:`SimRequest` a request (independent of logs and
tokenizers), made from a trace row (:func:`request_of_row`) or built directly."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from prefixplan.trace.rows import TraceRow


@dataclass(frozen=True, slots=True)
class SimRequest:
    """One request as the simulator sees it.

    Attributes:
        time: arrival seconds (logs without times use the file index; :func:`fill_times`).
        namespace: cache namespace (model, LoRA, salt); namespaces never share blocks.
        tokens: uint32 token ids. For Mooncake traces one pseudo-token per block hash id. None
            when the request comes from a trace file (``block_keys`` instead).
        output_len: generated tokens (0 when unknown).
        breakpoints: Anthropic ``cache_control`` token offsets (prefix lengths), if any.
        block_scale: real tokens each entry of ``tokens`` stands for (Mooncake block size).
        index: position in the input stream.
        route_units: what a router sees of the request (``simulation.router.route_units``);
            None when no fleet is simulated.
        key: identity of the request's leading system/tool prefix (keyed routing), if any.
        key_tokens: that prefix's length in tokens (up to the first user message).
        prompt_len: real prompt tokens when they differ from ``len(tokens) * block_scale``
            (a Mooncake ``input_length``: the last hash id may stand for a partial block), or
            when ``tokens`` is None.
        block_keys: prefix keys of the full blocks at ``keys_units`` units each (trace files).
        keys_units: units (entries of ``tokens``) per key in ``block_keys``.
        boundaries: prefix lengths (units) where the request's segments end (system, each
            tool, each message) and its end: where the Anthropic model looks up entries.
        boundary_keys: the prefix keys at ``boundaries`` when ``tokens`` is None.
        units: entries of the prompt when ``tokens`` is None.
    """

    time: float
    namespace: str
    tokens: np.ndarray | None
    output_len: int = 0
    breakpoints: tuple[int, ...] = ()
    block_scale: int = 1
    index: int = 0
    route_units: tuple[int, ...] | None = None
    key: str | None = None
    key_tokens: int = 0
    prompt_len: int | None = None
    block_keys: np.ndarray | None = None
    keys_units: int = 1
    boundaries: tuple[int, ...] = ()
    boundary_keys: tuple[int, ...] | None = None
    units: int | None = None
    timed: bool = True  # False: the log gave no time (``time`` is then the index, see fill_times)

    @property
    def n_units(self) -> int:
        """Entries of the prompt in units of ``block_scale`` tokens."""
        if self.tokens is not None:
            return int(self.tokens.shape[0])
        if self.units is not None:
            return int(self.units)
        return -(-int(self.prompt_len or 0) // max(1, int(self.block_scale)))

    @property
    def real_tokens(self) -> int:
        """Real prompt tokens."""
        if self.prompt_len is not None:
            return int(self.prompt_len)
        return self.n_units * max(1, int(self.block_scale))


def fill_times(times: np.ndarray, untimed: np.ndarray) -> np.ndarray:
    """Arrival times where some requests of a timed log have none: each such request arrives
    with the request before it in the input (so replay keeps it right after that one), and those
    before the first timed request with it. A log without any time replays in file order by
    index; a lone untimed request must not become "time 3" among epoch seconds. ``times`` comes
    back as it is when every request, or none, has a time."""
    if not untimed.any() or untimed.all():
        return times
    n = times.shape[0]
    known = np.where(~untimed, np.arange(n), -1)
    np.maximum.accumulate(known, out=known)
    first = int(np.argmax(~untimed))
    known[known < 0] = first
    return times[known]


def request_of_row(row: TraceRow) -> SimRequest:
    """A trace row as simulation input (no tokens: its block keys and boundary keys)."""
    return SimRequest(
        time=float(row.time) if row.time is not None else float(row.index),
        timed=row.time is not None,
        namespace=row.namespace,
        tokens=None,
        output_len=int(row.output_tokens),
        breakpoints=row.breakpoints,
        block_scale=int(row.token_scale),
        index=int(row.index),
        route_units=row.route_units,
        key=row.gw_key,
        key_tokens=int(row.gw_key_tokens),
        prompt_len=int(row.prompt_tokens),
        block_keys=row.block_keys,
        keys_units=int(row.keys_units),
        boundaries=row.boundaries,
        boundary_keys=row.boundary_keys,
        units=int(row.units),
    )


def request_boundaries(n_units: int, breakpoints: Iterable[int], segment_ends: Iterable[int]) -> tuple[int, ...]:
    """Sorted prefix lengths in ``(0, n_units]``: segment ends, breakpoints and the end."""
    out = {int(b) for b in breakpoints if 0 < int(b) <= n_units}
    out.update(int(e) for e in segment_ends if 0 < int(e) <= n_units)
    if n_units > 0:
        out.add(n_units)
    return tuple(sorted(out))
