"""The analyze pipeline: requests -> exact tokens + spans -> radix tree -> candidates -> record.

:func:`analyze` streams the input once (plus a second pass for the RAG what-if when the input
can be read twice), keeps one compact radix tree and per-request span summaries (never the
token arrays of all requests), and returns an :class:`Analysis` whose ``record`` is the
versioned JSON contract documented in docs/analysis-record.md. Later stages that want to see
the same rendered stream (the simulation headline) pass ``sinks``: each receives every prompt
as it goes by, so the log is rendered once for all of them.
"""

from __future__ import annotations

import time as _time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from prefixplan import __version__
from prefixplan.analysis.breakers import Breaker, BreakerFinder
from prefixplan.analysis.candidates import Candidate, find_candidates
from prefixplan.analysis.inputs import InputAccounting, mismatch_reason, tokenizer_infos
from prefixplan.analysis.previews import Previews, RequestInfo, candidate_record
from prefixplan.analysis.radix import RadixTree
from prefixplan.analysis.rag import rag_report, rag_whatif, request_chunk_hashes
from prefixplan.analysis.record import AnalysisRecord, CandidateRecord, Summary, TokenizerInfo, candidates_frame
from prefixplan.core.granularity import engine_granularity, reusable_ids
from prefixplan.core.progress import NO_PROGRESS, Progress
from prefixplan.core.types import Prompt, Segment
from prefixplan.logs import LineErrors
from prefixplan.logs.dispatch import RECONSTRUCTED_FORMATS
from prefixplan.render.stream import RenderFailure, SourceOptions, iter_prompts, source_meter

PrefixSink = Callable[[Prompt], object]
"""Receives every rendered prompt during the single pass (e.g. the simulation headline)."""


@dataclass(frozen=True)
class AnalyzeOptions:
    """What ``prefixplan analyze`` can be told about the analysis itself (the input and its
    tokenizer are :class:`~prefixplan.render.stream.SourceOptions`)."""

    source: SourceOptions = field(default_factory=SourceOptions)
    engine: str = "vllm"
    block_size: int | None = None
    min_tokens: int = 32
    min_hits: int = 2
    top: int = 20
    min_tenants: int = 2
    show_user_text: bool = False
    rag_whatif: bool = True

    @property
    def granularity(self) -> int:
        """The cache block size the candidates are aligned to."""
        return engine_granularity(self.engine, self.block_size).block_size


@dataclass
class Analysis:
    """Result of :func:`analyze`: the typed record plus in-memory objects for later stages.

    ``ranked`` are the radix-level candidates (all of them, rank order); the record holds the
    top ones as :class:`~prefixplan.analysis.record.CandidateRecord`.
    """

    record: AnalysisRecord
    ranked: list[Candidate]
    breakers: list[Breaker]
    errors: LineErrors
    tree: RadixTree
    render_failures: list[RenderFailure]

    @property
    def candidates(self) -> tuple[CandidateRecord, ...]:
        """The recorded candidates in rank order (name, label, preview, counts, token ids)."""
        return self.record.candidates

    def to_json(self) -> dict[str, Any]:
        """The analysis record as ``prefixplan analyze --json`` writes it."""
        return self.record.to_json()

    def to_pandas(self) -> Any:
        """The candidates as a pandas DataFrame, one row each (needs ``prefixplan[pandas]``)."""
        return candidates_frame(self.record.candidates)


class _Accounting:
    """Per-request bookkeeping of the single pass."""

    def __init__(self, block: int, min_tenants: int) -> None:
        self.block = block
        self.tree = RadixTree()
        self.finder = BreakerFinder(min_tenants=min_tenants)
        self.infos: list[RequestInfo] = []
        self.previews = Previews()
        self.chunk_requests: Counter[str] = Counter()
        self.chunk_tokens: dict[str, int] = {}
        self.namespaces: Counter[str] = Counter()
        self.models: Counter[str] = Counter()
        self.formats: Counter[str] = Counter()
        self.tenants: set[str] = set()
        self.exact = True
        self.total = self.reused = self.hit_requests = 0
        self.logged_cached = self.logged_n = 0
        self.n_times = 0
        self.t_min: float | None = None
        self.t_max: float | None = None
        self.inputs = InputAccounting()

    def add(self, i: int, prompt: Prompt) -> None:
        req = prompt.request
        n = len(prompt)
        scale = prompt.token_scale
        tenant = req.tenant
        if tenant:
            self.tenants.add(tenant)
        match = self.tree.insert(
            prompt.tokens, req.namespace, request_index=i, tenant=tenant or f"anon:{i}", time=req.time
        )
        reused = reusable_ids(match, n, self.block, scale)
        self.inputs.add(prompt, reused)
        self.infos.append(RequestInfo(req.source, req.line_no, prompt.segments, prompt.chunks, n, reused, tenant))
        self.total += n * scale
        self.reused += reused * scale
        self.hit_requests += reused > 0
        self.exact &= prompt.exact and req.format not in RECONSTRUCTED_FORMATS
        self.namespaces[req.namespace] += 1
        self.models[req.model or "-"] += 1
        self.formats[req.format] += 1
        if req.time is not None:
            self.n_times += 1
            self.t_min = req.time if self.t_min is None else min(self.t_min, req.time)
            self.t_max = req.time if self.t_max is None else max(self.t_max, req.time)
        if req.logged_cached_tokens is not None:
            self.logged_cached += req.logged_cached_tokens
            self.logged_n += 1
        for chunk in prompt.chunks:
            self.chunk_tokens.setdefault(chunk.text_hash, chunk.end - chunk.start)
        self.chunk_requests.update(request_chunk_hashes(req))
        self.previews.remember(req, prompt.segments)
        self.finder.add(prompt)


def analyze(
    options: AnalyzeOptions,
    progress: Progress = NO_PROGRESS,
    *,
    sinks: Iterable[PrefixSink] = (),
) -> Analysis:
    """Run the analysis (module docstring); ``sinks`` see every rendered prompt in order;
    ``progress`` hears about each pass (reading and rendering, the documents-first what-if)."""
    started = _time.monotonic()
    source = options.source
    block = options.granularity
    errors = LineErrors()
    renderers = source.renderers()
    failures: list[RenderFailure] = []
    acc = _Accounting(block, options.min_tenants)
    sink_list = list(sinks)
    meter = source_meter(source)
    progress.begin("reading and rendering", meter.total_bytes if meter is not None else None)
    for i, prompt in enumerate(iter_prompts(source, errors, renderers, failures=failures, meter=meter)):
        acc.add(i, prompt)
        for sink in sink_list:
            sink(prompt)
        if i % 256 == 0:
            progress.update(i + 1, acc.total, meter.done() if meter is not None else None)
    n_requests = len(acc.infos)
    progress.update(n_requests, acc.total, meter.done() if meter is not None else None)
    progress.end()

    recurring = {h for h, c in acc.chunk_requests.items() if c >= 2}

    def segments_of(idx: int) -> Sequence[Segment]:
        info = acc.infos[idx]
        docs = [
            Segment("doc", c.start, c.end, c.text_hash, c.message_index)
            for c in info.chunks
            if c.text_hash in recurring
        ]
        if not docs:
            return info.segments
        return tuple(sorted(info.segments + tuple(docs), key=lambda s: (s.start, s.kind != "doc")))

    ranked = find_candidates(
        acc.tree,
        block_size=block,
        min_tokens=options.min_tokens,
        min_hits=options.min_hits,
        top=None,
        segments_of=segments_of,
    )
    tokenizers = tokenizer_infos(renderers)  # before the what-if pass renders the log again
    engine_ids, per_model = dict(renderers.engine_ids), acc.inputs.models_json(renderers)
    rag = rag_report(acc.infos, recurring, acc.chunk_requests, acc.chunk_tokens)
    if options.rag_whatif and recurring and source.rereadable:
        rag.update(rag_whatif(source, renderers, acc.chunk_requests, block, acc.reused, progress))
    breakers = acc.finder.results()
    primary = tokenizers[0] if tokenizers else TokenizerInfo("trace", "trace blocks", None, False)
    mismatch = mismatch_reason(tokenizers)
    exact = acc.exact and all(t.exact for t in tokenizers) and mismatch is None
    approx = [mismatch] if mismatch else []
    if not (acc.exact and all(t.exact for t in tokenizers)):
        approx.append(_approx_reason(tokenizers, acc.formats))
    summary = Summary(
        requests=n_requests,
        malformed_lines=errors.count,
        render_failures=len(failures),
        prompt_tokens=acc.total,
        reusable_tokens=acc.reused,
        hit_rate_tokens=acc.reused / acc.total if acc.total else 0.0,
        hit_rate_requests=acc.hit_requests / n_requests if n_requests else 0.0,
        shared_prefix_tokens=sum(c.marginal_tokens for c in ranked),
        candidates=len(ranked),
        namespaces=len(acc.namespaces),
        distinct_tenants=len(acc.tenants),
        exact=exact,
        approximate_reason="; ".join(approx) or None,
        logged_cached_tokens=acc.logged_cached if acc.logged_n else None,
        time_span_s=(acc.t_max - acc.t_min)
        if acc.n_times > 1 and acc.t_min is not None and acc.t_max is not None
        else None,
        tree_nodes=acc.tree.n_nodes,
        tree_arena_tokens=acc.tree.arena_tokens,
        elapsed_s=round(_time.monotonic() - started, 3),
    )
    shown = ranked[: options.top] if options.top else ranked
    candidates = tuple(
        candidate_record(
            c,
            acc.tree,
            acc.previews,
            acc.infos[c.request_index],
            min_tenants=options.min_tenants,
            show_user_text=options.show_user_text,
            fingerprint=primary.fingerprint,
        )
        for c in shown
    )
    record = AnalysisRecord(
        tool=f"prefixplan {__version__}",
        created=_time.strftime("%Y-%m-%dT%H:%M:%SZ", _time.gmtime()),
        inputs={
            "paths": list(source.display),
            "formats": dict(acc.formats),
            "models": dict(acc.models),
            "namespaces": dict(acc.namespaces),
            "files": acc.inputs.files_json(errors),
            "per_model": per_model,
            "engine_ids": engine_ids,
        },
        tokenizer=primary,
        tokenizers=tuple(tokenizers),
        granularity={
            "engine": options.engine if options.block_size is None else None,
            "block_size": block,
            "rule": "full blocks only; the last prompt token is never reused",
        },
        privacy={
            "min_tenants": options.min_tenants,
            "show_user_text": options.show_user_text,
            "rule": "token ids and text are withheld for candidates shared by fewer than min_tenants distinct users; "
            "user-authored text is never previewed unless show_user_text",
        },
        summary=summary,
        kinds=_kind_accounting(acc.infos, recurring),
        candidates=candidates,
        rag=rag,
        simulation=None,
        breakers=tuple(b.to_json() for b in breakers),
        errors={
            "count": errors.count,
            "by_reason": dict(errors.by_reason),
            "samples": [{"source": e.source, "line": e.line_no, "reason": e.reason} for e in errors.samples],
        },
    )
    return Analysis(record, ranked, breakers, errors, acc.tree, failures)


def _approx_reason(tokenizers: Sequence[TokenizerInfo], formats: Counter[str]) -> str:
    reasons = [t.label for t in tokenizers if not t.exact]
    if formats.get("anthropic"):
        reasons.append("Anthropic requests rendered with a non-Anthropic template")
    reasons += [why for fmt, why in RECONSTRUCTED_FORMATS.items() if formats.get(fmt)]
    if formats.get("mooncake"):
        reasons.append("Mooncake traces are block-level (hash ids)")
    return "; ".join(reasons) or "approximate rendering"


_KIND_GROUP = {"tool": "tools", "tool_result": "history", "user": "user", "assistant": "history"}


def _kind_accounting(infos: Sequence[RequestInfo], recurring: set[str]) -> dict[str, Any]:
    """Prompt tokens and reused tokens per segment kind (recurring chunks counted as rag)."""
    acc: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for info in infos:
        for seg in info.segments:
            kind = _KIND_GROUP.get(seg.kind, seg.kind)
            acc[kind][0] += seg.end - seg.start
            acc[kind][1] += max(0, min(seg.end, info.reused) - seg.start)
        for c in info.chunks:
            if c.text_hash in recurring:
                n = c.end - c.start
                r = max(0, min(c.end, info.reused) - c.start)
                acc["rag"][0] += n
                acc["rag"][1] += r
                acc["user"][0] -= n
                acc["user"][1] -= r
    return {k: {"tokens": v[0], "reused": v[1]} for k, v in sorted(acc.items())}
