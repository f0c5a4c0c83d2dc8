"""The analysis's first pass: every rendered row into the row store and the block trace, and
the text-level facts (previews, breakers) taken on the way (:class:`FirstPass`, :class:`TextPass`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from prefixplan.analysis.breakers import BreakerFinder
from prefixplan.analysis.options import AnalyzeOptions
from prefixplan.analysis.previews import Previews
from prefixplan.analysis.rowstore import RowStore
from prefixplan.core.granularity import engine_granularity
from prefixplan.core.types import Request, Segment
from prefixplan.trace.blocks import TraceBuilder
from prefixplan.trace.columns import RowColumns
from prefixplan.trace.inprocess import Rendered
from prefixplan.trace.requests import request_of_row
from prefixplan.trace.rows import TraceRow
from prefixplan.trace.shards import ShardResult
from prefixplan.trace.workers import row_segments


@dataclass
class TextPass:
    """What only text can tell (previews, breakers), fed one request at a time in input order;
    a worker that rendered one file of the log sends its own, merged in input order
    (:mod:`prefixplan.trace.shards`)."""

    min_tenants: int = 2
    show_user_text: bool = False
    previews: Previews = field(init=False)
    finder: BreakerFinder = field(init=False)

    def __post_init__(self) -> None:
        self.previews = Previews(user_text=self.show_user_text)
        self.finder = BreakerFinder(min_tenants=self.min_tenants)

    def add(self, request: Request, row: TraceRow, segments: tuple[Segment, ...] | None = None) -> None:
        """Take in one request; ``segments``: its spans when the caller has them (else rebuilt
        from the row)."""
        if segments is None:
            segments = row_segments(row)
        self.previews.remember(request, segments)
        self.finder.add_request(request, segments, int(row.units), int(row.token_scale))

    def drop(self, known: set[str]) -> None:
        """Leave out what earlier parts already sent (:meth:`Previews.drop`)."""
        self.previews.drop(known)

    def merge(self, other: TextPass) -> None:
        self.previews.merge(other.previews)
        self.finder.merge(other.finder)


class FirstPass:
    """What the first pass keeps: the block trace, the row store, and the text pass."""

    def __init__(self, options: AnalyzeOptions) -> None:
        self.granularity = engine_granularity(options.engine, options.block_size)
        # candidates need at least two requests: blocks of one request are not indexed
        self.builder = TraceBuilder(self.granularity, index_singletons=options.min_hits < 2)
        self.store = RowStore()
        self.text = TextPass(options.min_tenants, options.show_user_text)
        self.total = 0
        self.workers: dict[str, dict[str, float]] = {}

    @property
    def previews(self) -> Previews:
        return self.text.previews

    @property
    def finder(self) -> BreakerFinder:
        return self.text.finder

    def add_rendered(self, rendered: Rendered) -> TraceRow:
        row = rendered.row
        self.add_row(row)
        if rendered.request is not None:  # else the text pass of its file comes with the file's rows
            self.text.add(rendered.request, row, rendered.segments)
        return row

    def add_shard(self, result: ShardResult) -> None:
        seen = self.workers.setdefault(result.worker, {"files": 0, "peak_rss_mb": 0.0, "seconds": 0.0})
        seen["files"] += 1
        seen["seconds"] += result.seconds
        seen["peak_rss_mb"] = max(seen["peak_rss_mb"], result.peak_rss_mb)
        if result.text is not None:
            self.text.merge(result.text)  # type: ignore[arg-type]

    def add_row(self, row: TraceRow) -> None:
        self.builder.add(request_of_row(row))
        self.store.add(row)
        self.total += int(row.prompt_tokens)

    def add_columns(self, cols: RowColumns) -> None:
        """A batch of rows at once (the same as :meth:`add_row` of each)."""
        self.builder.add_columns(cols)
        self.store.add_columns(cols)
        self.total += int(cols.prompt_tokens.sum())
