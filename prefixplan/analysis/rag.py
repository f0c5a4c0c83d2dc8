"""RAG chunks: document paragraphs that recur across requests, and the documents-first what-if.

A *chunk* is a paragraph (split on blank lines, at least ``MIN_CHUNK_CHARS`` characters) of a
user or tool-result message. A chunk that appears in two or more requests is a *recurring
document chunk*. Prefix caching reuses it only when everything before it is identical too, so
a popular document pasted after a unique question is prefilled again on every request.

The what-if layout ("stable documents first") rewrites each message that holds recurring
chunks as: the recurring chunks, most popular first (ties by content hash), joined by blank
lines, then a blank line, then the message's other text in its original order. The same
function rewrites requests for the in-memory what-if and for ``examples/`` (the generator
writes the reordered log with it), so the prediction can be checked against a real run.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from typing import Any

import numpy as np

from prefixplan.analysis.earlier import EarlierRows
from prefixplan.analysis.rowstore import RowStore
from prefixplan.core.granularity import Granularity
from prefixplan.core.hashes import segment_hash
from prefixplan.core.progress import NO_PROGRESS, Progress
from prefixplan.core.types import Request
from prefixplan.errors import TokenizerError
from prefixplan.render import RenderSet
from prefixplan.render.spans import CHUNK_KINDS, MIN_CHUNK_CHARS, ROLE_KIND, split_paragraphs
from prefixplan.render.stream import SourceOptions
from prefixplan.trace.columns import RowColumns
from prefixplan.trace.executors import Executor
from prefixplan.trace.inprocess import Unrendered
from prefixplan.trace.storage.u64index import key_parts, sorted_lookup


def request_chunk_hashes(request: Request, min_chars: int = MIN_CHUNK_CHARS) -> set[str]:
    """Distinct chunk hashes of a request's user / tool-result messages (text level)."""
    out: set[str] = set()
    for msg in request.messages or ():
        if ROLE_KIND.get(str(msg.get("role"))) not in CHUNK_KINDS:
            continue
        content = msg.get("content")
        if isinstance(content, str) and len(content) >= min_chars:
            out.update(segment_hash(p) for _, _, p in split_paragraphs(content, min_chars))
    return out


class ChunkCounter:
    """Counts, per chunk hash, the number of distinct requests containing it."""

    def __init__(self, min_chars: int = MIN_CHUNK_CHARS) -> None:
        self.min_chars = min_chars
        self.counts: Counter[str] = Counter()

    def add(self, request: Request) -> None:
        self.counts.update(request_chunk_hashes(request, self.min_chars))

    def recurring(self, min_requests: int = 2) -> dict[str, int]:
        return {h: n for h, n in self.counts.items() if n >= min_requests}


def reorder_content(
    content: str, counts: Mapping[str, int], min_requests: int = 2, min_chars: int = MIN_CHUNK_CHARS
) -> str | None:
    """Documents-first rewrite of one message text, or None when nothing would move."""
    paras = split_paragraphs(content, min_chars)
    hashes = [segment_hash(p) for _, _, p in paras]  # each paragraph hashed once
    found = [(h, counts.get(h, 0)) for h in hashes]
    if not any(n >= min_requests for _, n in found):
        return None
    docs: dict[str, tuple[str, str, int]] = {}  # paragraph -> (paragraph, hash, requests), first seen
    rest: list[str] = []
    pos = 0
    for (a, b, p), (h, n) in zip(paras, found, strict=True):
        if n >= min_requests:
            docs.setdefault(p, (p, h, n))
            rest.append(content[pos:a])
            pos = b
    rest.append(content[pos:])
    remainder = "".join(rest).strip()
    ordered = sorted(docs.values(), key=lambda item: (-item[2], item[1]))
    new = "\n\n".join(p for p, _, _ in ordered)
    if remainder:
        new += "\n\n" + remainder
    return None if new == content else new


def reorder_request(
    request: Request,
    counts: Mapping[str, int],
    min_requests: int = 2,
    rewrite: Callable[[str], str | None] | None = None,
) -> Request | None:
    """The request in the documents-first layout, or None when unchanged. ``rewrite``: what
    :func:`reorder_content` gives for a message text (with these ``counts`` and ``min_requests``),
    when the caller remembers it."""
    if not request.messages:
        return None
    changed = False
    messages = []
    for msg in request.messages:
        content = msg.get("content")
        if ROLE_KIND.get(str(msg.get("role"))) in CHUNK_KINDS and isinstance(content, str):
            new = rewrite(content) if rewrite is not None else reorder_content(content, counts, min_requests)
            if new is not None:
                msg = {**msg, "content": new}
                changed = True
        messages.append(msg)
    return replace(request, messages=tuple(messages)) if changed else None


DROP_STEPS = 16
"""Steps of :func:`_row_steps` between hand-backs of the row store's mapped pages: a pass over a
million requests otherwise ends with all of the columns it read resident."""


def _row_steps(store: RowStore, rows_per_step: int) -> Iterator[tuple[int, int, int, int]]:
    """``(first row, end row, first chunk, end chunk)`` of each step of ``rows_per_step``
    requests that holds chunks (bounded temporaries: the chunk columns may be on disk)."""
    if rows_per_step < 1:
        raise ValueError(f"rows_per_step must be >= 1, got {rows_per_step}")
    off = store.columns()["chunk_off"]
    n = len(store)
    for step, lo in enumerate(range(0, n, rows_per_step), start=1):
        hi = min(n, lo + rows_per_step)
        a, b = int(off[lo]), int(off[hi])
        if a < b:
            yield lo, hi, a, b
        if not step % DROP_STEPS:
            store.drop_resident()  # the mapped columns' pages read so far (trace.storage.mapped)
    store.drop_resident()


CHUNKS_PER_PART = 1 << 20
"""Chunk occurrences counted per pass: more are counted in parts by the hashes' top bits, one
pass over the chunk columns each, so only one part's distinct chunks are ever held at once."""


def chunk_request_counts(
    store: RowStore, rows_per_step: int = 1 << 16, min_requests: int = 1
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(hashes, requests, tokens)`` of every distinct document chunk that at least
    ``min_requests`` requests hold: the distinct requests that hold it and its length in tokens
    (first occurrence), by hash; ``rows_per_step`` requests at a time (a request's chunks are all
    in one step, so its pairs are counted once), in parts of about :data:`CHUNKS_PER_PART`
    occurrences (a million-request log has a million distinct chunks, most in one request)."""
    if rows_per_step < 1:
        raise ValueError(f"rows_per_step must be >= 1, got {rows_per_step}")
    total = int(store.columns()["chunk_off"][-1]) if len(store) else 0
    bits = (max(1, -(-total // CHUNKS_PER_PART)) - 1).bit_length()
    found = [_count_part(store, rows_per_step, part, bits, min_requests) for part in range(1 << bits)]
    hashes, requests, tokens = (np.concatenate([f[i] for f in found]) for i in range(3))
    return hashes, requests, tokens


def _count_part(
    store: RowStore, rows_per_step: int, part: int, bits: int, min_requests: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`chunk_request_counts` of the chunks whose hash has top ``bits`` bits ``part``
    (ascending parts hold ascending hashes, so the parts concatenate sorted)."""
    uniq = np.zeros(0, dtype=np.uint64)
    requests = np.zeros(0, dtype=np.int64)
    tokens = np.zeros(0, dtype=np.int64)
    for lo, hi, a, b in _row_steps(store, rows_per_step):
        hashes = store.ragged("chunk_hash", a, b)
        owner = store.owners("chunk_off", lo, hi) - lo
        length = store.ragged("chunk_end", a, b).astype(np.int64) - store.ragged("chunk_start", a, b)
        if bits:
            mine = key_parts(hashes, bits) == part
            hashes, owner, length = hashes[mine], owner[mine], length[mine]
            if not hashes.shape[0]:
                continue
        step_uniq, first, inverse = np.unique(hashes, return_index=True, return_inverse=True)
        rows = hi - lo
        pairs = np.unique(inverse.astype(np.int64).reshape(-1) * rows + owner)  # (chunk, request) once each
        step_requests = np.bincount(pairs // rows, minlength=step_uniq.shape[0])
        merged = np.union1d(uniq, step_uniq)
        merged_requests = np.zeros(merged.shape[0], dtype=np.int64)
        merged_tokens = np.zeros(merged.shape[0], dtype=np.int64)
        old = np.searchsorted(merged, uniq)
        merged_requests[old] = requests
        merged_tokens[old] = tokens
        at = np.searchsorted(merged, step_uniq)
        merged_requests[at] += step_requests
        new = ~np.isin(step_uniq, uniq, assume_unique=True)  # first seen in this step: its length
        merged_tokens[at[new]] = length[first[new]]
        uniq, requests, tokens = merged, merged_requests, merged_tokens
    keep = requests >= min_requests
    return uniq[keep], requests[keep], tokens[keep]


def rag_report(
    store: RowStore, reused: np.ndarray, min_requests: int = 2, rows_per_step: int = 1 << 16
) -> tuple[dict[str, Any], np.ndarray]:
    """Recurring chunks, how many tokens of them are prefilled again in the current layout, and
    the 20 costliest (the ``rag`` section of the record, before the what-if); and the recurring
    chunk hashes (sorted uint64). ``reused``: reusable tokens of each request, input order."""
    uniq, requests, tokens = chunk_request_counts(store, rows_per_step, min_requests=max(1, min_requests))
    recurring = uniq  # only the recurring ones are counted: sorted
    out: dict[str, Any] = {"recurring_chunks": int(uniq.shape[0]), "occurrences": int(requests.sum())}
    if not uniq.shape[0]:
        return {**out, "prefill_tokens_now": 0, "top": []}, recurring
    scale = store.columns()["scale"]
    per_chunk = np.zeros(uniq.shape[0], dtype=np.int64)
    for lo, hi, a, b in _row_steps(store, rows_per_step):
        owner = store.owners("chunk_off", lo, hi)
        idx, rec = sorted_lookup(uniq, store.ragged("chunk_hash", a, b))
        if not rec.any():
            continue
        units = scale[owner]
        start = store.ragged("chunk_start", a, b).astype(np.int64)
        end = store.ragged("chunk_end", a, b).astype(np.int64)
        prefilled = np.maximum(0, end - np.maximum(start, reused[owner] // np.maximum(units, 1)))
        per_chunk += np.bincount(idx[rec], weights=prefilled[rec], minlength=uniq.shape[0]).astype(np.int64)
    # costliest first, ties by hash (the hex form sorts as the number does)
    order = np.lexsort((uniq, -per_chunk))[:20]
    positions = _distinct_starts(store, uniq, order, rows_per_step)
    out["prefill_tokens_now"] = int(per_chunk.sum())
    out["top"] = [
        {
            "hash": f"{int(uniq[j]):016x}",
            "tokens": int(tokens[j]),
            "requests": int(requests[j]),
            "positions": positions[j],
            "prefilled_tokens": int(per_chunk[j]),
        }
        for j in order.tolist()
    ]
    return out, recurring


def _distinct_starts(store: RowStore, uniq: np.ndarray, chunks: np.ndarray, rows_per_step: int) -> dict[int, int]:
    """Distinct start offsets of each of ``chunks`` (indices into ``uniq``) over all requests:
    a second pass for the few reported, so no (chunk, start) pair is kept for the others (a
    million-request log has millions)."""
    if not chunks.shape[0]:
        return {}
    chunks = np.sort(chunks)  # uniq is sorted: so are their hashes
    wanted = uniq[chunks]
    seen: dict[int, set[int]] = {int(j): set() for j in chunks.tolist()}
    for _lo, _hi, a, b in _row_steps(store, rows_per_step):
        idx, found = sorted_lookup(wanted, store.ragged("chunk_hash", a, b))
        at = np.flatnonzero(found)
        if not at.shape[0]:
            continue
        start = store.ragged("chunk_start", a, b)[at]
        for j, st in zip(chunks[idx[at]].tolist(), start.tolist(), strict=True):
            seen[j].add(st)
    return {j: len(starts) for j, starts in seen.items()}


REWRITES_KEPT = 1024
"""Message texts whose documents-first rewrite :class:`DocumentsFirst` remembers, at most."""
REWRITE_CHARS_KEPT = 8_000_000
"""Characters (texts and their rewrites) that :class:`DocumentsFirst` remembers, at most."""


class DocumentsFirst:
    """The what-if rewrite: each request's recurring documents moved before its question
    (:func:`reorder_request`); ``moved`` counts the requests it rewrote. With ``reuse``, a request
    it leaves as it is comes back :class:`~prefixplan.trace.inprocess.Unrendered` (its first-pass
    row stands for it: :mod:`prefixplan.analysis.earlier`), except at the places (source, line)
    in ``render_again``. Picklable, so the files of a log can be rewritten where they are
    rendered (each copy counts its own)."""

    def __init__(
        self, counts: Mapping[str, int], reuse: bool = False, render_again: frozenset[tuple[str, int]] = frozenset()
    ) -> None:
        self.counts = dict(counts)
        self.reuse = reuse
        self.render_again = render_again
        self.moved = 0
        self._rewritten: dict[str, str | None] = {}
        self._rewritten_chars = 0

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k not in ("_rewritten", "_rewritten_chars")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, _rewritten={}, _rewritten_chars=0)  # a copy starts empty

    def _rewrite(self, content: str) -> str | None:
        """:func:`reorder_content` of ``content``, remembered for the latest texts (a
        conversation's earlier turns recur in its later requests): at most
        :data:`REWRITES_KEPT` of them and :data:`REWRITE_CHARS_KEPT` characters."""
        memo = self._rewritten
        try:
            return memo[content]
        except KeyError:
            pass
        new = reorder_content(content, self.counts)
        chars = len(content) + (len(new) if new is not None else 0)
        if chars > REWRITE_CHARS_KEPT:
            return new
        memo[content] = new
        self._rewritten_chars += chars
        while len(memo) > REWRITES_KEPT or self._rewritten_chars > REWRITE_CHARS_KEPT:
            old, old_new = next(iter(memo.items()))  # the earliest remembered
            del memo[old]
            self._rewritten_chars -= len(old) + (len(old_new) if old_new is not None else 0)
        return new

    def __call__(self, req: Request) -> Request | Unrendered:
        new = reorder_request(req, self.counts, rewrite=self._rewrite)
        if new is None:
            if self.reuse and (req.source, req.line_no) not in self.render_again:
                return Unrendered(req)
            return req
        self.moved += 1
        return new


def rag_whatif(
    source: SourceOptions,
    executor: Executor,
    renderers: RenderSet,
    counts: Mapping[str, int],
    granularity: Granularity,
    reused_now: int,
    progress: Progress = NO_PROGRESS,
    earlier: EarlierRows | None = None,
) -> dict[str, Any]:
    """Second pass: rewrite requests documents-first and measure the reuse on a fresh block
    trace (same granularity and replay order as the first pass), rendered like the first pass
    (in this process, local workers or Ray actors) with the first pass's renderers here. The
    renderers here leave the segment spans out (:meth:`RenderSet.without_spans`): the reusable
    blocks read from this trace follow from the ids alone (block keys, the last-token cap).
    With ``earlier`` (the first pass's rows), the requests the rewrite leaves as they are are not
    rendered again: their first-pass rows stand for them (:mod:`prefixplan.analysis.earlier`)."""
    from prefixplan.trace.blocks import TraceBuilder
    from prefixplan.trace.intake import Intake, IntakePlan

    builder = TraceBuilder(granularity, index_singletons=False)  # only counts are read
    plan = IntakePlan(
        source,
        executor,
        granularity.block_size,
        transform=DocumentsFirst(
            counts,
            reuse=earlier is not None and earlier.usable,
            render_again=earlier.render_again if earlier is not None else frozenset(),
        ),
        label="documents-first what-if (a second pass)",
    )
    intake = Intake(plan, progress, renderers=renderers)
    try:
        with renderers.without_spans():  # the counts read below depend on the ids alone
            for cols in intake.batches(columns=True):
                assert isinstance(cols, RowColumns)
                builder.add_columns(earlier.fill(cols) if earlier is not None else cols)
        trace = builder.finish()
    except TokenizerError:
        return {"whatif": None}
    reused = int((np.minimum(trace.known_blocks, trace.cap_blocks) * trace.block_tokens).sum())
    return {
        "whatif": {
            "layout": "documents-first",
            "requests_rewritten": intake.moved,
            "reusable_tokens": reused,
            "reusable_tokens_now": reused_now,
            "gain_tokens": reused - reused_now,
        }
    }
