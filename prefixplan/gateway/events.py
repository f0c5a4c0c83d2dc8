"""The gateway's side of the engines' KV events: a subscriber per replica that publishes them,
key residency kept true by them, bounded re-warming, and what ``/v1/prefix_keys`` and
``/metrics`` show of it.

Replicas get an event source in the endpoints file (``kv_events:`` per replica, the engine's own
``--kv-events-config`` endpoints, :func:`event_sources`). A replica without one keeps the
gateway's earlier rule: a key is routable there once the warm's probe verified it, and its status
says ``kv_events: off`` (the mirror of content sent is what routing knows of it).

Threads: the subscriber applies batches on its own thread; :class:`~prefixplan.gateway.keyresidency.KeyResidency`
decides ``ready``/``evicted`` there, within the batch, and the decision is handed to the event
loop (``call_soon_threadsafe``), which updates the router's ready sets and the re-warm schedule.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from prefixplan.errors import InputError, UsageError
from prefixplan.gateway.keyresidency import EVICTED, READY, KeyResidency
from prefixplan.gateway.rewarm import RewarmConfig, RewarmSchedule
from prefixplan.residency.index import EVENTS_OFF, ResidencyIndex
from prefixplan.residency.subscriber import EventSource, KvEventSubscriber, source_for_engine

if TYPE_CHECKING:  # pragma: no cover
    from prefixplan.engines.endpoint import Endpoint
    from prefixplan.gateway.state import KeyVersion
    from prefixplan.gateway.warm import Warmer, WarmOutcome

log = logging.getLogger("prefixplan.gateway")


def event_sources(path: str, endpoints: Sequence[Endpoint], model: str | None = None) -> tuple[EventSource, ...]:
    """The KV event sources of an endpoints file's replicas: per replica, ``kv_events`` with
    ``endpoint`` and optionally ``replay_endpoint``, ``topic``, ``model`` (the served model name;
    default ``model``), ``host`` (where a wildcard endpoint is reached; default the URL's host),
    exactly as given to the engine's ``--kv-events-config``; or ``kv_events: auto``: asked of the
    replica (vLLM's ``GET /kv_event_sources``, data-parallel rank 0), none when it publishes none.

    Raises:
        InputError: a ``kv_events`` entry without ``endpoint``, or not a mapping.
    """
    from urllib.parse import urlparse

    from prefixplan.core import yamlsafe

    with open(path, encoding="utf-8") as f:
        data = yamlsafe.load(f.read())
    replicas = data.get("replicas") if isinstance(data, dict) else data
    by_url = {e.url.rstrip("/"): e for e in endpoints}
    out = []
    for i, r in enumerate(replicas or ()):
        if not isinstance(r, dict) or not r.get("kv_events"):
            continue
        ev = r["kv_events"]
        ep = by_url.get(str(r.get("url", "")).rstrip("/"))
        if ev == "auto" and ep is not None:
            ev = discover(ep)
            if ev is None:
                continue
        if not isinstance(ev, dict) or not ev.get("endpoint"):
            raise InputError(f"{path}: replicas[{i}].kv_events needs an endpoint (the engine's kv-events endpoint)")
        if ep is None:
            continue
        host = str(ev.get("host") or urlparse(ep.url).hostname or "127.0.0.1")
        out.append(
            source_for_engine(
                ep.label,
                str(ev["endpoint"]),
                host=host,
                replay_endpoint=str(ev["replay_endpoint"]) if ev.get("replay_endpoint") else None,
                topic=str(ev.get("topic") or ""),
                model=str(ev.get("model") or model) if (ev.get("model") or model) else None,
            )
        )
    return tuple(out)


def discover(endpoint: Endpoint, timeout: float = 10.0) -> dict[str, Any] | None:
    """The replica's own KV events configuration (vLLM ``GET /kv_event_sources``: per data-parallel
    rank; rank 0 is used), or None when it publishes none or does not say."""
    import httpx

    headers = dict(endpoint.headers)
    try:
        key = endpoint.api_key()
        if key:
            headers["Authorization"] = f"Bearer {key}"
        r = httpx.get(endpoint.base_url + "/kv_event_sources", headers=headers, timeout=timeout)
        got = r.json() if r.status_code == 200 else None
    except (httpx.HTTPError, ValueError, UsageError) as err:
        log.warning("%s: cannot ask for its KV event sources: %s", endpoint.label, err)
        return None
    conf = got.get("0") if isinstance(got, dict) else None
    if not isinstance(conf, dict) or not conf.get("enable_kv_cache_events") or not conf.get("endpoint"):
        log.info("%s publishes no KV events (GET /kv_event_sources): warm verification only", endpoint.label)
        return None
    return {k: conf.get(k) for k in ("endpoint", "replay_endpoint", "topic")}


class KeyEvents:
    """KV events for one gateway (module docstring). Built on the event loop; :meth:`start` opens
    the sockets."""

    def __init__(
        self,
        sources: Sequence[EventSource],
        labels: Sequence[str],
        *,
        rewarm: RewarmConfig | None = None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.sources = tuple(sources)
        self.labels = tuple(labels)
        self.index = ResidencyIndex()
        for label in labels:
            self.index.add_replica(label)
        self.subscriber = KvEventSubscriber(self.index, self.sources) if self.sources else None
        self.keys = KeyResidency(self.index, labels, clock=clock, on_change=self._from_thread)
        self.schedule = RewarmSchedule(rewarm or RewarmConfig(), monotonic)
        self.pinned: set[str] = set()
        self.versions: dict[str, KeyVersion] = {}
        self.loop: asyncio.AbstractEventLoop | None = None
        self.on_residency: Callable[[str], None] | None = None  # the ready view's reapply
        self.warmer: Warmer | None = None
        self.endpoints: dict[str, Endpoint] = {}
        self.rewarm_failures = 0
        self._inflight: set[tuple[str, str]] = set()
        self._asked: set[str] = set()

    @property
    def enabled(self) -> bool:
        return self.subscriber is not None

    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        if self.subscriber is not None:
            await asyncio.to_thread(self.subscriber.start)

    def stop(self) -> None:
        if self.subscriber is not None:
            self.subscriber.stop()

    # --- what the gateway tells it --------------------------------------------------------------

    def kept_warm(self, kv: KeyVersion) -> bool:
        """Whether ``kv`` is re-warmed when evicted (``--rewarm``)."""
        mode = self.schedule.config.keys
        return mode == "all" or (mode == "pinned" and kv.label in self.pinned)

    def warmed(self, kv: KeyVersion, outcome: WarmOutcome, salt: str | None = None) -> None:
        """A warm of ``kv`` finished: follow its exact prefix on the replicas with events (its
        length is known to the router on the others)."""
        self.versions[kv.label] = kv
        if outcome.prefix_ids:
            self.keys.track(kv.label, outcome.prefix_ids, outcome.block_sizes, salt=salt)

    def untracked(self, kv: KeyVersion) -> bool:
        """Whether ``kv`` should be warmed to learn its ids: events on, an active key this gateway
        never warmed (registered by another gateway, or before a restart). Once per key."""
        if not self.enabled or kv.status != "active" or self.keys.tracked(kv.label) or kv.label in self._asked:
            return False
        self._asked.add(kv.label)
        self.versions.setdefault(kv.label, kv)
        return True

    # --- transitions (subscriber thread -> event loop) ------------------------------------------

    def _from_thread(self, label: str, replica: str, state: str) -> None:
        loop = self.loop
        if loop is None or loop.is_closed():
            return
        with contextlib.suppress(RuntimeError):  # the loop is closing
            loop.call_soon_threadsafe(self.changed, label, replica, state)

    def changed(self, label: str, replica: str, state: str) -> None:
        """On the event loop: a key's residency changed on a replica."""
        log.info("key %s on %s: %s (KV events)", label, replica, state)
        if self.on_residency is not None:
            self.on_residency(label)
        kv = self.versions.get(label)
        if state == EVICTED and kv is not None and kv.status == "active" and self.kept_warm(kv):
            self.schedule.evicted(label, replica)
        elif state == READY:
            self.schedule.resident(label, replica)

    # --- re-warming -----------------------------------------------------------------------------

    def due(self) -> list[asyncio.Task[None]]:
        """Start the re-warms due now (within the limits); the tasks started."""
        tasks = []
        for label, replica in self.schedule.take():
            kv, ep = self.versions.get(label), self.endpoints.get(replica)
            if kv is None or ep is None or self.warmer is None or (label, replica) in self._inflight:
                continue
            self._inflight.add((label, replica))
            tasks.append(asyncio.create_task(self._rewarm(kv, ep), name=f"rewarm {label} on {replica}"))
        return tasks

    async def _rewarm(self, kv: KeyVersion, ep: Endpoint) -> None:
        assert self.warmer is not None
        try:
            self.keys.rewarmed(kv.label, ep.label)
            outcome = await self.warmer.run(kv, [ep])
            ok = outcome.states.get(ep.label) == "verified"
        except Exception as err:  # a background task: nothing may escape
            log.warning("re-warming %s on %s failed: %s: %s", kv.label, ep.label, type(err).__name__, err)
            ok = False
        finally:
            self._inflight.discard((kv.label, ep.label))
        if not ok:
            self.rewarm_failures += 1
            self.schedule.failed(kv.label, ep.label)
        log.info("re-warmed %s on %s: %s", kv.label, ep.label, "verified" if ok else "failed")

    async def run(self, tick_s: float = 0.5) -> None:
        """Send due re-warms every ``tick_s`` seconds (the gateway's background task)."""
        while True:
            await asyncio.sleep(tick_s)
            try:
                self.due()
            except Exception as err:  # the loop must outlive a bug in one round
                log.warning("re-warm round failed: %s: %s", type(err).__name__, err)

    # --- what clients and operators see ---------------------------------------------------------

    def replica_view(self, label: str, states: Mapping[str, str]) -> dict[str, dict[str, Any]]:
        """Per replica: the warm state, the KV events' state, and the key's residency."""
        out: dict[str, dict[str, Any]] = {}
        view = self.keys.view(label)
        for replica in self.labels:
            events = self.index.events_state(replica)
            row: dict[str, Any] = {"warm": states.get(replica), "kv_events": events}
            if replica in view:
                row.update(view[replica])
            elif events == EVENTS_OFF:
                row["residency"] = "no KV events: the warm's verification and the mirror of content sent"
            out[replica] = row
        return out
