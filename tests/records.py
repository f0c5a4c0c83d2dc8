"""Test helpers: analysis records from the few fields a test cares about, and plans from them."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from prefixplan.analysis.record import AnalysisRecord
from prefixplan.warming.plan import WarmPlan, WarmSource, plan_warm
from prefixplan.warming.source import source_from_record


def analysis_record(data: Mapping[str, Any]) -> AnalysisRecord:
    """A typed record from a partial JSON record (schema version and a zero summary filled in)."""
    full = {"schema_version": 1, "summary": {"requests": 0, "prompt_tokens": 0, "reusable_tokens": 0}, **data}
    return AnalysisRecord.from_json(full)


def plan_from_record(
    record: Mapping[str, Any] | AnalysisRecord | WarmSource,
    top: int | None = None,
    *,
    token_lookup: Callable[[str], Sequence[int] | None] | None = None,
    **kwargs: Any,
) -> WarmPlan:
    """:func:`prefixplan.warming.plan.plan_warm` over a record (or a ready source)."""
    if isinstance(record, WarmSource):
        return plan_warm(record, top, **kwargs)
    rec = record if isinstance(record, AnalysisRecord) else analysis_record(record)
    return plan_warm(source_from_record(rec, token_lookup), top, **kwargs)
