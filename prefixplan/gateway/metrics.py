"""The gateway's Prometheus metrics (``GET /metrics``) and the per-key counters it flushes to the store.

Metrics (``key`` is ``name@vN``, ``-`` for requests without a key; ``replica`` the replica label):

=============================================  =========  ==========================================
name                                           type       labels
=============================================  =========  ==========================================
``prefixplan_gateway_requests_total``          counter    key, replica, code (HTTP status)
``prefixplan_gateway_prompt_tokens_total``     counter    key, replica
``prefixplan_gateway_cached_tokens_total``     counter    key, replica
``prefixplan_gateway_hit_rate``                gauge      key, replica (cached / prompt tokens so far)
``prefixplan_gateway_ttft_seconds``            histogram  key, replica (upstream TTFT: first byte)
``prefixplan_gateway_route_decisions_total``   counter    replica, reason (affinity, cache-match, ...)
``prefixplan_gateway_upstream_errors_total``   counter    replica, kind (refused, timeout, http_5xx, http_429, stream_cut)
``prefixplan_gateway_key_events_total``        counter    event (registered, conflict, not_found, expired, state_unavailable, invalid)
``prefixplan_gateway_keys_ready``              gauge      key (1 ready, 0 not)
``prefixplan_gateway_state_resets_total``      counter    (a lost key state found and healed)
``prefixplan_gateway_key_resident_blocks``     gauge      key, replica (of the key's full blocks, from
                                                          the KV events)
``prefixplan_gateway_key_evictions_total``     counter    key, replica (ready -> evicted)
``prefixplan_gateway_key_rewarms_total``       counter    key, replica (re-warms sent)
``prefixplan_gateway_cached_predicted_tokens_total``  counter  replica (keyed requests with a
                                                          prediction: the key's resident tokens)
``prefixplan_gateway_cached_reported_tokens_total``   counter  replica (the same requests: the
                                                          engine's ``cached_tokens``)
``prefixplan_gateway_cached_predictions_total``       counter  replica, outcome (equal, above:
                                                          reported more, below: reported less)
=============================================  =========  ==========================================

With KV events on (:mod:`prefixplan.gateway.events`) the exposition also has the streams'
own metrics (``prefixplan_kv_event_*``, ``prefixplan_kv_resident_blocks``,
:mod:`prefixplan.residency.metrics`), per replica.

``key`` is a version's label: ``name@vN`` for locked keys and on an open gateway, ``tenant/name@vN``
for a tenant's keys, so the exposition names tenants and their keys; put ``/metrics`` behind a
token (``--metrics-token-env``) where clients can reach the gateway's port.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from typing import Any

from prefixplan.store.gateway_tables import KeyStats

UNKEYED = "-"


class GatewayMetrics:
    """One registry per gateway app (tests may build several in one process)."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "prefixplan_gateway_requests", "Requests answered", ["key", "replica", "code"], registry=r
        )
        self.prompt = Counter("prefixplan_gateway_prompt_tokens", "Prompt tokens", ["key", "replica"], registry=r)
        self.cached = Counter(
            "prefixplan_gateway_cached_tokens", "Cached prompt tokens reported", ["key", "replica"], registry=r
        )
        self.hit_rate = Gauge(
            "prefixplan_gateway_hit_rate", "Cached over prompt tokens so far", ["key", "replica"], registry=r
        )
        self.ttft = Histogram(
            "prefixplan_gateway_ttft_seconds",
            "Time to the first upstream byte",
            ["key", "replica"],
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=r,
        )
        self.decisions = Counter(
            "prefixplan_gateway_route_decisions", "Routing decisions", ["replica", "reason"], registry=r
        )
        self.upstream_errors = Counter(
            "prefixplan_gateway_upstream_errors", "Upstream failures", ["replica", "kind"], registry=r
        )
        self.key_events = Counter("prefixplan_gateway_key_events", "prefix_key outcomes", ["event"], registry=r)
        self.keys_ready = Gauge("prefixplan_gateway_keys_ready", "1 when the key is ready", ["key"], registry=r)
        self.state_resets = Counter(
            "prefixplan_gateway_state_resets", "Key states found lost (wiped or replaced) and healed", registry=r
        )
        self.predicted = Counter(
            "prefixplan_gateway_cached_predicted_tokens",
            "Cached tokens predicted from the KV events (keyed requests: the key's resident prefix)",
            ["replica"],
            registry=r,
        )
        self.reported = Counter(
            "prefixplan_gateway_cached_reported_tokens",
            "Cached tokens the engine reported, for the requests with a prediction",
            ["replica"],
            registry=r,
        )
        self.predictions = Counter(
            "prefixplan_gateway_cached_predictions",
            "Requests with a prediction, by how the engine's cached_tokens compared",
            ["replica", "outcome"],
            registry=r,
        )
        self._totals: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
        self._pending: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0, 0, 0, 0, 0.0, 0])
        self._lock = threading.Lock()

    def observe(
        self,
        key: str | None,
        replica: str,
        code: int,
        prompt_tokens: int | None,
        cached_tokens: int | None,
        ttft_s: float | None,
    ) -> None:
        """Count one answered request."""
        k = key or UNKEYED
        self.requests.labels(k, replica, str(code)).inc()
        with self._lock:
            pend = self._pending[(k, replica)]
            pend[0] += 1
            if code >= 400:
                pend[1] += 1
            if prompt_tokens:
                pend[2] += prompt_tokens
                pend[3] += cached_tokens or 0
                tot = self._totals[(k, replica)]
                tot[0] += prompt_tokens
                tot[1] += cached_tokens or 0
                rate = tot[1] / tot[0]
            else:
                rate = None
            if ttft_s is not None:
                pend[4] += ttft_s
                pend[5] += 1
        if prompt_tokens:
            self.prompt.labels(k, replica).inc(prompt_tokens)
            self.cached.labels(k, replica).inc(cached_tokens or 0)
            self.hit_rate.labels(k, replica).set(rate or 0.0)
        if ttft_s is not None:
            self.ttft.labels(k, replica).observe(ttft_s)

    def follow(self, events: Any) -> None:
        """Expose ``events``' streams and key residency (:class:`prefixplan.gateway.events.KeyEvents`)."""
        if not events.enabled:
            return
        from prefixplan.residency.metrics import register_metrics

        register_metrics(self.registry, events.index)
        self.registry.register(_KeyCollector(events.keys))

    def prediction(self, replica: str, predicted: int, reported: int | None) -> None:
        """Count one request whose cached tokens were predicted from the KV events."""
        if reported is None:
            return
        self.predicted.labels(replica).inc(predicted)
        self.reported.labels(replica).inc(reported)
        outcome = "equal" if reported == predicted else ("above" if reported > predicted else "below")
        self.predictions.labels(replica, outcome).inc()

    def take_pending(self) -> list[KeyStats]:
        """The counts since the last call, as store rows (and reset)."""
        with self._lock:
            pending, self._pending = self._pending, defaultdict(lambda: [0, 0, 0, 0, 0.0, 0])
        return [
            KeyStats(k, rep, int(p[0]), int(p[1]), int(p[2]), int(p[3]), float(p[4]), int(p[5]))
            for (k, rep), p in sorted(pending.items())
        ]

    def render(self) -> tuple[bytes, str]:
        """The exposition text and its content type."""
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return generate_latest(self.registry), CONTENT_TYPE_LATEST

    def snapshot(self) -> dict[str, Any]:
        """Prompt and cached tokens per (key, replica) so far (tests, ``/v1/prefix_keys``)."""
        with self._lock:
            return {f"{k}|{r}": {"prompt_tokens": t[0], "cached_tokens": t[1]} for (k, r), t in self._totals.items()}


class _KeyCollector:
    """Per key and replica: resident blocks, evictions, re-warms (read when scraped)."""

    def __init__(self, keys: Any) -> None:
        self.keys = keys

    def collect(self) -> Any:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        blocks = GaugeMetricFamily(
            "prefixplan_gateway_key_resident_blocks", "Full blocks of the key resident", labels=["key", "replica"]
        )
        evictions = CounterMetricFamily(
            "prefixplan_gateway_key_evictions", "A key's blocks evicted (ready -> evicted)", labels=["key", "replica"]
        )
        rewarms = CounterMetricFamily("prefixplan_gateway_key_rewarms", "Re-warms sent", labels=["key", "replica"])
        for label in self.keys.labels():
            for replica, row in self.keys.view(label).items():
                blocks.add_metric([label, replica], row["resident_blocks"])
                evictions.add_metric([label, replica], row["evictions"])
                rewarms.add_metric([label, replica], row["rewarms"])
        yield from (blocks, evictions, rewarms)
