"""A key state that notices its own loss, and heals without giving a version number a second meaning.

The state (Redis, or the SQLite store) carries an *epoch*, a random id set once when the state is
first used. :class:`StateWatch` remembers the epoch it started with and compares it every
``interval`` seconds, whenever a registration is refused for another epoch, and whenever a key the
gateway has seen is suddenly unknown. A Redis restarted without persistence, a flushed database or
a store file replaced under the gateway has no epoch, or another: the gateway logs it, counts it
(``prefixplan_gateway_state_resets_total``), writes it to the audit, and puts back every version it
knows from its :class:`Ledger` before it adopts the new epoch. A registration never goes through
against an epoch the gateway has not healed (the backends check it inside their transaction), so a
number cannot be handed out again for other content.

The :class:`Ledger` holds every version this gateway registered or read, in memory (bounded) and,
with Redis, also in the gateway's local store, so a gateway restarted after the wipe still knows.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import TYPE_CHECKING

from prefixplan.gateway.state import Backend, KeyVersion, supersede

if TYPE_CHECKING:  # pragma: no cover
    from prefixplan.gateway.metrics import GatewayMetrics
    from prefixplan.gateway.state import SQLiteBackend

log = logging.getLogger("prefixplan.gateway")
LEDGER_LIMIT = 100_000


def new_epoch() -> str:
    return secrets.token_hex(8)


class Ledger:
    """Versions this gateway knows, by (owner, name, version); at most ``limit`` in memory."""

    def __init__(self, mirror: SQLiteBackend | None = None, limit: int = LEDGER_LIMIT) -> None:
        self.mirror = mirror
        self.limit = limit
        self._known: OrderedDict[tuple[str, str, int], KeyVersion] = OrderedDict()
        self._last: dict[tuple[str, str], int] = {}

    def note(self, kv: KeyVersion) -> bool:
        """Remember ``kv`` (True when it was new here); mirrored to the local store with Redis."""
        ident = (kv.owner, kv.name, kv.version)
        if ident in self._known:
            self._known.move_to_end(ident)
            return False
        self._known[ident] = kv
        name = (kv.owner, kv.name)
        self._last[name] = max(self._last.get(name, 0), kv.version)
        while len(self._known) > self.limit:
            self._known.popitem(last=False)
        if self.mirror is not None:
            try:
                self.mirror.restore(kv)
            except Exception as err:  # the mirror is a second copy: the request must not fail for it
                log.warning("cannot mirror %s to the local store: %s", kv.label, err)
        return True

    def has(self, kv: KeyVersion) -> bool:
        """Whether ``kv`` is in memory (then :meth:`note` has nothing to write)."""
        return (kv.owner, kv.name, kv.version) in self._known

    def known(self, owner: str, name: str, version: int) -> KeyVersion | None:
        kv = self._known.get((owner, name, version))
        if kv is None and self.mirror is not None:
            with contextlib.suppress(Exception):
                kv = self.mirror.get(owner, name, version)
        return kv

    def seen(self, owner: str, name: str) -> bool:
        """Whether any version of ``owner``'s ``name`` passed through this gateway (blocking: the
        local store is asked too)."""
        return (owner, name) in self._last or self.last(owner, name) > 0

    def remembered_epoch(self, state: str) -> str | None:
        """The epoch of ``state`` this gateway last adopted (kept in the local store; None without one)."""
        if self.mirror is None:
            return None
        with contextlib.suppress(Exception):
            return self.mirror.remembered(f"epoch:{state}")
        return None

    def remember_epoch(self, state: str, epoch: str) -> None:
        if self.mirror is not None:
            try:
                self.mirror.remember(f"epoch:{state}", epoch)
            except Exception as err:
                log.warning("cannot remember the state's epoch in the local store: %s", err)

    def last(self, owner: str, name: str) -> int:
        """The highest version of ``owner``'s ``name`` known here (0: none)."""
        last = self._last.get((owner, name), 0)
        if self.mirror is not None:
            with contextlib.suppress(Exception):
                last = max(last, self.mirror.last_version(owner, name))
        return last

    def versions(self) -> list[KeyVersion]:
        """Every version known here, the local store's included, by (owner, name, version)."""
        out = dict(self._known)
        if self.mirror is not None:
            with contextlib.suppress(Exception):
                for kv in self.mirror.versions():
                    out.setdefault((kv.owner, kv.name, kv.version), kv)
        return [out[k] for k in sorted(out)]


def healed(versions: Iterable[KeyVersion], now: float) -> list[KeyVersion]:
    """The versions as the state should hold them again: per name, only the highest version that
    was active stays active; lower ones are superseded (their retention counted from ``now``
    when they had none)."""
    by_name: dict[tuple[str, str], list[KeyVersion]] = {}
    for kv in versions:
        by_name.setdefault((kv.owner, kv.name), []).append(kv)
    out = []
    for group in by_name.values():
        group.sort(key=lambda kv: kv.version)
        top = max((kv.version for kv in group if kv.status == "active"), default=None)
        for kv in group:
            if kv.status == "active" and kv.version != top:
                kv = supersede(kv, now)
            elif kv.status == "superseded" and kv.retain_until is None:
                kv = replace(kv, retain_until=now + kv.retain_seconds)
            out.append(kv)
    return out


class StateWatch:
    """Notices a lost state and heals it from the ledger (module docstring)."""

    def __init__(
        self,
        backend: Backend,
        ledger: Ledger,
        *,
        metrics: GatewayMetrics | None = None,
        on_reset: Callable[[list[KeyVersion]], None] | None = None,
        clock: Callable[[], float] = time.time,
        where: str = "key state",
    ) -> None:
        self.backend = backend
        self.ledger = ledger
        self.metrics = metrics
        self.on_reset = on_reset
        self.clock = clock
        self.where = where
        self.epoch: str | None = None
        self.resets = 0
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        """Adopt the state's epoch (setting one when it has none); when this gateway remembers
        another epoch of the same state from an earlier run, the state was lost meanwhile: heal."""
        remembered = await asyncio.to_thread(self.ledger.remembered_epoch, self.where)
        found = await asyncio.to_thread(self.backend.epoch)
        if remembered is not None and found != remembered:
            self.epoch = remembered
            async with self._lock:
                await self._heal(found)
        else:
            self.epoch = await asyncio.to_thread(self.backend.epoch, new_epoch())
        await asyncio.to_thread(self.ledger.remember_epoch, self.where, str(self.epoch))

    async def check(self) -> bool:
        """Compare the epoch; heal when it changed. True when the state was found lost."""
        async with self._lock:
            found = await asyncio.to_thread(self.backend.epoch)
            if found is not None and found == self.epoch:
                return False
            await self._heal(found)
            return True

    async def _heal(self, found: str | None) -> None:
        self.resets += 1
        what = "has no epoch (wiped or restarted empty)" if found is None else f"has another epoch ({found})"
        log.error(
            "the gateway's %s %s: it was %s; putting back the versions this gateway knows", self.where, what, self.epoch
        )
        if self.metrics is not None:
            self.metrics.state_resets.inc()
        versions = healed(self.ledger.versions(), self.clock())

        def restore() -> list[KeyVersion]:
            return [kv for kv in versions if self.backend.restore(kv)]

        restored = await asyncio.to_thread(restore)
        self.epoch = await asyncio.to_thread(self.backend.epoch, new_epoch())
        await asyncio.to_thread(self.ledger.remember_epoch, self.where, str(self.epoch))
        entry = {
            "ts": self.clock(),
            "tenant": "-",
            "client": "-",
            "event": "state_lost",
            "key": "-",
            "content_hash": None,
            "detail": f"{what}; restored {len(restored)} of {len(versions)} known versions; epoch {self.epoch}",
        }
        with contextlib.suppress(Exception):
            await asyncio.to_thread(self.backend.audit, entry)
        log.error("restored %d key versions into the %s (epoch %s)", len(restored), self.where, self.epoch)
        if self.on_reset is not None:
            self.on_reset(versions)

    async def run(self, interval: float) -> None:
        """Check every ``interval`` seconds until cancelled (a failing state is logged, not fatal)."""
        while True:
            await asyncio.sleep(interval)
            try:
                await self.check()
            except Exception as err:
                log.warning("cannot check the %s: %s: %s", self.where, type(err).__name__, err)
