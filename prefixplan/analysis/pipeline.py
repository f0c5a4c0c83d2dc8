"""The analyze pipeline: logs -> requests -> exact tokens + spans -> radix tree -> candidates.

:func:`analyze` streams the log once (plus a second pass for the RAG what-if when the input
can be read twice), keeps one compact radix tree and per-request span summaries (never the
token arrays of all requests), and returns an :class:`Analysis` whose ``record`` is the
versioned JSON contract documented in docs/analysis-record.md.
"""

from __future__ import annotations

import time as _time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from prefixplan import __version__
from prefixplan.core import hashes as keys
from prefixplan.analysis.breakers import Breaker, BreakerFinder
from prefixplan.analysis.candidates import Candidate, find_candidates
from prefixplan.errors import TokenizerError, UsageError
from prefixplan.logs import LineErrors, ReadOptions, expand_paths, iter_requests
from prefixplan.analysis.radix import RadixTree
from prefixplan.core.granularity import engine_granularity, reusable_prefix
from prefixplan.analysis.rag import reorder_request, request_chunk_hashes
from prefixplan.core.probe import TOKENIZER_PROBE_TEXT
from prefixplan.render import RenderSet
from prefixplan.render.spans import message_text
from prefixplan.core.types import Chunk, Prompt, Request, Segment

SCHEMA_VERSION = 1
DEFAULT_CAPACITIES = (1e4, 1e5, 1e6, 1e7, 1e8)  # tokens, for the capacity curve in analyze
PREVIEW_CHARS = 80
LINEAGE_HEAD_CHARS = 2000


@dataclass(frozen=True)
class AnalyzeOptions:
    """Everything ``prefixplan analyze`` can be told (CLI flags map 1:1)."""

    paths: tuple[str, ...]
    read: ReadOptions = field(default_factory=ReadOptions)
    tokenizer: str | None = None
    tokenizer_map: dict[str, str] = field(default_factory=dict)
    chat_template: str | None = None
    template_kwargs: dict[str, Any] = field(default_factory=dict)
    engine: str = "vllm"
    block_size: int | None = None
    min_tokens: int = 32
    min_hits: int = 2
    top: int = 20
    min_tenants: int = 2
    show_user_text: bool = False
    rag_whatif: bool = True
    simulate: bool = True
    capacities: tuple[float, ...] = DEFAULT_CAPACITIES
    configured_capacity: float | None = None
    render_batch: int = 256

    @property
    def granularity(self) -> int:
        return engine_granularity(self.engine, self.block_size).block_size


@dataclass
class RenderFailure:
    source: str
    line_no: int
    reason: str


@dataclass
class Analysis:
    """Result of :func:`analyze`: the JSON record plus in-memory objects for later stages."""

    record: dict[str, Any]
    candidates: list[Candidate]
    breakers: list[Breaker]
    errors: LineErrors
    tree: RadixTree
    render_failures: list[RenderFailure]


def iter_prompts(
    options: AnalyzeOptions,
    errors: LineErrors,
    renderers: RenderSet | None = None,
    *,
    transform: Callable[[Request], Request] | None = None,
    failures: list[RenderFailure] | None = None,
) -> Iterator[Prompt]:
    """Read and render the log in order: the shared front half of analyze and simulate.

    Requests the renderer rejects are counted in ``errors`` (reason "render: ...") and listed
    in ``failures``; with ``options.read.strict`` they raise.
    """
    renderers = renderers or RenderSet(
        options.tokenizer, dict(options.tokenizer_map), options.chat_template, dict(options.template_kwargs)
    )
    paths = expand_paths(options.paths)
    requests: Iterator[Request] = iter_requests(paths, options.read, errors)
    if transform is not None:
        requests = (transform(r) for r in requests)

    def on_error(req: Request, exc: Exception) -> None:
        if options.read.strict:
            raise exc
        errors.add(req.source, req.line_no, "render: " + str(exc).replace(f"{req.source}:{req.line_no}: ", ""))
        if failures is not None:
            failures.append(RenderFailure(req.source, req.line_no, str(exc)))

    yield from renderers.render_stream(requests, batch=options.render_batch, on_error=on_error)


@dataclass(slots=True)
class _ReqInfo:
    source: str
    line_no: int
    segments: tuple[Segment, ...]
    chunks: tuple[Chunk, ...]
    length: int
    reused: int
    tenant: str | None


def analyze(options: AnalyzeOptions, progress: Callable[[int], None] | None = None) -> Analysis:
    """Run the analysis; see the module docstring."""
    started = _time.monotonic()
    block = options.granularity
    errors = LineErrors()
    renderers = RenderSet(options.tokenizer, dict(options.tokenizer_map), options.chat_template, dict(options.template_kwargs))
    failures: list[RenderFailure] = []
    tree = RadixTree()
    finder = BreakerFinder(min_tenants=options.min_tenants)
    infos: list[_ReqInfo] = []
    previews: dict[str, tuple[str, str, int]] = {}  # content hash -> (kind, preview, chars)
    heads: dict[str, str] = {}  # system content hash -> first LINEAGE_HEAD_CHARS chars (lineage naming)
    chunk_requests: Counter[str] = Counter()
    chunk_tokens: dict[str, int] = {}
    namespaces: Counter[str] = Counter()
    models: Counter[str] = Counter()
    formats: Counter[str] = Counter()
    tenants_seen: set[str] = set()
    exact_all = True
    total = reused_total = hit_requests = 0
    logged_cached = logged_n = 0
    times: list[float] = []

    def observed() -> Iterator[Prompt]:
        """The rendered stream with the analysis bookkeeping done on the way through, so the
        simulation (when on) drives one single pass over the log."""
        nonlocal total, reused_total, hit_requests, logged_cached, logged_n, exact_all
        for i, prompt in enumerate(iter_prompts(options, errors, renderers, failures=failures)):
            req = prompt.request
            n = len(prompt)
            scale = prompt.token_scale
            tenant = req.tenant
            if tenant:
                tenants_seen.add(tenant)
            match = tree.insert(prompt.tokens, req.namespace, request_index=i, tenant=tenant or f"anon:{i}", time=req.time)
            reused = _reusable(match, prompt, block)
            infos.append(_ReqInfo(req.source, req.line_no, prompt.segments, prompt.chunks, n, reused, tenant))
            total += n * scale
            reused_total += reused * scale
            hit_requests += reused > 0
            exact_all &= prompt.exact
            namespaces[req.namespace] += 1
            models[req.model or "-"] += 1
            formats[req.format] += 1
            if req.time is not None:
                times.append(req.time)
            if req.logged_cached_tokens is not None:
                logged_cached += req.logged_cached_tokens
                logged_n += 1
            for chunk in prompt.chunks:
                chunk_tokens.setdefault(chunk.text_hash, chunk.end - chunk.start)
            chunk_requests.update(request_chunk_hashes(req))
            _remember_previews(previews, heads, req, prompt.segments)
            finder.add(prompt)
            if progress is not None and i % 512 == 0:
                progress(i)
            yield prompt

    simulation = None
    if options.simulate:
        simulation = _simulate(observed(), options, block)
    else:
        for _ in observed():
            pass
    n_requests = len(infos)
    if progress is not None:
        progress(n_requests)

    recurring = {h for h, c in chunk_requests.items() if c >= 2}

    def segments_of(idx: int) -> Sequence[Segment]:
        info = infos[idx]
        docs = [Segment("doc", c.start, c.end, c.text_hash, c.message_index) for c in info.chunks if c.text_hash in recurring]
        if not docs:
            return info.segments
        return tuple(sorted(info.segments + tuple(docs), key=lambda s: (s.start, s.kind != "doc")))

    candidates = find_candidates(
        tree, block_size=block, min_tokens=options.min_tokens, min_hits=options.min_hits, top=None, segments_of=segments_of
    )
    kinds = _kind_accounting(infos, recurring)
    rag = _rag_report(infos, recurring, chunk_requests, chunk_tokens)
    if options.rag_whatif and recurring and "-" not in options.paths:
        rag.update(_rag_whatif(options, renderers, chunk_requests, block, reused_total))
    breakers = finder.results()

    fingerprints = {
        r.spec: {"spec": r.spec, "label": r.label, "fingerprint": r.fingerprint, "exact": r.exact,
                 "probe_ids": [int(t) for t in r.encode_text(TOKENIZER_PROBE_TEXT)[0]]}
        for r in renderers.loaded
    }
    primary = next(iter(fingerprints.values()), {"spec": "trace", "label": "trace blocks", "fingerprint": None, "exact": False})
    exact = exact_all and all(f["exact"] for f in fingerprints.values())
    granularity = {
        "engine": options.engine if options.block_size is None else None,
        "block_size": block,
        "rule": "full blocks only; the last prompt token is never reused",
    }
    summary = {
        "requests": n_requests,
        "malformed_lines": errors.count,
        "render_failures": len(failures),
        "prompt_tokens": total,
        "reusable_tokens": reused_total,
        "hit_rate_tokens": reused_total / total if total else 0.0,
        "hit_rate_requests": hit_requests / n_requests if n_requests else 0.0,
        "shared_prefix_tokens": sum(c.marginal_tokens for c in candidates),
        "candidates": len(candidates),
        "namespaces": len(namespaces),
        "distinct_tenants": len(tenants_seen),
        "exact": exact,
        "approximate_reason": None if exact else _approx_reason(fingerprints, formats),
        "logged_cached_tokens": logged_cached if logged_n else None,
        "time_span_s": (max(times) - min(times)) if len(times) > 1 else None,
        "tree_nodes": tree.n_nodes,
        "tree_arena_tokens": tree.arena_tokens,
        "elapsed_s": round(_time.monotonic() - started, 3),
    }
    cand_json = [
        _candidate_json(c, tree, previews, heads, infos, options, primary.get("fingerprint"))
        for c in (candidates[: options.top] if options.top else candidates)
    ]
    record = {
        "schema_version": SCHEMA_VERSION,
        "tool": f"prefixplan {__version__}",
        "created": _time.strftime("%Y-%m-%dT%H:%M:%SZ", _time.gmtime()),
        "inputs": {
            "paths": list(options.paths),
            "formats": dict(formats),
            "models": dict(models),
            "namespaces": dict(namespaces),
        },
        "tokenizer": primary,
        "tokenizers": list(fingerprints.values()),
        "granularity": granularity,
        "privacy": {
            "min_tenants": options.min_tenants,
            "show_user_text": options.show_user_text,
            "rule": "token ids and text are withheld for candidates shared by fewer than min_tenants distinct users; "
            "user-authored text is never previewed unless show_user_text",
        },
        "summary": summary,
        "kinds": kinds,
        "candidates": cand_json,
        "rag": rag,
        "simulation": simulation,
        "breakers": [b.to_json() for b in breakers],
        "errors": {
            "count": errors.count,
            "by_reason": dict(errors.by_reason),
            "samples": [{"source": e.source, "line": e.line_no, "reason": e.reason} for e in errors.samples],
        },
    }
    return Analysis(record, candidates, breakers, errors, tree, failures)


def _reusable(match: int, prompt: Prompt, block: int) -> int:
    """Reusable ids of ``prompt`` given its longest match: full blocks only, never the last
    token. Trace prompts count blocks of ``token_scale`` tokens, so the block is rescaled."""
    scale = prompt.token_scale
    return reusable_prefix(match, len(prompt), max(1, block // scale) if scale > 1 else block) if len(prompt) else 0


def _simulate(prompts: Iterator[Prompt], options: AnalyzeOptions, block: int) -> dict[str, Any]:
    """In-batch vs persistent cache and an LRU capacity curve at the analysis granularity
    (the headline numbers of ``prefixplan simulate``; per-request arrays left out)."""
    from prefixplan.simulate import SimConfig, simulate, to_json
    from prefixplan.simulate.logs import sim_requests

    capacities = tuple(sorted(set(options.capacities) | ({options.configured_capacity} if options.configured_capacity else set())))
    config = SimConfig(
        engine=options.engine,
        block_size=block,
        capacities=capacities,
        headline_capacity=options.configured_capacity,
        headline_unbounded=options.configured_capacity is None,
    )
    data = to_json(simulate(sim_requests(prompts), config))
    for run in data.get("runs", []):
        run.pop("cached_tokens_per_request", None)
    data["configured_capacity_tokens"] = options.configured_capacity
    return data


def _approx_reason(fingerprints: dict[str, dict[str, Any]], formats: Counter[str]) -> str:
    reasons = [f"{f['label']}" for f in fingerprints.values() if not f["exact"]]
    if formats.get("anthropic"):
        reasons.append("Anthropic requests rendered with a non-Anthropic template")
    if formats.get("mooncake"):
        reasons.append("Mooncake traces are block-level (hash ids)")
    return "; ".join(reasons) or "approximate rendering"


def _remember_previews(
    previews: dict[str, tuple[str, str, int]], heads: dict[str, str], req: Request, segments: Sequence[Segment]
) -> None:
    """Keep a short preview per distinct segment content (and the head of system texts for
    lineage naming), keyed by the segment's content hash: no text is hashed again here."""
    messages = req.messages or ()
    for seg in segments:
        if seg.kind == "template" or seg.text_hash in previews:
            continue
        if seg.kind == "tool":
            previews[seg.text_hash] = ("tool", seg.name or "tool", 0)
        elif seg.kind in ("system", "user", "assistant", "tool_result") and seg.index < len(messages):
            msg = messages[seg.index]
            text = message_text(msg.get("content"))
            previews[seg.text_hash] = (str(msg.get("role")), _short(text), len(text))
            if seg.kind == "system":
                heads[seg.text_hash] = text[:LINEAGE_HEAD_CHARS]


def _short(text: str) -> str:
    text = " ".join(text[: 4 * PREVIEW_CHARS].split())
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…"


def _candidate_json(
    c: Candidate,
    tree: RadixTree,
    previews: dict[str, tuple[str, str, int]],
    heads: dict[str, str],
    infos: list[_ReqInfo],
    options: AnalyzeOptions,
    fingerprint: str | None,
) -> dict[str, Any]:
    shared_enough = c.tenants >= options.min_tenants or c.tenants_capped
    tokens = tree.path_tokens(c.node_id)[: c.length] if shared_enough else None
    token_hash = keys.token_hash(fingerprint or "", tokens) if tokens is not None else None
    parts = []
    system_head = None
    if shared_enough:
        for kind, start, end, name in c.segments:
            if kind == "template":
                continue
            seg = next((s for s in infos[c.request_index].segments if s.start == start and s.kind == kind), None)
            prev = previews.get(seg.text_hash) if seg is not None else None
            if kind == "system" and seg is not None and system_head is None:
                system_head = heads.get(seg.text_hash)
            if kind == "tool":
                parts.append({"kind": kind, "tokens": end - start, "text": name})
            elif kind in ("system",) or (options.show_user_text and prev):
                parts.append({"kind": kind, "tokens": end - start, "text": prev[1] if prev else None})
            else:
                parts.append({"kind": kind, "tokens": end - start, "text": None})
    return {
        "rank": c.id + 1,
        "name": None,
        "key": None,
        "namespace": c.namespace,
        "model": c.namespace.split("|", 1)[0],
        "label": c.label,
        "kinds": list(c.kinds),
        "length": c.length,
        "raw_length": c.raw_length,
        "hits": c.hits,
        "tenants": c.tenants,
        "tenants_capped": c.tenants_capped,
        "first_seen": c.first_seen,
        "last_seen": c.last_seen,
        "parent": c.parent + 1 if c.parent is not None else None,  # rank of the nesting parent
        "reusable_tokens": c.reusable_tokens,
        "marginal_tokens": c.marginal_tokens,
        "withheld": not shared_enough,
        "token_ids": [int(t) for t in tokens] if tokens is not None else None,
        "token_hash": token_hash,
        "preview": _preview(parts) if shared_enough else None,
        "parts": parts,
        "system_head": system_head,
        "example": {"source": infos[c.request_index].source, "line": infos[c.request_index].line_no},
    }


def _preview(parts: list[dict[str, Any]]) -> str:
    """One line: each text part shortened, runs of tools summarised by count and first names."""
    out: list[str] = []
    tools: list[str] = []

    def flush_tools() -> None:
        if tools:
            names = ", ".join(tools[:3]) + (", …" if len(tools) > 3 else "")
            out.append(f"{len(tools)} tool{'s' if len(tools) > 1 else ''} ({names})")
            tools.clear()

    for p in parts:
        if p["kind"] == "tool":
            tools.append(str(p["text"]))
            continue
        flush_tools()
        if p["text"]:
            out.append(f"{p['kind']}: {p['text'][:60]}")
        else:
            out.append(f"[{p['kind']} text, {p['tokens']} tokens]")
    flush_tools()
    return " | ".join(out)


def _kind_accounting(infos: list[_ReqInfo], recurring: set[str]) -> dict[str, dict[str, int]]:
    """Prompt tokens and reused tokens per segment kind (recurring chunks counted as rag)."""
    acc: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for info in infos:
        for seg in info.segments:
            kind = {"tool": "tools", "tool_result": "history", "user": "user", "assistant": "history"}.get(seg.kind, seg.kind)
            n = seg.end - seg.start
            r = max(0, min(seg.end, info.reused) - seg.start)
            acc[kind][0] += n
            acc[kind][1] += r
        for c in info.chunks:
            if c.text_hash in recurring:
                n = c.end - c.start
                r = max(0, min(c.end, info.reused) - c.start)
                acc["rag"][0] += n
                acc["rag"][1] += r
                acc["user"][0] -= n
                acc["user"][1] -= r
    return {k: {"tokens": v[0], "reused": v[1]} for k, v in sorted(acc.items())}


def _rag_report(infos: list[_ReqInfo], recurring: set[str], chunk_requests: Counter[str], chunk_tokens: dict[str, int]) -> dict[str, Any]:
    positions: dict[str, set[int]] = defaultdict(set)
    prefilled: Counter[str] = Counter()
    for info in infos:
        for c in info.chunks:
            if c.text_hash in recurring:
                positions[c.text_hash].add(c.start)
                prefilled[c.text_hash] += max(0, c.end - max(c.start, info.reused))
    top = sorted(recurring, key=lambda h: -prefilled[h])[:20]
    return {
        "recurring_chunks": len(recurring),
        "occurrences": sum(chunk_requests[h] for h in recurring),
        "prefill_tokens_now": sum(prefilled.values()),
        "top": [
            {"hash": h, "tokens": chunk_tokens.get(h, 0), "requests": chunk_requests[h],
             "positions": len(positions[h]), "prefilled_tokens": prefilled[h]}
            for h in top
        ],
    }


def _rag_whatif(options: AnalyzeOptions, renderers: RenderSet, counts: Counter[str], block: int, reused_now: int) -> dict[str, Any]:
    """Second pass: rewrite requests documents-first and measure the reuse in a fresh tree."""
    tree = RadixTree()
    reused = 0
    moved = 0

    def transform(req: Request) -> Request:
        nonlocal moved
        new = reorder_request(req, counts)
        if new is None:
            return req
        moved += 1
        return new

    try:
        for i, prompt in enumerate(iter_prompts(options, LineErrors(), renderers, transform=transform)):
            match = tree.insert(prompt.tokens, prompt.request.namespace, request_index=i)
            reused += _reusable(match, prompt, block) * prompt.token_scale
    except TokenizerError:
        return {"whatif": None}
    return {
        "whatif": {
            "layout": "documents-first",
            "requests_rewritten": moved,
            "reusable_tokens": reused,
            "reusable_tokens_now": reused_now,
            "gain_tokens": reused - reused_now,
        }
    }
