"""Where the gateway keeps key versions, warm state and per-key counters.

:class:`KeyVersion` is one registered ``name@vN`` with the parts it expands to. A backend stores
them and answers synchronously (the gateway calls it off its event loop):

* :class:`SQLiteBackend` (default): the prefixplan store (``--db``) -- ``gateway_keys`` and
  ``gateway_names`` per (owner, name), ``gateway_warm`` for warm state, ``gateway_audit``. One
  gateway, or several on one host sharing the file.
* :class:`~prefixplan.gateway.redis_state.RedisBackend` (``--state redis://...``): the same in
  Redis, so gateways on several hosts share registrations and ready state.

Every version has an owner (a tenant, :data:`~prefixplan.gateway.tenants.LOCK` for the keys
locked in the repository, :data:`~prefixplan.gateway.tenants.OPEN` on a gateway without client
keys); names are per owner. Both register a version atomically (an existing ``name@vN`` is
returned unchanged, never overwritten), and both apply the store's retention rule: registering a
newer version makes the active one ``superseded``, valid until ``now + retain``; after that it is
expired (410). Both keep an *epoch*, a random id written when the state is first used: a state
that was wiped or replaced has another epoch (or none), which the gateway notices
(:mod:`prefixplan.gateway.ledger`).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Protocol

from prefixplan.gateway.prefix import WirePart, parts_from_json, parts_json
from prefixplan.gateway.tenants import LOCK, OPEN
from prefixplan.keys import DEFAULT_RETAIN_SECONDS
from prefixplan.store.gateway_tables import FLEET, KeyStats

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
    owner: str = OPEN

    @property
    def key(self) -> str:
        """``name@vN``: what the owner's clients call it."""
        return f"{self.name}@v{self.version}"

    @property
    def label(self) -> str:
        """The version's name in the gateway's own state, metrics and logs: ``tenant/name@vN``,
        or ``name@vN`` for locked keys and on an open gateway."""
        return self.key if self.owner in (LOCK, OPEN) else f"{self.owner}/{self.key}"

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
            "owner": self.owner,
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
            owner=str(d.get("owner") or OPEN),
        )


class Backend(Protocol):
    """What the gateway needs of its state store (synchronous; see module docstring)."""

    def get(self, owner: str, name: str, version: int | None) -> KeyVersion | None:
        """``owner``'s ``name@vN``, or its active version of ``name`` (None: not registered)."""

    def last_version(self, owner: str, name: str) -> int:
        """The highest version number ever registered for ``owner``'s ``name`` (0: none)."""

    def name_count(self, owner: str) -> int:
        """How many names ``owner`` has registered."""

    def register(
        self, kv: KeyVersion, epoch: str | None = None, audit: Mapping[str, object] | None = None
    ) -> tuple[KeyVersion, bool]:
        """Register ``kv`` unless its ``name@vN`` exists; returns (the stored version, created).
        With ``epoch``, refuses (:class:`StateLost`) when the state's epoch is another; ``audit``
        is appended to the audit in the same transaction when the version is created."""

    def restore(self, kv: KeyVersion) -> bool:
        """Put back a version as it was (healing a lost state); False when it was there."""

    def epoch(self, create: str | None = None) -> str | None:
        """The state's epoch; ``create`` sets it when there is none (atomic)."""

    def audit(self, entry: Mapping[str, object]) -> None:
        """Append one audit entry (:data:`prefixplan.store.gateway_tables.AUDIT_FIELDS`)."""

    def set_warm(self, key: str, states: Mapping[str, str]) -> None:
        """Record warm statuses per replica label (``*``: the fleet status) of a version label."""

    def warm(self, key: str) -> dict[str, str]:
        """``{replica: status}`` of a version label (``*``: ready | partial | failed | warming)."""

    def add_stats(self, rows: Iterable[KeyStats]) -> None:
        """Add per (key, replica) count deltas."""

    def close(self) -> None: ...


class StateLost(Exception):
    """The state's epoch is not the one this gateway knows: it was wiped or replaced."""


def _row(kv: KeyVersion) -> dict[str, object]:
    d = kv.to_json()
    d["created"] = 0.0
    return d


class SQLiteBackend:
    """Key versions, warm state and counters in the prefixplan store (``--db``)."""

    def __init__(self, db: str | None = None, clock: Callable[[], float] = time.time) -> None:
        self._db = db
        self._clock = clock
        self._local = threading.local()
        self._opened: list[Store] = []
        self._lock = threading.Lock()
        self._generation = 0  # raised when the file was found replaced: every thread reopens
        self._known_epoch: str | None = None
        self._store  # noqa: B018  (open now: a bad --db fails at start, not on the first request)

    @property
    def _store(self) -> Store:
        """This thread's connection (SQLite connections stay in the thread that opened them)."""
        store = getattr(self._local, "store", None)
        if store is not None and getattr(self._local, "generation", 0) != self._generation:
            with contextlib.suppress(Exception):
                store.close()
            store = None
        if store is None:
            from prefixplan.store import open_store

            store = open_store(self._db)
            self._local.store = store
            self._local.generation = self._generation
            with self._lock:
                self._opened.append(store)
        return store

    def get(self, owner: str, name: str, version: int | None) -> KeyVersion | None:
        row = self._store.gateway_key(owner, name, version)
        return KeyVersion.from_json(row) if row is not None else None

    def last_version(self, owner: str, name: str) -> int:
        return self._store.gateway_last_version(owner, name)

    def name_count(self, owner: str) -> int:
        return self._store.gateway_name_count(owner)

    def register(
        self, kv: KeyVersion, epoch: str | None = None, audit: Mapping[str, object] | None = None
    ) -> tuple[KeyVersion, bool]:
        if epoch is not None:
            found = self.epoch()
            if found != epoch:
                raise StateLost(f"the store's epoch is {found}, not {epoch}")
        row, created = self._store.gateway_register(_row(kv), now=self._clock(), audit=audit)
        return KeyVersion.from_json(row), created

    def restore(self, kv: KeyVersion) -> bool:
        return self._store.gateway_restore(_row(kv))

    def remembered(self, name: str) -> str | None:
        """A value this gateway remembered in the store's ``gateway_meta`` (the Redis state's epoch)."""
        return self._store.gateway_epoch(name=name)

    def remember(self, name: str, value: str) -> None:
        self._store.set_gateway_meta(name, value)

    def versions(self) -> list[KeyVersion]:
        """Every version in the store (the ledger's copy when Redis holds the state)."""
        return [KeyVersion.from_json(row) for row in self._store.gateway_keys()]

    def epoch(self, create: str | None = None) -> str | None:
        # A fresh connection: one kept open would still read a store file replaced under it.
        from prefixplan.store import open_store

        with open_store(self._db) as store:
            found = store.gateway_epoch(create)
        with self._lock:
            if self._known_epoch is not None and found != self._known_epoch:
                self._generation += 1
            self._known_epoch = found
        return found

    def audit(self, entry: Mapping[str, object]) -> None:
        self._store.gateway_audit(dict(entry))

    def audit_rows(self, limit: int = 1000) -> list[dict[str, object]]:
        """The latest ``limit`` audit entries, oldest first."""
        return self._store.gateway_audit_rows(limit)

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
