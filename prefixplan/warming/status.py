"""``prefixplan status``: per replica, engine, model, prefix-cache hit rate and warmed keys.

Hit rate = Δ prefix-cache hits / Δ prefix-cache queries (tokens) from the engine's counters
(vLLM ``vllm:prefix_cache_hits`` / ``vllm:prefix_cache_queries``; SGLang
``sglang:cached_tokens_total`` / ``sglang:prompt_tokens_total``): since the server started, and
over a ``window`` (two readings ``window`` seconds apart). The verdict compares the window's rate
(or the since-start rate without a window) with the target.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from prefixplan.engines.base import EngineRequestError
from prefixplan.engines.endpoint import Endpoint
from prefixplan.errors import PrefixplanError


@dataclass(frozen=True, slots=True)
class KeySeen:
    """A recorded key on one replica: when it was last verified, and its last status."""

    key: str
    last_verified: str | None
    last_status: str | None
    last_run: str | None


@dataclass(frozen=True, slots=True)
class ReplicaStatus:
    endpoint: str
    engine: str | None = None
    model: str | None = None
    block_size: int | None = None
    hits: float | None = None
    queries: float | None = None
    hit_rate: float | None = None
    window_s: float = 0.0
    window_hits: float | None = None
    window_queries: float | None = None
    window_hit_rate: float | None = None
    target: float = 0.7
    verdict: str = "unknown"  # ok | below-target | no-traffic | no-counters | unreachable
    error: str | None = None
    keys: tuple[KeySeen, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        d = {f: getattr(self, f) for f in self.__dataclass_fields__}
        d["keys"] = [{f: getattr(k, f) for f in k.__dataclass_fields__} for k in self.keys]
        return d


def _rate(h: float | None, q: float | None) -> float | None:
    return h / q if h is not None and q else None


def keys_seen(endpoint: str, db: str | None = None) -> tuple[KeySeen, ...]:
    """Recorded keys of ``endpoint`` from the store's warm runs."""
    from prefixplan.store import open_store

    try:
        with open_store(db, create=False) as store:
            rows = [r for r in store.warm_runs() if r.get("endpoint") == endpoint]
    except PrefixplanError:
        return ()
    out: dict[str, dict[str, Any]] = {}
    for r in rows:  # oldest first
        k = out.setdefault(str(r["key"]), {"last_verified": None})
        k["last_status"] = r.get("status")
        k["last_run"] = r.get("created")
        if r.get("status") == "verified":
            k["last_verified"] = r.get("created")
    return tuple(KeySeen(key, v["last_verified"], v["last_status"], v["last_run"]) for key, v in sorted(out.items()))


def replica_status(
    endpoints: Sequence[Endpoint],
    *,
    engine: str = "auto",
    window_s: float = 0.0,
    target: float = 0.7,
    timeout: float = 10.0,
    db: str | None = None,
    sleep: Callable[[float], None] = time.sleep,
    connector: Callable[..., Any] | None = None,
) -> list[ReplicaStatus]:
    """Status of every endpoint (unreachable ones get verdict ``unreachable`` and the reason)."""
    from prefixplan.engines.detect import connect

    connector = connector or connect
    adapters: list[Any] = []
    first: list[Any] = []
    out: list[ReplicaStatus | None] = []
    for ep in endpoints:
        a = None
        try:
            a = connector(ep, engine=engine, timeout=timeout)
            info = a.server_info()
            c = a.cache_counters()
            adapters.append((a, info))
            first.append(c)
            out.append(None)
        except PrefixplanError as err:
            if a is not None:
                a.close()  # connected, then failed: its HTTP client is not used again
            adapters.append(None)
            first.append(None)
            msg = str(err)
            out.append(
                ReplicaStatus(
                    endpoint=ep.label, target=target, verdict="unreachable", error=msg, keys=keys_seen(ep.label, db)
                )
            )
    if window_s > 0 and any(a is not None for a in adapters):
        sleep(window_s)
    result: list[ReplicaStatus] = []
    for ep, pair, c0, done in zip(endpoints, adapters, first, out, strict=False):
        if done is not None:
            result.append(done)
            continue
        a, info = pair
        err_text: str | None = None
        try:
            c1 = a.cache_counters() if window_s > 0 else c0
        except EngineRequestError as err:
            c1, err_text = None, str(err)
        finally:
            a.close()
        hits = c1.hits if c1 else None
        queries = c1.queries if c1 else None
        wh = wq = None
        if window_s > 0 and c0 is not None and c1 is not None:
            wh = c1.hits - c0.hits
            wq = (c1.queries - c0.queries) if c1.queries is not None and c0.queries is not None else None
        rate = _rate(hits, queries)
        wrate = _rate(wh, wq)
        judged = wrate if window_s > 0 else rate
        judged_q = wq if window_s > 0 else queries
        if c1 is None:
            verdict = "no-counters"
        elif not judged_q:
            verdict = "no-traffic"
        else:
            verdict = "ok" if judged is not None and judged >= target else "below-target"
        result.append(
            ReplicaStatus(
                endpoint=ep.label,
                engine=info.engine,
                model=info.model,
                block_size=info.block_size,
                hits=hits,
                queries=queries,
                hit_rate=rate,
                window_s=window_s,
                window_hits=wh,
                window_queries=wq,
                window_hit_rate=wrate,
                target=target,
                verdict=verdict,
                error=err_text,
                keys=keys_seen(ep.label, db),
            )
        )
    return result
