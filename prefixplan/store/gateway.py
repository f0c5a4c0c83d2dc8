"""Table family ``gateway_parts`` / ``gateway_warm`` / ``gateway_key_stats`` (``prefixplan gateway``).

``gateway_parts`` holds the exact parts a key version expands to (JSON), beside its ``versions``
row; ``gateway_warm`` the last warm status of each (key, replica) and the key's fleet status
(replica ``*``); ``gateway_key_stats`` cumulative per (key, replica) request, token and TTFT
counts that ``prefixplan status --keys`` shows.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from prefixplan.store.base import StoreBase, iso

FLEET = "*"
"""The ``replica`` of a key's fleet-wide status row in ``gateway_warm``."""


@dataclass(frozen=True, slots=True)
class KeyStats:
    """Cumulative gateway counts of one (key, replica); ``key`` is ``-`` for unkeyed traffic."""

    key: str
    replica: str
    requests: int = 0
    errors: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    ttft_sum_s: float = 0.0
    ttft_count: int = 0
    updated: str | None = None

    @property
    def hit_rate(self) -> float | None:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else None

    @property
    def mean_ttft_s(self) -> float | None:
        return self.ttft_sum_s / self.ttft_count if self.ttft_count else None

    def to_dict(self) -> dict[str, Any]:
        d = {f: getattr(self, f) for f in self.__dataclass_fields__}
        d["hit_rate"] = self.hit_rate
        d["mean_ttft_s"] = self.mean_ttft_s
        return d


class GatewayMixin(StoreBase):
    """Gateway state (methods of :class:`~prefixplan.store.Store`)."""

    def gateway_parts(self, name: str, version: int) -> tuple[str, str, str] | None:
        """``(wire_hash, render, parts JSON)`` of ``name@vN``, or None."""
        row = self.conn.execute(
            "SELECT wire_hash, render, parts FROM gateway_parts WHERE name = ? AND version = ?", (name, version)
        ).fetchone()
        return (str(row[0]), str(row[1]), str(row[2])) if row else None

    def put_gateway_parts(self, name: str, version: int, wire_hash: str, render: str, parts_json: str) -> None:
        """Store the parts of ``name@vN`` (kept when already present: a version's parts never change)."""
        with self.write() as c:
            c.execute(
                "INSERT OR IGNORE INTO gateway_parts(name, version, wire_hash, render, parts) VALUES (?, ?, ?, ?, ?)",
                (name, version, wire_hash, render, parts_json),
            )

    def set_warm_state(self, key: str, states: Mapping[str, str], now: float | None = None) -> None:
        """Record the warm status of ``key`` per replica (and the fleet row ``*``)."""
        stamp = iso(time.time() if now is None else now)
        with self.write() as c:
            for replica, status in states.items():
                c.execute(
                    "INSERT INTO gateway_warm(key, replica, status, updated) VALUES (?, ?, ?, ?) "
                    "ON CONFLICT(key, replica) DO UPDATE SET status = excluded.status, updated = excluded.updated",
                    (key, replica, status, stamp),
                )

    def warm_state(self, key: str) -> dict[str, str]:
        """``{replica: status}`` of ``key`` (``*``: the fleet status)."""
        rows = self.conn.execute("SELECT replica, status FROM gateway_warm WHERE key = ?", (key,)).fetchall()
        return {str(r): str(s) for r, s in rows}

    def add_key_stats(self, rows: Iterable[KeyStats], now: float | None = None) -> None:
        """Add counts (deltas) to the cumulative rows, in one transaction."""
        stamp = iso(time.time() if now is None else now)
        with self.write() as c:
            for r in rows:
                c.execute(
                    "INSERT INTO gateway_key_stats(key, replica, requests, errors, prompt_tokens, cached_tokens, "
                    "ttft_sum_s, ttft_count, updated) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) "
                    "ON CONFLICT(key, replica) DO UPDATE SET requests = requests + excluded.requests, "
                    "errors = errors + excluded.errors, prompt_tokens = prompt_tokens + excluded.prompt_tokens, "
                    "cached_tokens = cached_tokens + excluded.cached_tokens, "
                    "ttft_sum_s = ttft_sum_s + excluded.ttft_sum_s, ttft_count = ttft_count + excluded.ttft_count, "
                    "updated = excluded.updated",
                    (
                        r.key,
                        r.replica,
                        r.requests,
                        r.errors,
                        r.prompt_tokens,
                        r.cached_tokens,
                        r.ttft_sum_s,
                        r.ttft_count,
                        stamp,
                    ),
                )

    def key_stats(self) -> list[KeyStats]:
        """Every (key, replica) row, by key then replica."""
        rows = self.conn.execute(
            "SELECT key, replica, requests, errors, prompt_tokens, cached_tokens, ttft_sum_s, ttft_count, updated "
            "FROM gateway_key_stats ORDER BY key, replica"
        ).fetchall()
        return [
            KeyStats(str(k), str(rep), int(n), int(e), int(p), int(cached), float(ts), int(tc), str(up))
            for k, rep, n, e, p, cached, ts, tc, up in rows
        ]
