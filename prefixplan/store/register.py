"""Recording analyses in the SQLite store, with lineage names for the prefixes found.

For each ranked candidate that may be stored (not withheld by the privacy rule) and whose
label is ``system``, ``tools`` or ``system+tools``, the lineage rule
(:func:`prefixplan.keys.lineage.assign_lineage`, docs/keys.md) picks a stable name; the
candidate's exact tokens are registered as a version of that name (a new version when they
changed). The candidate's ``name`` and ``key`` (``name@vN``) are filled in the record. When
several candidates of one analysis fall into the same lineage (e.g. a system prompt with a
per-request timestamp), only the one with the most marginal reuse is registered; the others
get ``name`` but no ``key``.
"""

from __future__ import annotations

from typing import Any

from prefixplan import keys
from prefixplan.keys.lineage import assign_lineage, lineage_data

NAMED_LABELS = ("system", "tools", "system+tools")


def record_analysis(result: Any, *, db: str | None = None, record_path: str | None = None) -> int:
    """Store the run summary and its candidates (with lineage keys); returns the analysis id."""
    from prefixplan.store import open_store

    rec = result.record
    fingerprint = rec["tokenizer"].get("fingerprint") or ""
    with open_store(db) as store:
        existing = list(store.lineage_names())
        claimed: set[str] = set()
        for cand in sorted(rec["candidates"], key=lambda c: -c["marginal_tokens"]):
            if cand["withheld"] or cand["label"] not in NAMED_LABELS or cand["token_ids"] is None:
                continue
            tool_names = [p["text"] for p in cand["parts"] if p["kind"] == "tool" and p["text"]]
            name = assign_lineage(cand["label"], system_text=cand.get("system_head"), tool_names=tool_names, existing=existing)
            cand["name"] = name
            if name in claimed:
                continue
            claimed.add(name)
            ids = cand["token_ids"]
            version = store.record_version(
                name,
                content_hash=keys.content_hash([("tokenizer", fingerprint.encode()), ("tokens", keys.token_ids_to_bytes(ids))]),
                kind=cand["label"],
                source="analysis",
                token_hash=cand["token_hash"],
                token_count=len(ids),
                token_ids=ids,
                tokenizer_fingerprint=fingerprint,
                namespace=cand["namespace"],
                lineage=lineage_data(cand.get("system_head"), tool_names),
            )
            cand["key"] = f"{name}@v{version.version}"
            existing = list(store.lineage_names())
        return store.record_analysis(rec["summary"], rec["candidates"], rec["inputs"]["paths"], record_path)
