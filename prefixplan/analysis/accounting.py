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


def chunk_counts(store: RowStore) -> dict[str, int]:
    """Distinct requests per document chunk hash (the what-if's popularity order)."""
    from prefixplan.analysis.rag import chunk_request_counts

    uniq, requests, _ = chunk_request_counts(store)
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


def kind_accounting(store: RowStore, reused: np.ndarray, recurring: set[int]) -> dict[str, Any]:
    """Prompt tokens and reused tokens per segment kind (recurring chunks counted as rag)."""
    c = store.columns()
    acc: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    if len(store):
        owner = np.repeat(np.arange(len(store)), np.diff(c["seg_off"]))
        scale = c["scale"][owner]
        upto = reused[owner] // np.maximum(scale, 1)  # reused tokens in units of the row
        start, end = c["seg_start"], c["seg_end"]
        tokens = (end - start) * scale
        reuse = np.maximum(0, np.minimum(end, upto) - start) * scale
        kinds = c["seg_kind"].astype(np.int64)
        n_kinds = len(SEGMENT_KINDS)
        present = np.bincount(kinds, minlength=n_kinds)
        per_tok = np.bincount(kinds, weights=tokens, minlength=n_kinds)
        per_reuse = np.bincount(kinds, weights=reuse, minlength=n_kinds)
        for k, name in enumerate(SEGMENT_KINDS):
            if present[k]:
                group = _KIND_GROUP.get(name, name)
                acc[group][0] += int(per_tok[k])
                acc[group][1] += int(per_reuse[k])
        hashes = c["chunk_hash"]
        if hashes.shape[0] and recurring:
            cowner = np.repeat(np.arange(len(store)), np.diff(c["chunk_off"]))
            rec = np.isin(hashes, np.fromiter(recurring, dtype=np.uint64, count=len(recurring)))
            cscale = c["scale"][cowner][rec]
            cs, ce = c["chunk_start"][rec], c["chunk_end"][rec]
            cup = reused[cowner][rec] // np.maximum(cscale, 1)
            n = int(((ce - cs) * cscale).sum())
            r = int((np.maximum(0, np.minimum(ce, cup) - cs) * cscale).sum())
            acc["rag"][0] += n
            acc["rag"][1] += r
            acc["user"][0] -= n
            acc["user"][1] -= r
    return {k: {"tokens": v[0], "reused": v[1]} for k, v in sorted(acc.items())}
