"""Recording analyses in the store, with lineage names for the prefixes found.

For each ranked candidate that may be stored (not withheld by the privacy rule) and whose
label is ``system``, ``tools`` or ``system+tools``, the lineage rule
(:func:`prefixplan.keys.lineage.assign_lineage`, docs/keys.md) picks a stable name and the
candidate is registered as a version of that name (a new version when its content changed).
The version's content hash is the one a recipe of the same parts has (system text and tool
schemas as ``analyze --emit-recipes`` writes them, ``CandidateRecord.content_hash``), so one name
never carries two kinds of hash and ``lock`` of an emitted recipe finds the same version; the
exact token ids and their token hash are stored with it for ``warm``. A candidate whose part
bytes were not kept gets a name but no key. The candidate's ``name`` and ``key`` (``name@vN``) are filled in the returned record.
When several candidates of one analysis fall into the same lineage (e.g. a system prompt with
a per-request timestamp), only the one with the most marginal reuse is registered; the others
get ``name`` but no ``key``.
"""

from __future__ import annotations

from dataclasses import replace

from prefixplan.analysis.record import AnalysisRecord, CandidateRecord
from prefixplan.keys.lineage import assign_lineage, lineage_data
from prefixplan.store.db import open_store

NAMED_LABELS = ("system", "tools", "system+tools")


def register_analysis(
    record: AnalysisRecord, *, db: str | None = None, record_path: str | None = None
) -> tuple[AnalysisRecord, int]:
    """Store the run summary and its candidates (with lineage keys).

    Returns:
        The record with ``name``/``key`` filled in, and the stored analysis id.
    """
    fingerprint = record.tokenizer.fingerprint or ""
    named: dict[int, CandidateRecord] = {}
    with open_store(db) as store, store.write():  # one transaction: all or nothing
        existing = list(store.lineage_names())
        claimed: set[str] = set()
        for cand in sorted(record.candidates, key=lambda c: -c.marginal_tokens):
            if cand.withheld or cand.label not in NAMED_LABELS or cand.token_ids is None:
                continue
            tool_names = cand.tool_names
            name = assign_lineage(cand.label, system_text=cand.system_head, tool_names=tool_names, existing=existing)
            if name in claimed or cand.content_hash is None:
                named[cand.rank] = replace(cand, name=name)
                continue
            claimed.add(name)
            ids = cand.token_ids
            version = store.record_version(
                name,
                content_hash=cand.content_hash,
                kind=cand.label,
                source="analysis",
                token_hash=cand.token_hash,
                token_count=len(ids),
                token_ids=ids,
                tokenizer_fingerprint=fingerprint,
                namespace=cand.namespace,
                lineage=lineage_data(cand.system_head, tool_names),
            )
            named[cand.rank] = replace(cand, name=name, key=f"{name}@v{version.version}")
            existing = list(store.lineage_names())
        updated = record.with_candidates([named.get(c.rank, c) for c in record.candidates])
        analysis_id = store.record_analysis(
            updated.summary.to_json(),
            [c.to_json() for c in updated.candidates],
            updated.inputs.get("paths") or [],
            record_path,
        )
    return updated, analysis_id
