"""Run a warm plan on a fleet: pre-flight, warm-up, probe, verify, fleet verdict, store records.

Per replica (replicas run in parallel, up to ``concurrency``; one replica's items run one after
another so TTFTs are not contended and counter deltas stay attributable):

1. pre-flight: detect the engine, read model and block size, tokenize the fixed probe text
   through ``/tokenize`` and compare it with the analysis tokenizer; replicas must agree on the
   model and the tokenizer.
2. warm-up: the prefix's exact ids plus one extra token (so the whole block-aligned prefix
   becomes reusable despite the last-token rule), ``max_tokens`` 1, streamed: cold TTFT.
3. probe: prefix plus a short suffix, streamed: warm TTFT and ``cached_tokens``. Verified when
   ``cached_tokens >= floor(len/B)*B``; when the server does not report per-request cached
   tokens, a matching delta of the prefix-cache counters on an otherwise idle replica verifies;
   otherwise the result is ``unverified`` (never ``ok``).

How prefixes are sent (``via``): ``ids`` sends the exact token ids (vLLM ``/v1/completions``,
SGLang ``/generate``); ``chat`` sends the request the prefix comes from (a recipe's messages and
tools, or an analysis candidate's example request re-read from its log) with a question after it,
rendered by the server itself, warm-up and probe asking different questions. ``auto`` (default)
uses ids, and on a generic OpenAI-compatible server switches to chat for the rest of the run when
the server rejects a token-id prompt (HTTP 400/404/405/415/422/501) or counts it as other than
that many tokens.

A key is ``ready`` only when every replica verified it; ``partial`` when some did; ``failed``
otherwise. Each request is retried (bounded, exponential backoff) on refused connections,
timeouts and HTTP 5xx/429; a replica that stops answering fails its remaining items at once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from prefixplan.core.granularity import ENGINE_BLOCK_SIZES, aligned
from prefixplan.engines.base import EngineAdapter, EngineRequestError
from prefixplan.engines.endpoint import CacheCounters, Completion, Endpoint
from prefixplan.engines.retries import with_retries
from prefixplan.errors import ExitCode, UsageError
from prefixplan.warming.plan import WarmItem, WarmPlan
from prefixplan.warming.preflight import (
    Connector,
    Replica,
    default_connector,
    expected_probe_ids,
    fleet_agreement,
    preflight,
)
from prefixplan.warming.prompts import PROBE_QUESTION, WARM_QUESTION, PromptForm
from prefixplan.warming.results import ItemResult, KeyVerdict, WarmOptions, WarmReport


def warm_prompt(ids: Sequence[int]) -> list[int]:
    """The warm-up prompt: the prefix plus one extra token (its own last id, always valid), so
    every full block of the prefix is computed and cached despite the last-token rule."""
    return [*ids, ids[-1]]


def probe_prompt(ids: Sequence[int], suffix_tokens: int = 2) -> list[int]:
    """The verification probe: the prefix plus a short suffix of valid ids."""
    suffix = [ids[-1], ids[0], ids[min(1, len(ids) - 1)]][: max(1, suffix_tokens)]
    return [*ids, *suffix]


def _counters(adapter: EngineAdapter) -> CacheCounters | None:
    try:
        return adapter.cache_counters()
    except EngineRequestError:
        return None


ID_REJECT_STATUSES = (400, 404, 405, 415, 422, 501)
VIA_CHOICES = ("auto", "ids", "chat")


def _rejects_ids(err: EngineRequestError) -> bool:
    """An HTTP answer meaning "this server takes no token-id prompt here"."""
    return err.kind == "http" and err.status in ID_REJECT_STATUSES


class FormResolver:
    """``item -> (request form, why not)``, reading example requests from their logs once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cache: dict[int, tuple[PromptForm | None, str]] = {}

    def __call__(self, item: WarmItem) -> tuple[PromptForm | None, str]:
        if item.form is not None:
            return item.form, ""
        with self._lock:
            if item.rank not in self._cache:
                if item.example is None:
                    why = "the prefix has no request form (neither a recipe nor an example request in the analysis)"
                    self._cache[item.rank] = (None, why)
                else:
                    from prefixplan.warming.prompts import form_from_example

                    self._cache[item.rank] = form_from_example(item.example, item.parts)
            return self._cache[item.rank]


def impossible_evidence(cached: int | None, prompt_len: int | None, what: str) -> str | None:
    """Why a reported cached count cannot be true, or None. An engine never reuses a prompt's last
    token, so a request of ``n`` tokens has at most ``n - 1`` cached: a full (or larger) hit is a
    server that reports what it did not do."""
    if cached is None or prompt_len is None:
        return None
    if cached > max(prompt_len - 1, 0):
        return f"the {what} of {prompt_len} tokens reported {cached} cached (at most {max(prompt_len - 1, 0)} can be)"
    return None


def _block_size(rep: Replica, options: WarmOptions) -> tuple[int, str]:
    """The cache granularity a hit is counted in on ``rep`` and, when the replica did not report
    it, how it was assumed. vLLM and SGLang cache only whole blocks (pages), so for them a hit is
    expected at their default granularity; an unknown OpenAI-compatible server must report the
    whole prefix cached unless ``--block-size`` says otherwise."""
    if rep.info.block_size:
        return int(rep.info.block_size), ""
    if options.block_size:
        return int(options.block_size), ""
    default = ENGINE_BLOCK_SIZES.get(rep.info.engine or "")
    if default:
        return default, f", assumed: {rep.info.engine}'s default, not reported by the server; see --block-size"
    return 1, ""


def _warm_one(rep: Replica, item: WarmItem, options: WarmOptions, forms: FormResolver | None = None) -> ItemResult:
    block, assumed = _block_size(rep, options)
    expected = aligned(item.length, block)
    base = ItemResult(
        endpoint=rep.endpoint.label,
        rank=item.rank,
        key=item.record_key,
        version=item.version,
        tokens=item.length,
        expected_cached=expected,
        status="failed",
    )
    if rep.dead:
        return replace(base, status="failed", error=f"replica unreachable: {rep.dead}")
    if expected == 0:
        return replace(
            base, status="skipped", error=f"prefix shorter than one cache block ({item.length} < {block} tokens)"
        )
    adapter = rep.adapter
    assert adapter is not None
    forms = forms or FormResolver()

    def call(fn: Callable[[], Completion]) -> Completion:
        return with_retries(fn, retries=options.retries, backoff=options.backoff)

    warm: Completion | None = None
    warm_ids: list[int] = []
    via = "chat" if options.via == "chat" or rep.via_chat else "ids"
    fallback = ""
    if via == "ids":
        ids = list(item.token_ids)
        warm_ids = warm_prompt(ids)
        try:
            warm = call(lambda: adapter.complete_ids(warm_ids, max_tokens=1, stream=True, priority=options.priority))
        except EngineRequestError as err:
            if not (options.via == "auto" and rep.info.engine == "openai-compatible" and _rejects_ids(err)):
                if err.kind in ("refused", "timeout"):
                    rep.dead = err.reason
                return replace(base, status="failed", error=str(err))
            fallback = f"token-id prompt rejected ({_strip(str(err), rep.endpoint.label)})"
        else:
            if (
                options.via == "auto"
                and rep.info.engine == "openai-compatible"
                and warm.prompt_tokens is not None
                and warm.prompt_tokens != len(warm_ids)
            ):
                fallback = (
                    f"the server counted {warm.prompt_tokens} prompt tokens for a {len(warm_ids)}-id prompt "
                    "(it does not take token ids as ids)"
                )
        if fallback:
            rep.via_chat, rep.via_chat_reason = True, fallback
            via, warm = "chat", None
    if via == "chat":
        form, why = forms(item)
        if form is None:
            reason = f"{rep.via_chat_reason}; " if rep.via_chat_reason else ""
            return replace(
                base,
                status="failed",
                error=f"{rep.endpoint.label}: {reason}cannot warm through a chat request: {why}",
            )
        if not hasattr(adapter, "complete_chat"):
            return replace(
                base,
                status="failed",
                error=(
                    f"{rep.endpoint.label}: --via chat needs an OpenAI-compatible server ({adapter.engine} adapter)"
                ),
            )

        def send(question: str) -> Completion:
            if form.mode == "completion":
                return call(lambda: adapter.complete_text(form.prompt(question), max_tokens=1, stream=True))
            msgs, tools = form.chat(question)
            return call(lambda: adapter.complete_chat(msgs, tools=tools, max_tokens=1, stream=True))
    else:
        probe_ids = probe_prompt(list(item.token_ids), options.suffix_tokens)

        def send(question: str) -> Completion:
            return call(lambda: adapter.complete_ids(probe_ids, max_tokens=1, stream=True, priority=options.priority))

    try:
        if warm is None:
            warm = send(WARM_QUESTION)
        if not options.verify:
            return replace(
                base,
                status="unverified",
                cold_ttft_s=warm.ttft_s,
                via=via,
                cached_at_warmup=warm.cached_tokens,
                error="verification disabled (--no-verify)",
            )
        before = _counters(adapter) if warm.cached_tokens is None else None
        probe = send(PROBE_QUESTION)
    except EngineRequestError as err:
        if err.kind in ("refused", "timeout"):
            rep.dead = err.reason
        return replace(base, status="failed", via=via, error=str(err))
    probe_len = len(probe_ids) if via == "ids" else probe.prompt_tokens
    started = replace(
        base, cold_ttft_s=warm.ttft_s, warm_ttft_s=probe.ttft_s, cached_at_warmup=warm.cached_tokens, via=via
    )
    warm_len = len(warm_ids) if via == "ids" else warm.prompt_tokens
    impossible = impossible_evidence(warm.cached_tokens, warm_len, "warm-up") or impossible_evidence(
        probe.cached_tokens, probe_len, "probe"
    )
    if impossible:
        return replace(
            started,
            status="failed",
            cached_tokens=probe.cached_tokens,
            method="usage",
            error=f"{rep.endpoint.label}: impossible evidence, not a verification: {impossible}",
        )
    if probe.cached_tokens is not None:
        if probe.cached_tokens >= expected:
            return replace(started, status="verified", cached_tokens=probe.cached_tokens, method="usage")
        return replace(
            started,
            status="failed",
            cached_tokens=probe.cached_tokens,
            method="usage",
            error=(
                f"{rep.endpoint.label}: probe reported cached_tokens={probe.cached_tokens} < expected {expected} "
                f"(block size {block}{assumed}): the prefix is not resident"
                + (
                    " (the server's rendering of the chat request may differ from the analysis tokenizer's)"
                    if via == "chat"
                    else ""
                )
            ),
        )
    after = _counters(adapter)
    if before is None or after is None:
        return replace(
            started,
            status="unverified",
            error=(
                f"{rep.endpoint.label}: the server reports no per-request cached tokens and no prefix-cache counters "
                "(vLLM: --enable-prompt-tokens-details; SGLang: --enable-cache-report / --enable-metrics)"
            ),
        )
    hits = after.hits - before.hits
    queries = (after.queries - before.queries) if after.queries is not None and before.queries is not None else None
    idle = (
        before.running in (None, 0)
        and after.running in (None, 0)
        and queries is not None
        and probe_len is not None
        and int(queries) == probe_len
    )
    if not idle:
        return replace(
            started,
            status="unverified",
            error=(
                f"{rep.endpoint.label}: no per-request cached tokens and the replica is not idle "
                "(counter deltas include other traffic)"
            ),
        )
    if hits >= expected:
        return replace(started, status="verified", cached_tokens=int(hits), method="metrics")
    return replace(
        started,
        status="failed",
        cached_tokens=int(hits),
        method="metrics",
        error=(
            f"{rep.endpoint.label}: prefix-cache hit counter rose by {int(hits)} < expected {expected} "
            f"(block size {block}{assumed})"
        ),
    )


def run_warm(
    plan: WarmPlan,
    endpoints: Sequence[Endpoint],
    options: WarmOptions | None = None,
    *,
    connector: Connector | None = None,
    progress: Callable[[ItemResult], None] | None = None,
    stop: threading.Event | None = None,
) -> WarmReport:
    """Warm every item of ``plan`` on every endpoint and return the fleet report.

    When ``stop`` is set (keepalive's signal handler), prefixes not yet started are skipped.

    Raises:
        UsageError: no endpoints or an empty plan.
    """
    options = options or WarmOptions()
    if options.via not in VIA_CHOICES:
        raise UsageError(f"unknown --via {options.via!r}; choose one of {', '.join(VIA_CHOICES)}")
    connector = connector or default_connector
    if not endpoints:
        raise UsageError("no endpoint given", hint="pass --endpoint URL (repeatable) or --endpoints FILE")
    if not plan.items:
        reasons = "; ".join(f"rank {r}: {why}" for r, why in plan.skipped[:5])
        raise UsageError("nothing to warm" + (f" ({reasons})" if reasons else ""))
    t0 = time.perf_counter()
    started = time.time()
    expected, why = expected_probe_ids(plan.tokenizer)
    reps = [Replica(e) for e in endpoints]
    workers = max(1, min(options.concurrency, len(reps)))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(lambda r: preflight(r, options, connector, expected, why, plan.tokenizer), reps))
    fleet_agreement(reps)

    lock = threading.Lock()
    results: list[ItemResult] = []
    forms = FormResolver()

    def emit(res: ItemResult) -> None:
        with lock:
            results.append(res)
        if progress is not None:
            progress(res)

    def replica_job(rep: Replica) -> None:
        for item in plan.items:
            if stop is not None and stop.is_set():
                emit(
                    ItemResult(
                        endpoint=rep.endpoint.label,
                        rank=item.rank,
                        key=item.record_key,
                        version=item.version,
                        tokens=item.length,
                        expected_cached=0,
                        status="skipped",
                        error="stopped (SIGTERM/SIGINT)",
                    )
                )
                continue
            if rep.info.error is not None:
                emit(
                    ItemResult(
                        endpoint=rep.endpoint.label,
                        rank=item.rank,
                        key=item.record_key,
                        version=item.version,
                        tokens=item.length,
                        expected_cached=0,
                        status="failed",
                        error=rep.info.error,
                    )
                )
                continue
            emit(_warm_one(rep, item, options, forms))

    try:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            list(pool.map(replica_job, reps))
    finally:
        for rep in reps:
            if rep.adapter is not None:
                rep.adapter.close()

    order = {e.label: i for i, e in enumerate(endpoints)}
    results.sort(key=lambda r: (r.rank, order.get(r.endpoint, 0)))
    verdicts: list[KeyVerdict] = []
    for item in plan.items:
        mine = [r for r in results if r.rank == item.rank]
        ok = sum(r.status == "verified" for r in mine)
        status = "ready" if ok == len(reps) else "partial" if ok else "failed"
        errors = tuple(
            f"{r.endpoint}: {r.status}" + (f" ({_strip(r.error, r.endpoint)})" if r.error else "")
            for r in mine
            if r.status != "verified"
        )
        verdicts.append(KeyVerdict(item.rank, item.record_key, item.length, status, ok, len(reps), errors))
    if all(v.status == "ready" for v in verdicts):
        status, code = "ready", ExitCode.OK
    elif all(r.info.error is not None for r in reps):
        status, code = "failed", ExitCode.ENDPOINT
    else:
        status = "partial" if any(v.verified for v in verdicts) else "failed"
        code = ExitCode.FINDINGS
    return WarmReport(
        plan=plan,
        replicas=tuple(r.info for r in reps),
        results=tuple(results),
        keys=tuple(verdicts),
        status=status,
        exit_code=code,
        duration_s=time.perf_counter() - t0,
        started=started,
    )


def _strip(text: str, endpoint: str) -> str:
    prefix = f"{endpoint}: "
    return text[len(prefix) :] if text.startswith(prefix) else text
