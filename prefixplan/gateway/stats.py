"""What ``prefixplan status --key-stats`` shows: the per-key counters gateways wrote to the store,
with each key's last recorded warm status and, where the gateway follows KV events, its residency
per replica (state, resident blocks, last verified, evictions, re-warms) as of its last flush."""

from __future__ import annotations

import json
from typing import Any

from prefixplan.store.gateway_tables import FLEET


def key_stats(db: str | None = None) -> list[dict[str, Any]]:
    """One row per (key, replica): requests, errors, prompt and cached tokens, hit rate, mean
    TTFT, the replica's warm status of the key and the key's fleet status (``-`` = no key)."""
    from prefixplan.store import open_store

    with open_store(db, create=False) as store:
        rows = [r.to_dict() for r in store.key_stats()]
        residency = _residency(store.gateway_epoch(name=RESIDENCY))
        seen = {(d["key"], d["replica"]) for d in rows}
        for key, per in sorted(residency.items()):
            for replica in sorted(per):
                if (key, replica) not in seen:
                    rows.append(_empty(key, replica))
        warm = {d["key"]: store.warm_state(d["key"]) for d in rows}
    for d in rows:
        states = warm.get(d["key"], {})
        d["warm"] = states.get(d["replica"])
        d["fleet"] = states.get(FLEET)
        d["residency"] = residency.get(d["key"], {}).get(d["replica"])
    return rows


RESIDENCY = "residency"
"""The ``gateway_meta`` entry holding the latest residency view (JSON ``{key: {replica: {...}}}``)."""


def _residency(text: str | None) -> dict[str, dict[str, dict[str, Any]]]:
    if not text:
        return {}
    try:
        got = json.loads(text)
    except json.JSONDecodeError:
        return {}
    return got if isinstance(got, dict) else {}


def _empty(key: str, replica: str) -> dict[str, Any]:
    return {
        "key": key,
        "replica": replica,
        "requests": 0,
        "errors": 0,
        "prompt_tokens": 0,
        "cached_tokens": 0,
        "hit_rate": None,
        "mean_ttft_s": None,
    }
