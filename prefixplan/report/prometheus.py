"""``prefixplan status --prometheus``: the replicas' prefix-cache figures in the Prometheus text
exposition format (version 0.0.4), for node_exporter's textfile collector.

Metric families (labels ``replica`` = the endpoint's label, ``key`` = ``name@vN``: the same label
names and token units as the gateway's ``/metrics``, whose per-key families are
``prefixplan_gateway_prompt_tokens_total`` / ``prefixplan_gateway_cached_tokens_total`` /
``prefixplan_gateway_hit_rate``):

==================================================  =======  ====================================
name                                                type     meaning
==================================================  =======  ====================================
``prefixplan_replica_up``                           gauge    1 when the replica answered
``prefixplan_replica_info``                         gauge    1, with ``engine``, ``model``, ``block_size``
``prefixplan_replica_prompt_tokens_total``          counter  prefix-cache queries (tokens) since start
``prefixplan_replica_cached_tokens_total``          counter  prefix-cache hits (tokens) since start
``prefixplan_replica_hit_rate``                     gauge    hits / queries since the server started
``prefixplan_replica_window_hit_rate``              gauge    the same over ``--window`` (``window`` label)
``prefixplan_replica_below_target``                 gauge    1 when the verdict is below-target
``prefixplan_hit_rate_target``                      gauge    the ``--target`` hit rate (0.7 default)
``prefixplan_key_verified``                         gauge    1 when the key's last warm run verified it
``prefixplan_key_last_verified_timestamp_seconds``  gauge    Unix time of the last verification
==================================================  =======  ====================================

Absent figures (an unreachable replica's counters, a key never verified) are left out rather
than written as zero. Label values are escaped as the format requires (``\\``, ``"``, newline).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from datetime import datetime, timezone
from typing import Any

FAMILIES: dict[str, tuple[str, str]] = {
    "prefixplan_replica_up": ("gauge", "1 when the replica answered prefixplan status"),
    "prefixplan_replica_info": ("gauge", "Replica engine, model and block size (value 1)"),
    "prefixplan_replica_prompt_tokens_total": ("counter", "Prefix-cache queries in tokens since the server started"),
    "prefixplan_replica_cached_tokens_total": ("counter", "Prefix-cache hits in tokens since the server started"),
    "prefixplan_replica_hit_rate": ("gauge", "Prefix-cache hit rate (cached / prompt tokens) since the server started"),
    "prefixplan_replica_window_hit_rate": ("gauge", "Prefix-cache hit rate over the --window interval"),
    "prefixplan_replica_below_target": ("gauge", "1 when the replica's hit rate is below the target"),
    "prefixplan_hit_rate_target": ("gauge", "The hit-rate target prefixplan status judges against"),
    "prefixplan_key_verified": ("gauge", "1 when the key's last warm run on the replica verified it"),
    "prefixplan_key_last_verified_timestamp_seconds": ("gauge", "Unix time the key was last verified warm"),
}


def escape_label(value: Any) -> str:
    """A label value as the text format writes it (backslash, double quote and newline escaped)."""
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(labels: dict[str, Any]) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{escape_label(v)}"' for k, v in labels.items()) + "}"


def _num(x: float) -> str:
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "+Inf" if x > 0 else "-Inf"
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else repr(float(x))


def _epoch(iso: str | None) -> float | None:
    if not iso:
        return None
    try:
        dt = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    except ValueError:
        return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return dt.timestamp()


def samples(rows: Sequence[Any], target: float) -> Iterable[tuple[str, dict[str, Any], float]]:
    """``(metric, labels, value)`` for every figure of ``rows`` (:class:`~prefixplan.warming.status.ReplicaStatus`)."""
    yield "prefixplan_hit_rate_target", {}, float(target)
    for r in rows:
        rep = {"replica": r.endpoint}
        up = r.verdict != "unreachable"
        yield "prefixplan_replica_up", rep, 1.0 if up else 0.0
        if up:
            info = {**rep, "engine": r.engine or "", "model": r.model or "", "block_size": r.block_size or ""}
            yield "prefixplan_replica_info", info, 1.0
            yield "prefixplan_replica_below_target", rep, 1.0 if r.verdict == "below-target" else 0.0
        if r.queries is not None:
            yield "prefixplan_replica_prompt_tokens_total", rep, float(r.queries)
        if r.hits is not None:
            yield "prefixplan_replica_cached_tokens_total", rep, float(r.hits)
        if r.hit_rate is not None:
            yield "prefixplan_replica_hit_rate", rep, float(r.hit_rate)
        if r.window_s and r.window_hit_rate is not None:
            yield "prefixplan_replica_window_hit_rate", {**rep, "window": f"{r.window_s:g}s"}, float(r.window_hit_rate)
        for k in r.keys:
            key = {"key": k.key, "replica": r.endpoint}
            yield "prefixplan_key_verified", key, 1.0 if k.last_status == "verified" else 0.0
            when = _epoch(k.last_verified)
            if when is not None:
                yield "prefixplan_key_last_verified_timestamp_seconds", key, when


def render_prometheus(rows: Sequence[Any], target: float) -> str:
    """The exposition text: ``# HELP`` and ``# TYPE`` once per family, then its samples."""
    by_family: dict[str, list[str]] = {}
    for name, labels, value in samples(rows, target):
        by_family.setdefault(name, []).append(f"{name}{_labels(labels)} {_num(value)}")
    out = []
    for name, (kind, text) in FAMILIES.items():
        if name not in by_family:
            continue
        out += [f"# HELP {name} {text}", f"# TYPE {name} {kind}", *by_family[name]]
    return "\n".join(out) + "\n"
