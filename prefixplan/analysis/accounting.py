"""The record's token accounting that is not about candidates: prompt and reused tokens per
segment kind (recurring document chunks counted as rag), distinct requests per document chunk
(the documents-first what-if's popularity order), and the reason a record is approximate. All of
it is read from the row store's columns and the per-request reused tokens; nothing is rendered.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np

from prefixplan.analysis.record import TokenizerInfo
from prefixplan.analysis.rowstore import RowStore
from prefixplan.core.types import SEGMENT_KINDS
from prefixplan.logs.dispatch import RECONSTRUCTED_FORMATS
from prefixplan.trace.storage.u64index import sorted_lookup


def chunk_counts(store: RowStore, min_requests: int = 2) -> dict[str, int]:
    """Distinct requests per document chunk hash (the what-if's popularity order), for the
    chunks at least ``min_requests`` requests hold (the what-if moves no other)."""
    from prefixplan.analysis.rag import chunk_request_counts

    uniq, requests, _ = chunk_request_counts(store, min_requests=min_requests)
    return {f"{int(h):016x}": int(n) for h, n in zip(uniq.tolist(), requests.tolist(), strict=True)}


def approx_reason(tokenizers: Sequence[TokenizerInfo], formats: Counter[str]) -> str:
    """Why token counts are approximate: the inexact tokenizers, and the log formats whose
    requests are rebuilt rather than read as sent."""
    reasons = [t.label for t in tokenizers if not t.exact]
    if formats.get("anthropic"):
        reasons.append("Anthropic requests rendered with a non-Anthropic template")
    reasons += [why for fmt, why in RECONSTRUCTED_FORMATS.items() if formats.get(fmt)]
    if formats.get("mooncake"):
        reasons.append("Mooncake traces are block-level (hash ids)")
    return "; ".join(reasons) or "approximate rendering"


_KIND_GROUP = {"tool": "tools", "tool_result": "history", "user": "user", "assistant": "history"}


def kind_accounting(
    store: RowStore, reused: np.ndarray, recurring: np.ndarray, rows_per_step: int = 1 << 14
) -> dict[str, Any]:
    """Prompt tokens and reused tokens per segment kind (chunks whose hash is in ``recurring``
    counted as rag), ``rows_per_step`` requests at a time (bounded temporaries: a dozen
    arrays of 8 bytes per segment, about 30 MB for 16,384 requests of 18 segments)."""
    c = store.columns()
    n_kinds = len(SEGMENT_KINDS)
    per_tok = np.zeros(n_kinds)
    per_reuse = np.zeros(n_kinds)
    present = np.zeros(n_kinds, dtype=np.int64)
    rag = [0, 0]
    rag_from = np.zeros((2, n_kinds))  # recurring chunks' tokens by the kind of their segment
    wanted = np.sort(np.asarray(recurring, dtype=np.uint64)) if len(recurring) else None
    for lo in range(0, len(store), rows_per_step):
        hi = min(len(store), lo + rows_per_step)
        off = c["seg_off"][lo : hi + 1]
        owner = store.owners("seg_off", lo, hi)
        a, b = int(off[0]), int(off[-1])
        scale = c["scale"][owner]
        upto = reused[owner] // np.maximum(scale, 1)  # reused tokens in units of the row
        start = store.ragged("seg_start", a, b).astype(np.int64)
        end = store.ragged("seg_end", a, b).astype(np.int64)
        kinds = store.ragged("seg_kind", a, b).astype(np.int64)
        present += np.bincount(kinds, minlength=n_kinds)
        per_tok += np.bincount(kinds, weights=(end - start) * scale, minlength=n_kinds)
        per_reuse += np.bincount(kinds, weights=np.maximum(0, np.minimum(end, upto) - start) * scale, minlength=n_kinds)
        if wanted is None:
            continue
        coff = c["chunk_off"][lo : hi + 1]
        ca, cb = int(coff[0]), int(coff[-1])
        if ca == cb:
            continue
        cowner = store.owners("chunk_off", lo, hi)
        _, rec = sorted_lookup(wanted, store.ragged("chunk_hash", ca, cb))
        cscale = c["scale"][cowner][rec]
        cs = store.ragged("chunk_start", ca, cb)[rec].astype(np.int64)
        ce = store.ragged("chunk_end", ca, cb)[rec].astype(np.int64)
        cup = reused[cowner][rec] // np.maximum(cscale, 1)
        tok = (ce - cs) * cscale
        reu = np.maximum(0, np.minimum(ce, cup) - cs) * cscale
        rag[0] += int(tok.sum())
        rag[1] += int(reu.sum())
        # A chunk comes out of the segment holding it (a user message, a tool result, ...): find
        # it by (row, start) among the block's segments, sorted the same way.
        seg_key = (owner.astype(np.int64) << 32) | start
        order = np.argsort(seg_key, kind="stable")
        chunk_key = (cowner[rec].astype(np.int64) << 32) | cs
        at = np.searchsorted(seg_key[order], chunk_key, side="right") - 1
        seg = order[np.maximum(at, 0)]
        inside = (at >= 0) & (owner[seg] == cowner[rec]) & (start[seg] <= cs) & (ce <= end[seg])
        holder = np.where(inside, kinds[seg], SEGMENT_KINDS.index("user"))
        rag_from[0] += np.bincount(holder, weights=tok, minlength=n_kinds)
        rag_from[1] += np.bincount(holder, weights=reu, minlength=n_kinds)
    acc: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for k, name in enumerate(SEGMENT_KINDS):
        if present[k]:
            group = _KIND_GROUP.get(name, name)
            acc[group][0] += int(per_tok[k])
            acc[group][1] += int(per_reuse[k])
    if wanted is not None and len(store) and store.ragged_size("chunk_hash"):
        acc["rag"][0] += rag[0]
        acc["rag"][1] += rag[1]
        for k, name in enumerate(SEGMENT_KINDS):
            if rag_from[0, k] or rag_from[1, k]:
                group = _KIND_GROUP.get(name, name)
                acc[group][0] -= int(rag_from[0, k])
                acc[group][1] -= int(rag_from[1, k])
    return {k: {"tokens": v[0], "reused": v[1]} for k, v in sorted(acc.items())}
