"""The analysis's first pass: every rendered row into the row store and the block trace, and
the text-level facts (previews, breakers) taken on the way (:class:`FirstPass`, :class:`TextPass`)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from prefixplan.analysis.breakers import BreakerFinder
from prefixplan.analysis.earlier import EarlierRows
from prefixplan.analysis.options import AnalyzeOptions
from prefixplan.analysis.previews import Previews
from prefixplan.analysis.rowstore import RowStore
from prefixplan.core.granularity import engine_granularity
from prefixplan.core.types import Request, Segment
from prefixplan.render.stream import RenderFailure
from prefixplan.trace.blocks import TraceBuilder
from prefixplan.trace.columns import RowColumns
from prefixplan.trace.requests import request_of_row
from prefixplan.trace.rows import TraceRow, row_segments
from prefixplan.trace.shards import ShardResult
from prefixplan.trace.storage.spill import RaggedU64


@dataclass
class TextPass:
    """What only text can tell (previews, breakers), fed one request at a time in input order;
    each job of the input makes its own where it renders, merged in input order
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
        # candidates need at least two requests: blocks of one request are not indexed; the
        # documents-first what-if takes the keys of the requests it leaves as they are from here
        self.keys: RaggedU64 | None = RaggedU64() if options.rag_whatif else None
        self.builder = TraceBuilder(self.granularity, index_singletons=options.min_hits < 2, keys=self.keys)
        self.store = RowStore()
        self.text = TextPass(options.min_tenants, options.show_user_text)
        self.total = 0

    @property
    def previews(self) -> Previews:
        return self.text.previews

    @property
    def finder(self) -> BreakerFinder:
        return self.text.finder

    def earlier_rows(self, failures: Iterable[RenderFailure]) -> EarlierRows | None:
        """The rows a second pass may take instead of rendering again (after the block trace is
        finished; None when the keys were not kept)."""
        if self.keys is None:
            return None
        return EarlierRows(self.store, self.keys, self.granularity.block_size, failures)

    def release_keys(self) -> None:
        """Drop the kept block keys (no further pass needs them)."""
        if self.keys is not None:
            self.keys.close()
            self.keys = None

    def add_shard(self, result: ShardResult) -> None:
        """A job's text partial (its rows come through :meth:`add_row` or :meth:`add_columns`)."""
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
