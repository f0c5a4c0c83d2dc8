"""What a trace file records about the run that wrote it: its input (paths, formats), line errors
and the tokenizers its rows were rendered with, so a run reading the trace reports the same."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from prefixplan.errors import UsageError
from prefixplan.logs import LineErrors
from prefixplan.logs.lineerrors import LineErrorRecord
from prefixplan.render import RenderSet


def line_errors_json(errors: LineErrors) -> dict[str, Any]:
    return {
        "count": errors.count,
        "by_reason": dict(sorted(errors.by_reason.items())),
        "samples": [{"source": s.source, "line": s.line_no, "reason": s.reason} for s in errors.samples],
        "lines_read": errors.lines_read,
        "requests_read": errors.requests_read,
    }


def errors_json(errors: LineErrors) -> dict[str, Any]:
    """The malformed lines as a command's JSON reports them (``analyze``'s ``errors``,
    ``simulate``'s too): count, by reason, and the samples with file, line and reason."""
    full = line_errors_json(errors)
    return {k: full[k] for k in ("count", "by_reason", "samples")}


def line_errors_of(data: Any) -> LineErrors:
    """The :class:`LineErrors` a trace's metadata recorded (empty when absent)."""
    errors = LineErrors()
    if not isinstance(data, Mapping):
        return errors
    errors.count = int(data.get("count") or 0)
    errors.by_reason = {str(k): int(v) for k, v in (data.get("by_reason") or {}).items()}
    errors.samples = [
        LineErrorRecord(str(s.get("source")), int(s.get("line") or 0), str(s.get("reason")))
        for s in data.get("samples") or ()
        if isinstance(s, Mapping)
    ]
    errors.lines_read = int(data.get("lines_read") or 0)
    errors.requests_read = int(data.get("requests_read") or 0)
    return errors


def renderers_json(renderers: RenderSet) -> list[dict[str, Any]]:
    """The tokenizers that rendered the rows: spec, label, fingerprint, exactness, models."""
    return [
        {
            "spec": r.spec,
            "label": r.label,
            "fingerprint": r.fingerprint,
            "exact": r.exact,
            "log_models": sorted(renderers.models_by_spec.get(r.spec, ())),
        }
        for r in renderers.facts()
    ]


def fingerprint_for(tokenizers: Sequence[Mapping[str, Any]], model: str | None) -> str | None:
    """The fingerprint of the tokenizer that rendered ``model``'s rows (None when unknown)."""
    for t in tokenizers:
        if (model or "-") in (t.get("log_models") or ()):
            return str(t.get("fingerprint")) if t.get("fingerprint") else None
    return str(tokenizers[0].get("fingerprint")) if len(tokenizers) == 1 and tokenizers[0].get("fingerprint") else None


def check_block_size(meta: Mapping[str, Any], block_size: int, where: str) -> None:
    """Refuse a block size that cannot be cut from the trace's keys (a finer or unaligned one)."""
    have = int(meta.get("block_size") or 1)
    if block_size % have:
        raise UsageError(
            f"{where} has block keys every {have} tokens: blocks of {block_size} tokens cannot be cut from them",
            hint=f"use a block size that is a multiple of {have}, or write the trace again at the finer granularity",
        )
