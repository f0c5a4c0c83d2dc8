"""Readiness that stays true: which replicas hold each warmed key's block-aligned prefix.

A key version warmed by the gateway is *tracked*: its exact prefix ids (the warm's, rendered by a
replica's ``/tokenize``) become block keys per replica (the replica's block size, model namespace
and the owner's cache salt, :meth:`prefixplan.residency.index.ResidencyIndex.prompt_keys`). On a
replica whose KV events are live, the key is

``ready``
    while the index holds every full block of its prefix;
``evicted``
    once a ``BlockRemoved`` (or a clear: ``AllBlocksCleared``, a restart, a resync) took any of
    them -- decided in the index's listener, so within the batch that removed the block;
``pending``
    warmed, but the index has not shown all its blocks yet (events arrive after the engine's step).

Only ``ready`` counts for routing. A replica without live events has no residency view here
(:meth:`KeyResidency.counts` answers None) and the gateway keeps today's rule: verified by the
warm's probe. Transitions are reported to ``on_change(label, replica, state)`` on the index's
thread; the gateway hands them to its event loop.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from prefixplan.residency.index import ResidencyIndex

READY = "ready"
EVICTED = "evicted"
PENDING = "pending"


@dataclass
class KeyOnReplica:
    """One key on one replica (times are the tracker clock's, epoch seconds)."""

    blocks: int  # full blocks of the key's prefix
    block_size: int
    keys: list[int] = field(repr=False)
    state: str = PENDING
    resident: int = 0  # of its blocks resident at the head
    last_verified: float | None = None
    evictions: int = 0
    rewarms: int = 0

    def to_json(self) -> dict[str, object]:
        return {
            "state": self.state,
            "resident_blocks": self.resident,
            "blocks": self.blocks,
            "block_size": self.block_size,
            "last_verified": self.last_verified,
            "evictions": self.evictions,
            "rewarms": self.rewarms,
        }


class KeyResidency:
    """Tracked keys per replica, kept in step with a :class:`ResidencyIndex` (module docstring)."""

    def __init__(
        self,
        index: ResidencyIndex,
        replicas: Sequence[str],
        *,
        clock: Callable[[], float] = time.time,
        on_change: Callable[[str, str, str], None] | None = None,
    ) -> None:
        self.index = index
        self.replicas = tuple(replicas)
        self.clock = clock
        self.on_change = on_change
        # one lock with the index: its listener runs under the index's lock, and every method here
        # queries the index, so a lock of our own would be taken in both orders
        self._lock = index.lock
        self._keys: dict[str, dict[str, KeyOnReplica]] = {}
        self._ids: dict[str, tuple[tuple[int, ...], str | None]] = {}
        index.add_listener(self._on_index)

    # --- what the gateway tells it --------------------------------------------------------------

    def track(
        self, label: str, token_ids: Sequence[int], block_sizes: Mapping[str, int], *, salt: str | None = None
    ) -> None:
        """Follow ``label`` (its exact prefix ids) on every replica with an event source; the
        block size is the one the replica's events carry, else ``block_sizes`` (the warm's)."""
        with self._lock:
            self._ids[label] = (tuple(int(t) for t in token_ids), salt)
            for replica in self.replicas:
                self._track_on(label, replica, block_sizes.get(replica))

    def _track_on(self, label: str, replica: str, fallback_bs: int | None) -> None:
        if self.index.events_state(replica) == "off":
            return
        ids, salt = self._ids[label]
        bs = self.index.block_size(replica) or fallback_bs
        if not bs:
            return
        n = len(ids) // bs
        keys = self.index.prompt_keys(ids, bs, model=self.index.model_of(replica), cache_salt=salt)[:n]
        per = self._keys.setdefault(label, {})
        old = per.get(replica)
        rec = KeyOnReplica(blocks=n, block_size=bs, keys=keys)
        if old is not None:
            rec.evictions, rec.rewarms, rec.last_verified = old.evictions, old.rewarms, old.last_verified
        per[replica] = rec
        self._evaluate(label, replica, rec)

    def forget(self, label: str) -> None:
        with self._lock:
            self._keys.pop(label, None)
            self._ids.pop(label, None)

    def rewarmed(self, label: str, replica: str) -> None:
        """Count a re-warm sent for ``label`` on ``replica`` (its residency comes from the events)."""
        with self._lock:
            rec = self._keys.get(label, {}).get(replica)
            if rec is not None:
                rec.rewarms += 1

    # --- the index's listener -------------------------------------------------------------------

    def _on_index(self, replica: str) -> None:
        with self._lock:
            for label, per in self._keys.items():
                rec = per.get(replica)
                if rec is not None:
                    self._evaluate(label, replica, rec)

    def _evaluate(self, label: str, replica: str, rec: KeyOnReplica) -> None:
        if rec.block_size != (self.index.block_size(replica) or rec.block_size):
            # the engine's events carry another block size than the warm reported: key again
            self._track_on(label, replica, None)
            return
        rec.resident = self.index.resident_prefix_blocks(replica, rec.keys)
        held = rec.resident == rec.blocks and self.index.publishing(replica)
        new = READY if held else (EVICTED if rec.state in (READY, EVICTED) else PENDING)
        if held:
            rec.last_verified = self.clock()
        if new == rec.state:
            return
        if new == EVICTED:
            rec.evictions += 1
        rec.state = new
        if self.on_change is not None:
            self.on_change(label, replica, new)

    # --- queries --------------------------------------------------------------------------------

    def tracked(self, label: str) -> bool:
        with self._lock:
            return label in self._ids

    def prefix_tokens(self, label: str) -> int | None:
        """The tracked prefix's length in tokens (None: not tracked)."""
        with self._lock:
            got = self._ids.get(label)
            return len(got[0]) if got is not None else None

    def counts(self, label: str, replica: str) -> bool | None:
        """Whether routing may count on ``label`` being resident on ``replica``: True/False from
        the events; None where the events say nothing (not live there, or the key not tracked)."""
        with self._lock:
            rec = self._keys.get(label, {}).get(replica)
            if rec is None or not self.index.publishing(replica):
                return None
            return rec.state == READY

    def resident_tokens(self, label: str, replica: str) -> int | None:
        """Tokens of ``label``'s prefix resident at the head on ``replica`` (None: no view)."""
        with self._lock:
            rec = self._keys.get(label, {}).get(replica)
            if rec is None or not self.index.publishing(replica):
                return None
            return rec.resident * rec.block_size

    def state(self, label: str, replica: str) -> KeyOnReplica | None:
        with self._lock:
            return self._keys.get(label, {}).get(replica)

    def view(self, label: str) -> dict[str, dict[str, object]]:
        """Per replica: residency of ``label`` (replicas without a view are left out)."""
        with self._lock:
            return {r: rec.to_json() for r, rec in sorted(self._keys.get(label, {}).items())}

    def labels(self) -> list[str]:
        with self._lock:
            return sorted(self._keys)


def router_residency(
    keys: KeyResidency, replicas: Sequence[str], label: str, ready: frozenset[int] | set[int]
) -> list[int | None]:
    """Per replica (in router order), the tokens of ``label``'s prefix the residency router may
    count on: the KV events' view where there is one; else the whole prefix where the warm
    verified it and the key is ready (``ready``: router indexes); else None (the router's mirror)."""
    tokens = keys.prefix_tokens(label)
    out: list[int | None] = []
    for r, replica in enumerate(replicas):
        seen = keys.resident_tokens(label, replica)
        if seen is not None:
            out.append(seen)
        else:
            out.append(tokens if tokens is not None and r in ready else None)
    return out
