"""Prometheus metrics of the KV event streams, read from the index when scraped.

``register_metrics(registry, index)`` adds them to a ``prometheus_client`` registry (the
gateway's ``GatewayMetrics.registry``):

==================================================  =========  ====================================
name                                                type       labels
==================================================  =========  ====================================
``prefixplan_kv_event_batches_received_total``      counter    replica, via (live, replay)
``prefixplan_kv_event_batches_applied_total``       counter    replica
``prefixplan_kv_events_applied_total``              counter    replica
``prefixplan_kv_event_gaps_total``                  counter    replica
``prefixplan_kv_event_gaps_healed_total``           counter    replica
``prefixplan_kv_event_resyncs_total``               counter    replica, reason
``prefixplan_kv_event_restarts_total``              counter    replica
``prefixplan_kv_event_duplicates_total``            counter    replica
``prefixplan_kv_event_errors_total``                counter    replica
``prefixplan_kv_event_undecodable_total``           counter    replica (payloads; ``malformed``
                                                               messages are counted here too)
``prefixplan_kv_events_live``                       gauge      replica (1: the index follows its
                                                               events; 0: none, or none yet)
``prefixplan_kv_resident_blocks``                   gauge      replica, tier (``GPU``, ``CPU/g1``)
==================================================  =========  ====================================
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prefixplan.residency.index import EVENTS_LIVE, ResidencyIndex

_COUNTERS = (
    ("kv_event_batches_applied", "Event batches applied to the residency index", "batches_applied"),
    ("kv_events_applied", "KV events applied to the residency index", "events_applied"),
    ("kv_event_gaps", "Sequence gaps found in a replica's events", "gaps"),
    ("kv_event_gaps_healed", "Gaps closed by the replay endpoint or a late batch", "gaps_healed"),
    ("kv_event_restarts", "Engine restarts seen (the sequence went back)", "restarts"),
    ("kv_event_duplicates", "Duplicate event batches dropped", "duplicates"),
    ("kv_event_errors", "Unexpected errors while following a replica (noted in its status)", "errors"),
)


class ResidencyCollector:
    """A ``prometheus_client`` collector over a :class:`ResidencyIndex` (module docstring)."""

    def __init__(self, index: ResidencyIndex, prefix: str = "prefixplan") -> None:
        self.index = index
        self.prefix = prefix

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        p = self.prefix
        statuses = self.index.statuses()
        received = CounterMetricFamily(
            f"{p}_kv_event_batches_received", "Event batches received", labels=["replica", "via"]
        )
        for st in statuses:
            received.add_metric([st.replica, "live"], st.counters["batches_received"])
            received.add_metric([st.replica, "replay"], st.counters["batches_replayed"])
        yield received
        for name, doc, field in _COUNTERS:
            fam = CounterMetricFamily(f"{p}_{name}", doc, labels=["replica"])
            for st in statuses:
                fam.add_metric([st.replica], st.counters[field])
            yield fam
        undecodable = CounterMetricFamily(
            f"{p}_kv_event_undecodable", "Payloads or messages that could not be decoded", labels=["replica"]
        )
        resyncs = CounterMetricFamily(
            f"{p}_kv_event_resyncs", "Replica indexes cleared and re-learned", labels=["replica", "reason"]
        )
        live = GaugeMetricFamily(
            f"{p}_kv_events_live", "1 when the index follows the replica's events", labels=["replica"]
        )
        blocks = GaugeMetricFamily(f"{p}_kv_resident_blocks", "Blocks the index holds", labels=["replica", "tier"])
        for st in statuses:
            undecodable.add_metric([st.replica], st.counters["undecodable"] + st.counters["malformed"])
            for reason, n in sorted(st.resyncs.items()):
                resyncs.add_metric([st.replica, reason], n)
            live.add_metric([st.replica], 1.0 if st.events == EVENTS_LIVE else 0.0)
            for tier, n in sorted(st.resident_blocks.items()):
                blocks.add_metric([st.replica, tier], n)
        yield from (undecodable, resyncs, live, blocks)


def register_metrics(registry: Any, index: ResidencyIndex) -> ResidencyCollector:
    """Add the KV event metrics of ``index`` to a ``prometheus_client`` ``CollectorRegistry``."""
    collector = ResidencyCollector(index)
    registry.register(collector)
    return collector
