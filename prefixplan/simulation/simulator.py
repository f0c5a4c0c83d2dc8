"""Public entry points: :func:`simulate`, :func:`sweep` and :func:`to_json`.

``simulate`` builds the integer block trace once and replays it through: in-batch sharing
(generation a), the persistent radix cache with unbounded capacity (generation b), and
every (policy, capacity) pair asked for, then adds the savings model (GPU-seconds, TTFT
p50/p95, money) for the headline run and the eviction risk of hot prefixes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import TYPE_CHECKING

from prefixplan.errors import UsageError
from prefixplan.savings.prefill import load_profile
from prefixplan.simulation.batch import service_times
from prefixplan.simulation.config import SimConfig
from prefixplan.simulation.fleet import FleetModel, FleetRequest, fleet_request, fleet_unsupported, simulate_fleet
from prefixplan.simulation.hosted import AnthropicCache
from prefixplan.simulation.isolation import FleetInputs, IsolationTraces
from prefixplan.simulation.load import LoadInputs, replay_load
from prefixplan.simulation.replay import replay
from prefixplan.simulation.result import SimResult
from prefixplan.simulation.spec import POLICIES, parse_ttl
from prefixplan.simulation.waterfall import achieved_of, attribute
from prefixplan.trace.blocks import TraceBuilder
from prefixplan.trace.requests import SimRequest, request_of_row

if TYPE_CHECKING:
    from prefixplan.trace.blocks import BlockTrace
    from prefixplan.trace.columns import RowColumns
    from prefixplan.trace.rows import TraceRow

TRACE_BLOCK = 16
"""Block size of the block trace under Anthropic's breakpoint cache (blocks are not used there)."""


class Simulation:
    """A simulation fed one request at a time (push), replayed by :meth:`result`.

    :func:`simulate` feeds an iterable; the analyze pipeline feeds it the prompts it renders
    anyway, so one pass over the log serves both.
    """

    _tokens: TraceBuilder | None  # the waterfall's token-level trace (one key a token)
    _isolation: IsolationTraces | None  # --isolate-by: the salted traces

    def __init__(self, config: SimConfig | None = None, *, routing: bool = False, token_level: bool = True) -> None:
        """``routing``: compute what a router sees of each prompt even without a fleet (rows
        written to a trace file carry it, so the trace can replay a fleet later). ``token_level``:
        the waterfall's token-level run may ask for rows with a key per token (not when the rows
        are written to a trace file at the block size)."""
        self.config = config or SimConfig()
        self._routing = routing or self.config.fleet is not None
        self._token_level = token_level
        self._prepare()

    @property
    def block_size(self) -> int:
        """Real tokens per block of the block trace (what trace rows must divide)."""
        return self._builder.granularity.block_size

    @property
    def row_block_size(self) -> int:
        """Tokens per key the rows fed here should carry: one when the waterfall's token-level run
        is built beside the block trace (the block trace takes every block-th key), else
        :attr:`block_size`."""
        return 1 if self._tokens is not None else self.block_size

    @property
    def trace(self) -> BlockTrace | None:
        """The block trace of the last :meth:`result` (None before)."""
        return self._trace

    def add(self, request: SimRequest) -> None:
        """Add the next request (arrival order)."""
        self._builder.add(request)
        if self._tokens is not None:
            try:
                self._tokens.add(request)
            except UsageError:  # keys coarser than a token (a trace file): no token-level run
                self._tokens = None
        if self.config.fleet is not None:
            self._fleet.append(fleet_request(request))

    def add_row(self, row: TraceRow) -> None:
        """Add the next trace row (a rendered prompt, or a row read from a trace file)."""
        self.add(request_of_row(row))
        self._count += 1
        if self._isolation is not None:
            self._isolation.add_row(row)
        if row.logged_cached_tokens is not None:
            self._achieved[0] += int(row.logged_cached_tokens)
            self._achieved[1] += 1

    @property
    def takes_columns(self) -> bool:
        """Whether :meth:`add_columns` applies: no model that looks at each request (a fleet's
        router, Anthropic breakpoints)."""
        return self.config.fleet is None and self._anthropic is None and self._isolation is None

    def add_columns(self, cols: RowColumns) -> None:
        """Add a batch of trace rows at once (:attr:`takes_columns`; the same as :meth:`add_row`
        of each)."""
        if not self.takes_columns:
            raise RuntimeError("Simulation.add_columns with a fleet or Anthropic breakpoints: add each row")
        self._builder.add_columns(cols)
        if self._tokens is not None:
            try:
                self._tokens.add_columns(cols)
            except UsageError:
                self._tokens = None
        self._count += cols.n
        tokens, logged = achieved_of(cols.cached)
        self._achieved[0] += tokens
        self._achieved[1] += logged

    def _prepare(self) -> None:
        config = self.config
        gran = config.granularity()
        for pol in config.cache.policies:
            if pol not in POLICIES:
                raise UsageError(f"unknown eviction policy {pol!r}", hint="use lru, lfu, fifo or priority")
        ttl = parse_ttl(config.cache.ttl)
        if config.load is not None and config.cache.provider is not None:
            raise UsageError(
                "--rate-scale models a self-hosted engine's queue; a hosted cache (--provider) has none",
                hint="simulate the hosted cache without --rate-scale",
            )
        if (
            not 0 <= config.cache.running_fraction < 1
            or not 0 <= config.cache.pinned_fraction < 1
            or config.cache.pinned_fraction + config.cache.running_fraction >= 1
        ):
            raise UsageError(
                "pinned and running fractions must be >= 0 and leave room for the eviction policy",
                hint="e.g. --pinned-fraction 0.2 --running-fraction 0.2 (60% left to LRU)",
            )
        self._anthropic = (
            AnthropicCache(gran.min_tokens, ttl if ttl is not None else 300.0, gran.breakpoints or "request")
            if gran.breakpoints is not None
            else None
        )
        # Anthropic caches at breakpoints (keys at each request's boundaries), not in blocks: its
        # block trace only counts tokens, so it uses the default block size, not one per token.
        blocks = replace(gran, block_size=TRACE_BLOCK) if gran.breakpoints is not None else gran
        # pins and hot prefixes are looked up by their tokens (resolve); without them no block
        # that occurs in one request only needs an index entry (trace.blocks)
        lookups = bool(config.cache.pins or config.workload.hot_prefixes)
        self._builder = TraceBuilder(blocks, observer=self._anthropic, index_singletons=lookups)
        self._count = 0  # rows added (a shared trace may replace them only while none was)
        self._fleet: list[FleetRequest] = []
        self._trace: BlockTrace | None = None
        self._achieved = [0, 0]  # the log's cached_tokens: sum, requests that carry them
        # the waterfall's token-level run: the same rows at one token a block
        fine = self._token_level and config.waterfall is not None and gran.breakpoints is None and blocks.block_size > 1
        self._tokens = TraceBuilder(replace(blocks, block_size=1)) if fine else None
        self._isolation = IsolationTraces(blocks) if config.isolation is not None else None

    def result(self) -> SimResult:
        """Replay everything added so far through the configured models (and the fleet's routers),
        then the timed replay of TTFT under load when asked for."""
        trace = self._trace = self._builder.finish()
        result = replay(trace, self.config, self._anthropic)
        head = result.run(result.headline)
        inputs = LoadInputs(head.label, head.cached, result.tier_load_s)
        fleet = self._fleet_model()
        if fleet is not None:
            work = self.config.workload
            service = service_times(trace, work.batch_window, work.prefill_tps, work.decode_tps, work.default_output)
            in_rows = [self._fleet[i] for i in trace.order.tolist()]  # rows are arrivals
            result = replace(result, fleet=simulate_fleet(trace, in_rows, fleet, service))
            inputs = replace(inputs, fleet=fleet, fleet_requests=in_rows, service_s=service)
        result = self._with_waterfall(trace, self._with_load(trace, result, inputs))
        if self._isolation is not None and self.config.isolation is not None:
            fleet_in = FleetInputs(fleet, self._fleet, inputs.service_s) if fleet is not None else None
            isolation = self._isolation.result(self.config, result, self.config.isolation.by, fleet_in)
            result = replace(result, isolation=isolation)
        return result

    def _with_waterfall(self, trace: BlockTrace, result: SimResult) -> SimResult:
        """``result`` with the hit-loss waterfall (:mod:`prefixplan.simulation.waterfall`) when
        ``config.waterfall`` asks (self-hosted caches only)."""
        model = self.config.waterfall
        if model is None or self.config.cache.provider is not None:
            return result
        tokens = self._tokens.finish() if self._tokens is not None else (trace if self.block_size == 1 else None)
        achieved = (self._achieved[0], self._achieved[1]) if self._achieved[1] else None
        return replace(
            result, waterfall=attribute(trace, self.config, result, token_trace=tokens, achieved=achieved, model=model)
        )

    def _fleet_model(self) -> FleetModel | None:
        """The fleet asked for, with the cache's running share and TTL applied per replica."""
        fleet = self.config.fleet
        if fleet is None:
            return None
        cache = self.config.cache
        fleet_unsupported(provider=cache.provider, pinned_fraction=cache.pinned_fraction, tiers=cache.tiers)
        if fleet.capacity_tokens is not None and cache.running_fraction:
            fleet = replace(fleet, capacity_tokens=cache.partition(fleet.capacity_tokens)[0])
        if fleet.ttl_s is None and cache.ttl is not None:
            fleet = replace(fleet, ttl_s=parse_ttl(cache.ttl))
        return fleet

    def _with_load(self, trace: BlockTrace, result: SimResult, inputs: LoadInputs) -> SimResult:
        """``result`` with TTFT under load (:mod:`prefixplan.simulation.load`) when ``config.load`` asks."""
        model = self.config.load
        if model is None or not trace.n_requests:
            return result
        profile = self.config.savings.profile or load_profile(None)
        load = replay_load(trace, inputs, model, profile, self.config.workload.default_output)
        return replace(result, load=load)


def replay_requests(requests: Iterable[SimRequest], config: SimConfig | None = None) -> SimResult:
    """Replay ``requests`` (in arrival order) through the configured cache models."""
    sim = Simulation(config)
    for req in requests:
        sim.add(req)
    return sim.result()


def sweep(
    requests: Iterable[SimRequest],
    capacities: Iterable[float],
    policies: Iterable[str] = ("lru",),
    config: SimConfig | None = None,
) -> dict[str, list[tuple[float, float, float]]]:
    """Hit-rate curve per policy: ``{policy: [(capacity, token hit rate, request hit rate)]}``."""
    base = config or SimConfig()
    cfg = replace(
        base,
        cache=replace(base.cache, capacities=tuple(float(c) for c in capacities), policies=tuple(policies)),
        workload=replace(base.workload, hot_prefixes=()),
    )
    return replay_requests(requests, cfg).curves
