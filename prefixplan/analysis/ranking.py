"""The analysis's second half: rank the block trie's shared prefixes, label and preview them,
account tokens by kind, and assemble the typed record (:func:`rank_and_record`)."""

from __future__ import annotations

import time as _time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from prefixplan.analysis.accounting import approx_reason, chunk_counts, kind_accounting
from prefixplan.analysis.blocktree import BlockTree, count_tenants, rank_blocks
from prefixplan.analysis.breakers import Breaker
from prefixplan.analysis.candidates import Candidate
from prefixplan.analysis.inputs import files_json, mismatch_reason, models_json, tokenizer_infos
from prefixplan.analysis.options import Analysis, AnalyzeOptions
from prefixplan.analysis.previews import candidate_record
from prefixplan.analysis.rag import rag_report, rag_whatif
from prefixplan.analysis.record import (
    AnalysisRecord,
    ExampleRef,
    Summary,
    TokenizerInfo,
)
from prefixplan.analysis.representatives import representative_tokens, source_json
from prefixplan.analysis.textfacts import TextFacts
from prefixplan.core.memory import release_free_memory
from prefixplan.core.progress import Progress
from prefixplan.core.types import Segment
from prefixplan.logs import LineErrors
from prefixplan.render import RenderSet
from prefixplan.render.stream import RenderFailure
from prefixplan.trace.meta import errors_json, line_errors_json
from prefixplan.version import __version__

if TYPE_CHECKING:
    from prefixplan.analysis.first_pass import FirstPass


def _distinct(values: np.ndarray) -> int:
    """Distinct values of ``values``, which it sorts in place (pass a copy: no further
    temporaries)."""
    if not values.shape[0]:
        return 0
    values.sort()
    return 1 + int(np.count_nonzero(values[1:] != values[:-1]))


def _documents_first(
    options: AnalyzeOptions,
    first: FirstPass,
    renderers: RenderSet,
    failures: Sequence[RenderFailure],
    reused_now: int,
    progress: Progress,
) -> dict[str, Any]:
    """The documents-first what-if (a second pass), taking the first pass's rows for the
    requests it leaves as they are."""
    counts = chunk_counts(first.store)
    earlier = first.earlier_rows(failures)
    return rag_whatif(
        options.source, options.executor, renderers, counts, first.granularity, reused_now, progress, earlier
    )


def rank_and_record(
    options: AnalyzeOptions,
    first: FirstPass,
    errors: LineErrors,
    failures: Sequence[RenderFailure],
    renderers: RenderSet | None,
    facts: TextFacts | None,
    meta: Mapping[str, Any] | None,
    progress: Progress,
) -> Analysis:
    """Everything after the first pass: block counts, candidates, the record."""
    source = options.source
    store = first.store
    release_free_memory()  # what reading freed (a trace file's batches, parsed lines)
    trace = first.builder.finish()
    if facts is not None:
        first.release_keys()  # a trace file: no second pass
    release_free_memory()  # what building the block trace freed (key batches, the twice filter)

    def between_passes() -> None:
        """Hand back what the pass just done freed or read in (mapped columns: trace.storage.mapped)."""
        trace.drop_resident()
        store.drop_resident()
        release_free_memory()

    tree = BlockTree(trace)
    between_passes()
    n_requests = len(store)
    c = store.columns()
    # reusable tokens of each request with an infinite cache, in input order
    reused_rows = np.minimum(trace.known_blocks, trace.cap_blocks) * trace.block_tokens
    reused = np.zeros(n_requests, dtype=np.int64)
    reused[trace.order] = reused_rows
    del reused_rows
    total = int(c["prompt"].sum())
    reused_total = int(reused.sum())
    between_passes()
    rag, recurring = rag_report(store, reused)
    between_passes()

    def is_recurring(text_hash: str) -> bool:
        h = np.uint64(int(text_hash, 16))
        at = int(np.searchsorted(recurring, h))
        return at < recurring.shape[0] and recurring[at] == h

    def segments_of(row: int) -> Sequence[Segment]:
        i = int(trace.order[row])
        segs = store.segments(i)
        docs = [
            Segment("doc", ch.start, ch.end, ch.text_hash, ch.message_index)
            for ch in store.chunks(i)
            if is_recurring(ch.text_hash)
        ]
        if not docs:
            return segs
        return tuple(sorted(segs + tuple(docs), key=lambda s: (s.start, s.kind != "doc")))

    ranking = rank_blocks(
        tree,
        min_tokens=options.min_tokens,
        min_hits=options.min_hits,
        segments_of=segments_of,
        limit=options.top or None,
    )
    shown = ranking.candidates
    between_passes()

    counted = count_tenants(tree, shown, c["tenant"][trace.order])
    arena_tokens = tree.arena_tokens()
    del tree  # the per-block counts are done with; the headline replays the trace itself
    between_passes()
    shown = [replace(cand, tenants=counted[cand.node_id][0], tenants_capped=counted[cand.node_id][1]) for cand in shown]
    rag_whatif_json: dict[str, Any] | None
    if facts is None:
        assert renderers is not None
        tokenizers = tokenizer_infos(renderers)
        engine_ids = dict(renderers.engine_ids)
        encoded = renderers.encode_stats()  # the first pass's (the what-if renders again)
        spec_of = {m: spec for spec, models in renderers.models_by_spec.items() for m in models}
        engine_used = bool(renderers.engine_ids.get("used"))
        if options.rag_whatif and recurring.shape[0] and source.rereadable:
            rag.update(_documents_first(options, first, renderers, failures, reused_total, progress))
        first.release_keys()
        breakers: list[Any] = list(first.finder.results())
        previews = first.previews
        rag_whatif_json = rag.get("whatif")
    else:
        tokenizers = list(facts.tokenizers)
        engine_ids = dict(facts.engine_ids)
        encoded = dict(facts.encoded)
        spec_of = {m: t.spec for t in tokenizers for m in t.log_models}
        spec_of.update(facts.spec_of)
        engine_used = bool(engine_ids.get("used"))
        if facts.rag_whatif is not None:
            rag["whatif"] = facts.rag_whatif
        breakers = list(facts.breakers)
        previews = facts.previews
        rag_whatif_json = facts.rag_whatif
    primary = tokenizers[0] if tokenizers else TokenizerInfo("trace", "trace blocks", None, False)
    mismatch = mismatch_reason(tokenizers)
    rows_exact = bool(c["exact"].all()) if n_requests else True
    exact = rows_exact and all(t.exact for t in tokenizers) and mismatch is None
    approx = [mismatch] if mismatch else []
    format_counts = np.bincount(c["format"], minlength=len(store.formats.names))
    formats = Counter({store.formats.names[k]: int(v) for k, v in enumerate(format_counts)})
    if not (rows_exact and all(t.exact for t in tokenizers)):
        approx.append(approx_reason(tokenizers, formats))
    times = c["time"][c["has_time"]]
    cached = c["cached"]
    logged = cached >= 0
    tenants = c["tenant"]
    summary = Summary(
        requests=n_requests,
        malformed_lines=errors.count,
        render_failures=len(failures) if meta is None else int(meta.get("render_failures") or 0),
        prompt_tokens=total,
        reusable_tokens=reused_total,
        hit_rate_tokens=reused_total / total if total else 0.0,
        hit_rate_requests=float((reused > 0).sum()) / n_requests if n_requests else 0.0,
        shared_prefix_tokens=ranking.marginal_tokens,
        candidates=ranking.count,
        namespaces=len(store.namespaces.names),
        distinct_tenants=_distinct(tenants[tenants != 0]),
        exact=exact,
        approximate_reason="; ".join(approx) or None,
        logged_cached_tokens=int(cached[logged].sum()) if logged.any() else None,
        time_span_s=float(times.max() - times.min()) if times.shape[0] > 1 else None,
        tree_nodes=trace.n_distinct_blocks,
        tree_arena_tokens=arena_tokens,
        elapsed_s=0.0,
        encoded=dict(encoded),
    )

    def where(cand: Candidate) -> tuple[Sequence[Segment], ExampleRef]:
        i = int(trace.order[cand.request_index])
        cols = store.columns()
        return store.segments(i), ExampleRef(store.sources.names[int(cols["source"][i])], int(cols["line"][i]))

    # what the record needs of every request, before the per-request columns go (the
    # representatives may load a tokenizer: its peak should not sit on top of them)
    places = {cand.id: where(cand) for cand in shown}
    meta_inputs = meta.get("inputs") if meta is not None else None
    if isinstance(meta_inputs, Mapping):
        paths = [str(p) for p in meta_inputs.get("paths") or ()]
        files = list(meta_inputs.get("files") or files_json(store, errors))
    else:
        paths = list(source.display)
        files = files_json(store, errors)
    ns_counts = np.bincount(c["ns"], minlength=len(store.namespaces.names))
    model_counts = np.bincount(c["model"], minlength=len(store.models.names))
    per_model = models_json(store, reused, spec_of, engine_used)
    between_passes()
    kinds = kind_accounting(store, reused, recurring)
    namespaces, models = list(store.namespaces.names), list(store.models.names)
    del c, cached, tenants, times, logged, reused
    store.release()
    between_passes()
    rep_tokens = representative_tokens(
        source, trace, {k: ref for k, (_, ref) in places.items()}, shown, renderers, meta
    )
    between_passes()  # and what the tokenizer it may have loaded for a trace's log freed

    candidates = tuple(
        candidate_record(
            cand,
            previews,
            places[cand.id][0],
            rep_tokens.get(cand.id),
            places[cand.id][1],
            min_tenants=options.min_tenants,
            show_user_text=options.show_user_text,
            fingerprint=primary.fingerprint,
        )
        for cand in shown
    )
    breaker_json = tuple(b.to_json() if isinstance(b, Breaker) else dict(b) for b in breakers)
    record = AnalysisRecord(
        tool=f"prefixplan {__version__}",
        created=_time.strftime("%Y-%m-%dT%H:%M:%SZ", _time.gmtime()),
        inputs={
            "paths": paths,
            "formats": dict(formats),
            "models": {models[k]: int(v) for k, v in enumerate(model_counts)},
            "namespaces": {namespaces[k]: int(v) for k, v in enumerate(ns_counts)},
            "files": files,
            "per_model": per_model,
            "engine_ids": engine_ids,
        },
        tokenizer=primary,
        tokenizers=tuple(tokenizers),
        granularity={
            "engine": options.engine if options.block_size is None else None,
            "block_size": first.granularity.block_size,
            "rule": "full blocks only; the last prompt token is never reused",
        },
        privacy={
            "min_tenants": options.min_tenants,
            "show_user_text": options.show_user_text,
            "rule": "token ids and text are withheld for candidates shared by fewer than min_tenants distinct users; "
            "user-authored text is never previewed unless show_user_text",
        },
        summary=summary,
        kinds=kinds,
        candidates=candidates,
        rag=rag,
        simulation=None,
        breakers=breaker_json,
        errors=errors_json(errors),
    )
    analysis = Analysis(record, shown, [b for b in breakers if isinstance(b, Breaker)], errors, trace, list(failures))
    analysis.trace_meta = {
        "inputs": {"paths": paths, "files": files, "source": source_json(source)},
        "line_errors": line_errors_json(errors),
        "render_failures": summary.render_failures,
        "tokenizers": [t.to_json() for t in tokenizers],
        "text": TextFacts.to_meta(previews, breaker_json, rag_whatif_json, engine_ids, spec_of, encoded),
    }
    return analysis
