"""What ``analyze`` is told (:class:`AnalyzeOptions`) and what it gives back (:class:`Analysis`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from prefixplan.analysis.breakers import Breaker
from prefixplan.analysis.candidates import Candidate
from prefixplan.analysis.record import AnalysisRecord, CandidateRecord
from prefixplan.analysis.record_io import candidates_frame
from prefixplan.core.granularity import engine_granularity
from prefixplan.errors import UsageError
from prefixplan.logs import LineErrors
from prefixplan.render.stream import RenderFailure, SourceOptions
from prefixplan.trace.blocks import BlockTrace
from prefixplan.trace.executors import Executor


@dataclass(frozen=True)
class AnalyzeOptions:
    """What ``prefixplan analyze`` can be told about the analysis itself (the input and its
    tokenizer are :class:`~prefixplan.render.stream.SourceOptions`; where it renders, the
    :class:`~prefixplan.trace.executors.Executor`)."""

    source: SourceOptions = field(default_factory=SourceOptions)
    executor: Executor = field(default_factory=Executor)
    engine: str = "vllm"
    block_size: int | None = None
    min_tokens: int = 32
    min_hits: int = 2
    top: int = 20
    min_tenants: int = 2
    show_user_text: bool = False
    rag_whatif: bool = True

    def __post_init__(self) -> None:
        if self.top < 0:
            raise UsageError("--top must be >= 0 (0 keeps every candidate)", hint="e.g. --top 20")

    @property
    def granularity(self) -> int:
        """The cache block size the candidates are aligned to."""
        return engine_granularity(self.engine, self.block_size).block_size


@dataclass
class Analysis:
    """Result of :func:`analyze`: the typed record plus in-memory objects for later stages.

    ``ranked`` are the shown block-level candidates (the top ``--top``, rank order; the summary
    counts all of them); the record holds them as
    :class:`~prefixplan.analysis.record.CandidateRecord`. ``trace`` is the block
    trace the candidates were counted on (the simulation headline replays it). ``trace_meta`` is
    what a trace file of this run records besides its rows.
    """

    record: AnalysisRecord
    ranked: list[Candidate]
    breakers: list[Breaker]
    errors: LineErrors
    trace: BlockTrace
    render_failures: list[RenderFailure]
    trace_meta: dict[str, Any] = field(default_factory=dict)
    workers: dict[str, dict[str, float]] = field(default_factory=dict)
    """Processes that rendered parts of the log (``host:pid`` -> jobs, peak RSS in MB, busy and
    CPU seconds): run metadata, not part of the record."""

    @property
    def candidates(self) -> tuple[CandidateRecord, ...]:
        """The recorded candidates in rank order (name, label, preview, counts, token ids)."""
        return self.record.candidates

    def to_json(self) -> dict[str, Any]:
        """The analysis record as ``prefixplan analyze --json`` writes it."""
        return self.record.to_json()

    def to_pandas(self) -> Any:
        """The candidates as a pandas DataFrame, one row each (needs ``prefixplan[pandas]``)."""
        return candidates_frame(self.record.candidates)
