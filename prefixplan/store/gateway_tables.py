"""Table family ``gateway_keys`` / ``gateway_names`` / ``gateway_audit`` / ``gateway_meta`` /
``gateway_warm`` / ``gateway_key_stats`` (``prefixplan gateway``).

``gateway_keys`` holds each key version of each owner (tenant) with the exact parts it expands to
(JSON); ``gateway_names`` each (owner, name)'s highest and active version; ``gateway_audit`` who
registered which version with which hash; ``gateway_meta`` the state's epoch; ``gateway_warm`` the last warm status of each (key, replica) and the key's fleet status
(replica ``*``); ``gateway_key_stats`` cumulative per (key, replica) request, token and TTFT
counts that ``prefixplan status --keys`` shows.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from prefixplan.store.base import StoreBase, iso

_KEY_FIELDS = (
    "owner",
    "name",
    "version",
    "content_hash",
    "wire_hash",
    "render",
    "parts",
    "status",
    "retain_seconds",
    "retain_until",
    "source",
    "created",
)
_KEY_COLS = ", ".join(_KEY_FIELDS)
AUDIT_FIELDS = ("ts", "tenant", "client", "event", "key", "content_hash", "detail")
"""An audit entry's fields: when, which tenant and client key (a 12-hex hash prefix), what
(``registered``, ``state_lost``, ``restored``), which key and content hash."""

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

    # -- key versions (owner, name, version) ------------------------------------------------------
    def gateway_key(self, owner: str, name: str, version: int | None) -> dict[str, Any] | None:
        """The row of ``owner``'s ``name@vN``, or of its active version (``version`` None)."""
        if version is None:
            row = self.conn.execute(
                "SELECT active_version FROM gateway_names WHERE owner = ? AND name = ?", (owner, name)
            ).fetchone()
            if row is None or row[0] is None:
                return None
            version = int(row[0])
        row = self.conn.execute(
            f"SELECT {_KEY_COLS} FROM gateway_keys WHERE owner = ? AND name = ? AND version = ?",
            (owner, name, version),
        ).fetchone()
        return dict(zip(_KEY_FIELDS, row, strict=True)) if row else None

    def gateway_last_version(self, owner: str, name: str) -> int:
        """The highest version ever registered for ``owner``'s ``name`` (0: none)."""
        row = self.conn.execute(
            "SELECT last_version FROM gateway_names WHERE owner = ? AND name = ?", (owner, name)
        ).fetchone()
        return int(row[0]) if row else 0

    def gateway_name_count(self, owner: str) -> int:
        """How many key names ``owner`` has registered."""
        return int(self.conn.execute("SELECT count(*) FROM gateway_names WHERE owner = ?", (owner,)).fetchone()[0])

    def gateway_register(
        self, row: dict[str, Any], now: float, audit: Mapping[str, Any] | None = None
    ) -> tuple[dict[str, Any], bool]:
        """Insert ``row`` unless its (owner, name, version) exists (then that row, False). A version
        above the active one makes it active and the previous one superseded (valid for its
        retention); one below is stored superseded. One transaction, with its ``audit`` entry."""
        owner, name, version = row["owner"], row["name"], int(row["version"])
        with self.write() as c:
            existing = self.gateway_key(owner, name, version)
            if existing is not None:
                return existing, False
            names = c.execute(
                "SELECT last_version, active_version FROM gateway_names WHERE owner = ? AND name = ?", (owner, name)
            ).fetchone()
            last, active = (int(names[0]), names[1]) if names else (0, None)
            newer = active is None or version > int(active)
            if newer and active is not None:
                c.execute(
                    "UPDATE gateway_keys SET status = 'superseded', retain_until = ? + retain_seconds "
                    "WHERE owner = ? AND name = ? AND version = ?",
                    (now, owner, name, int(active)),
                )
            stored = dict(row, status="active" if newer else "superseded", created=now)
            stored["retain_until"] = None if newer else now + int(row["retain_seconds"])
            self._insert_key(c, stored)
            c.execute(
                "INSERT INTO gateway_names(owner, name, last_version, active_version) VALUES (?, ?, ?, ?) "
                "ON CONFLICT(owner, name) DO UPDATE SET last_version = excluded.last_version, "
                "active_version = excluded.active_version",
                (owner, name, max(last, version), version if newer else active),
            )
            if audit is not None:
                self.gateway_audit(audit)
        return stored, True

    def gateway_restore(self, row: dict[str, Any]) -> bool:
        """Put back a row as it was (healing a lost state): inserted when absent, the name's last
        and active versions raised to include it. False when the version was already there."""
        owner, name, version = row["owner"], row["name"], int(row["version"])
        with self.write() as c:
            if self.gateway_key(owner, name, version) is not None:
                return False
            self._insert_key(c, row)
            active = version if row["status"] == "active" else None
            c.execute(
                "INSERT INTO gateway_names(owner, name, last_version, active_version) VALUES (?, ?, ?, ?) "
                "ON CONFLICT(owner, name) DO UPDATE SET last_version = max(last_version, excluded.last_version), "
                "active_version = CASE WHEN excluded.active_version IS NOT NULL AND "
                "(active_version IS NULL OR excluded.active_version > active_version) "
                "THEN excluded.active_version ELSE active_version END",
                (owner, name, version, active),
            )
        return True

    def gateway_keys(self) -> list[dict[str, Any]]:
        """Every key version, by owner, name and version."""
        rows = self.conn.execute(f"SELECT {_KEY_COLS} FROM gateway_keys ORDER BY owner, name, version").fetchall()
        return [dict(zip(_KEY_FIELDS, r, strict=True)) for r in rows]

    @staticmethod
    def _insert_key(c: Any, row: dict[str, Any]) -> None:
        c.execute(
            f"INSERT INTO gateway_keys({_KEY_COLS}) VALUES ({', '.join('?' * len(_KEY_FIELDS))})",
            tuple(row.get(f) for f in _KEY_FIELDS),
        )

    # -- epoch and audit -------------------------------------------------------------------------
    def gateway_epoch(self, create: str | None = None, *, name: str = "epoch") -> str | None:
        """The state's epoch (None: none yet); ``create`` sets it when there is none. ``name``
        keeps other epochs apart (a gateway remembers the epoch of the Redis state it uses)."""
        if create is not None:
            with self.write() as c:
                c.execute("INSERT OR IGNORE INTO gateway_meta(k, v) VALUES (?, ?)", (name, create))
        row = self.conn.execute("SELECT v FROM gateway_meta WHERE k = ?", (name,)).fetchone()
        return str(row[0]) if row else None

    def set_gateway_meta(self, name: str, value: str) -> None:
        """Set ``name`` in ``gateway_meta`` (replacing its value)."""
        with self.write() as c:
            c.execute("INSERT OR REPLACE INTO gateway_meta(k, v) VALUES (?, ?)", (name, value))

    def gateway_audit(self, entry: Mapping[str, Any]) -> None:
        """Append one audit entry (ts, tenant, client, event, key, content_hash, detail)."""
        with self.write() as c:
            c.execute(
                "INSERT INTO gateway_audit(ts, tenant, client, event, key, content_hash, detail) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                tuple(entry.get(f) for f in AUDIT_FIELDS),
            )

    def gateway_audit_rows(self, limit: int = 1000) -> list[dict[str, Any]]:
        """The latest ``limit`` audit entries, oldest first."""
        rows = self.conn.execute(
            f"SELECT {', '.join(AUDIT_FIELDS)} FROM gateway_audit ORDER BY id DESC LIMIT ?", (int(limit),)
        ).fetchall()
        return [dict(zip(AUDIT_FIELDS, r, strict=True)) for r in reversed(rows)]

    # -- warm state and counters -----------------------------------------------------------------
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
