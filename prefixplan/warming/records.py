"""What a warm run leaves in the store: one ``warm_runs`` row per (replica, prefix)."""

from __future__ import annotations

from prefixplan.warming.results import WarmReport


def record_report(report: WarmReport, db: str | None = None) -> int:
    """Write one ``warm_runs`` row per (replica, prefix) into the store; return the row count.

    The only place the warm code writes to the store. Rows carry the fleet verdict of the key
    in ``data``; API keys are never part of a report, so never of a row.
    """
    from prefixplan.store import iso, open_store

    verdict = {v.rank: v.status for v in report.keys}
    rows = 0
    with open_store(db) as store:
        for r in report.results:
            store.record_warm_run(
                endpoint=r.endpoint,
                key=r.key,
                version=r.version,
                tokens=r.tokens,
                cold_ttft=r.cold_ttft_s,
                warm_ttft=r.warm_ttft_s,
                cached_tokens=r.cached_tokens,
                status=r.status,
                error=r.error,
                rank=r.rank,
                expected_cached=r.expected_cached,
                method=r.method,
                cached_at_warmup=r.cached_at_warmup,
                fleet_status=verdict.get(r.rank),
                via=r.via,
                run_started=iso(report.started),
            )
            rows += 1
    return rows
