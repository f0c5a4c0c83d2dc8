"""Where the gateway keeps key versions, warm state and per-key counters.

:class:`KeyVersion` is one registered ``name@vN`` with the parts it expands to. A backend stores
them and answers synchronously (the gateway calls it off its event loop):

* :class:`SQLiteBackend` (default): the prefixplan store (``--db``) -- the ``versions`` row and
  ``gateway_parts`` for each version, ``gateway_warm`` for warm state. One gateway, or several on
  one host sharing the file.
* :class:`~prefixplan.gateway.redis_state.RedisBackend` (``--state redis://...``): the same in
  Redis, so gateways on several hosts share registrations and ready state.

Both register a version atomically (an existing ``name@vN`` is returned unchanged, never
overwritten), and both apply the store's retention rule: registering a newer version makes the
active one ``superseded``, valid until ``now + retain``; after that it is expired (410).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Protocol

from prefixplan.errors import KeyConflictError
from prefixplan.gateway.prefix import WirePart, parts_from_json, parts_json
from prefixplan.keys import DEFAULT_RETAIN_SECONDS
from prefixplan.store.gateway import FLEET, KeyStats

if TYPE_CHECKING:  # pragma: no cover
    from prefixplan.store import Store


@dataclass(frozen=True, slots=True)
class KeyVersion:
    """A registered ``name@vN``: its hashes, its parts, its lifecycle.

    ``content_hash`` is the key's identity (the lock's for recipe keys); ``wire_hash`` what a
    request carrying the prefix is compared with. ``retain_until`` (epoch seconds) is set once
    the version is superseded.
    """

    name: str
    version: int
    content_hash: str
    wire_hash: str
    parts: tuple[WirePart, ...]
    render: str = "chat"
    status: str = "active"
    retain_seconds: int = DEFAULT_RETAIN_SECONDS
    retain_until: float | None = None
    source: str = "gateway"

    @property
    def key(self) -> str:
        return f"{self.name}@v{self.version}"

    def expired(self, now: float) -> bool:
        """Past its retention (or marked expired): requests for it get 410."""
        if self.status == "expired":
            return True
        return self.status == "superseded" and self.retain_until is not None and self.retain_until <= now

    def to_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "version": self.version,
            "content_hash": self.content_hash,
            "wire_hash": self.wire_hash,
            "parts": parts_json(self.parts),
            "render": self.render,
            "status": self.status,
            "retain_seconds": self.retain_seconds,
            "retain_until": self.retain_until,
            "source": self.source,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, object]) -> KeyVersion:
        until = d.get("retain_until")
        return cls(
            name=str(d["name"]),
            version=int(str(d["version"])),
            content_hash=str(d["content_hash"]),
            wire_hash=str(d["wire_hash"]),
            parts=parts_from_json(str(d["parts"])),
            render=str(d.get("render") or "chat"),
            status=str(d.get("status") or "active"),
            retain_seconds=int(str(d.get("retain_seconds") or DEFAULT_RETAIN_SECONDS)),
            retain_until=float(str(until)) if until is not None else None,
            source=str(d.get("source") or "gateway"),
        )


class Backend(Protocol):
    """What the gateway needs of its state store (synchronous; see module docstring)."""

    def get(self, name: str, version: int | None) -> KeyVersion | None:
        """``name@vN``, or the active version of ``name`` (None: not registered)."""

    def last_version(self, name: str) -> int:
        """The highest version number ever registered for ``name`` (0: none)."""

    def register(self, kv: KeyVersion) -> tuple[KeyVersion, bool]:
        """Register ``kv`` unless ``name@vN`` exists; returns (the stored version, created)."""

    def set_warm(self, key: str, states: Mapping[str, str]) -> None:
        """Record warm statuses per replica label (``*``: the fleet status)."""

    def warm(self, key: str) -> dict[str, str]:
        """``{replica: status}`` of ``key`` (``*``: ready | partial | failed | warming)."""

    def add_stats(self, rows: Iterable[KeyStats]) -> None:
        """Add per (key, replica) count deltas."""

    def close(self) -> None: ...


def _epoch(stamp: str | None) -> float | None:
    if not stamp:
        return None
    return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).timestamp()


class SQLiteBackend:
    """Key versions, warm state and counters in the prefixplan store (``--db``)."""

    def __init__(self, db: str | None = None, clock: Callable[[], float] = time.time) -> None:
        self._db = db
        self._clock = clock
        self._local = threading.local()
        self._opened: list[Store] = []
        self._lock = threading.Lock()
        self._store  # noqa: B018  (open now: a bad --db fails at start, not on the first request)

    @property
    def _store(self) -> Store:
        """This thread's connection (SQLite connections stay in the thread that opened them)."""
        store = getattr(self._local, "store", None)
        if store is None:
            from prefixplan.store import open_store

            store = open_store(self._db)
            self._local.store = store
            with self._lock:
                self._opened.append(store)
        return store

    def get(self, name: str, version: int | None) -> KeyVersion | None:
        rec = self._store.get(name, version)
        if rec is None or (version is None and rec.status != "active"):
            return None
        parts = self._store.gateway_parts(rec.name, rec.version)
        if parts is None:
            return None
        wire, render, text = parts
        return KeyVersion(
            name=rec.name,
            version=rec.version,
            content_hash=rec.content_hash,
            wire_hash=wire,
            parts=parts_from_json(text),
            render=render,
            status=rec.status,
            retain_seconds=rec.retain_seconds,
            retain_until=_epoch(rec.retain_until),
            source=rec.source or "gateway",
        )

    def last_version(self, name: str) -> int:
        versions = self._store.versions(name)
        return max((v.version for v in versions), default=0)

    def register(self, kv: KeyVersion) -> tuple[KeyVersion, bool]:
        existing = self.get(kv.name, kv.version)
        if existing is not None:
            return existing, False
        kind = "+".join(dict.fromkeys(p.kind for p in kv.parts))
        try:
            self._store.record_version(
                kv.name,
                content_hash=kv.content_hash,
                kind=kind or "prefix",
                source=kv.source,
                version=kv.version,
                retain_seconds=kv.retain_seconds,
                now=self._clock(),
            )
        except KeyConflictError:
            existing = self.get(kv.name, kv.version)
            if existing is not None:
                return existing, False
            raise
        self._store.put_gateway_parts(kv.name, kv.version, kv.wire_hash, kv.render, parts_json(kv.parts))
        stored = self.get(kv.name, kv.version)
        return (stored or kv), True

    def set_warm(self, key: str, states: Mapping[str, str]) -> None:
        self._store.set_warm_state(key, states, now=self._clock())

    def warm(self, key: str) -> dict[str, str]:
        return self._store.warm_state(key)

    def add_stats(self, rows: Iterable[KeyStats]) -> None:
        rows = list(rows)
        if rows:
            self._store.add_key_stats(rows, now=self._clock())

    def close(self) -> None:
        with self._lock:
            opened, self._opened = self._opened, []
        for store in opened:
            with contextlib.suppress(Exception):  # another thread's connection: closing it may be refused
                store.close()


def supersede(kv: KeyVersion, now: float) -> KeyVersion:
    """``kv`` made superseded at ``now`` (valid for its retention)."""
    return replace(kv, status="superseded", retain_until=now + kv.retain_seconds)


def fleet_status(states: Mapping[str, str]) -> str | None:
    """The fleet status recorded for a key (None: never warmed)."""
    return states.get(FLEET)
