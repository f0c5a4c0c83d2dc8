"""What ``prefixplan status --key-stats`` shows: the per-key counters gateways wrote to the store,
with each key's last recorded warm status."""

from __future__ import annotations

from typing import Any

from prefixplan.store.gateway_tables import FLEET


def key_stats(db: str | None = None) -> list[dict[str, Any]]:
    """One row per (key, replica): requests, errors, prompt and cached tokens, hit rate, mean
    TTFT, the replica's warm status of the key and the key's fleet status (``-`` = no key)."""
    from prefixplan.store import open_store

    with open_store(db, create=False) as store:
        rows = store.key_stats()
        warm = {r.key: store.warm_state(r.key) for r in rows}
    out = []
    for r in rows:
        d = r.to_dict()
        states = warm.get(r.key, {})
        d["warm"] = states.get(r.replica)
        d["fleet"] = states.get(FLEET)
        out.append(d)
    return out
