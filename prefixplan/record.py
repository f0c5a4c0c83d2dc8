"""Recording analyses in the SQLite store (prefixplan.store)."""

from __future__ import annotations

from typing import Any


def record_analysis(result: Any, *, db: str | None = None, record_path: str | None = None) -> int | None:
    """Store the run summary and its candidates; returns the analysis id."""
    from prefixplan.store import open_store

    store = open_store(db)
    try:
        rec = result.record
        return store.record_analysis(rec["summary"], rec["candidates"], rec["inputs"]["paths"], record_path)
    finally:
        close = getattr(store, "close", None)
        if close:
            close()
