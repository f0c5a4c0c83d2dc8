"""What each replica holds, learned from its KV events: resident blocks keyed by token content.

Per replica, per medium (``GPU``, ``CPU``, ...) and per KV cache group, a tier holds the engine
hash -> :class:`~prefixplan.residency.chain.ChainState` of every resident block, and a count of
engine hashes per block key (the key is prefixplan's ``pp-prefix-1`` key of the prompt up to the
block's end, :mod:`prefixplan.residency.chain`). ``BlockStored`` adds blocks (a block already
held is left as it is: engines re-announce reused blocks), ``BlockRemoved`` resolves each engine
hash to its key and drops it, ``AllBlocksCleared`` empties the replica.

A block whose parent the index does not hold (stored before the index learned the replica, or
published in a batch that was lost) cannot be keyed: it is counted in ``orphan_blocks`` and left
out, so the index may hold less than the engine, never a block the engine dropped (as long as
every removal arrives; :mod:`prefixplan.residency.stream` clears a replica when one may not).

Readers (the gateway's event loop) and the subscriber's thread share the index behind one lock.
"""

from __future__ import annotations

import threading
from collections import Counter, deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, fields

import numpy as np

from prefixplan.residency.chain import ChainKeyer, ChainState
from prefixplan.residency.decode import MEDIUM_GPU, AllBlocksCleared, BlockRemoved, BlockStored, EngineHash, EventBatch

EVENTS_OFF = "off"  # no event source for the replica: callers fall back to what they know otherwise
EVENTS_WAITING = "waiting"  # a source is configured, nothing has arrived from it yet
EVENTS_LIVE = "live"  # batches (or a replay answer) arrived: the index follows the engine


@dataclass
class ReplicaCounters:
    """Counters of one replica's event stream (monotonic; ``resyncs`` by reason)."""

    batches_received: int = 0  # live batches
    batches_replayed: int = 0  # batches the replay endpoint returned
    batches_applied: int = 0
    events_applied: int = 0
    duplicates: int = 0
    reordered: int = 0  # batches applied after a later one had arrived
    gaps: int = 0
    gaps_healed: int = 0
    restarts: int = 0
    undecodable: int = 0
    malformed: int = 0  # messages without (topic, 8-byte seq, payload) frames
    errors: int = 0  # unexpected errors handling a message or a deadline (noted in the status)
    unknown_events: int = 0
    orphan_blocks: int = 0
    unresolved_removals: int = 0
    clears: int = 0  # AllBlocksCleared events
    replay_requests: int = 0
    replay_timeouts: int = 0
    resyncs: Counter[str] = field(default_factory=Counter)

    def snapshot(self) -> dict[str, int]:
        return {f.name: int(getattr(self, f.name)) for f in fields(self) if f.name != "resyncs"}


@dataclass(frozen=True)
class ReplicaStatus:
    """A replica's residency as of one moment."""

    replica: str
    events: str  # EVENTS_OFF | EVENTS_WAITING | EVENTS_LIVE
    source: str | None
    resident_blocks: dict[str, int]  # "MEDIUM" (group 0) or "MEDIUM/gN" -> blocks
    block_sizes: dict[str, int]
    last_seq: int | None
    last_event_at: float | None
    counters: dict[str, int]
    resyncs: dict[str, int]
    notes: tuple[str, ...]  # the latest resyncs and restarts, oldest first

    def describe(self) -> str:
        """One line: the state, then what the index holds or why it holds nothing."""
        if self.events == EVENTS_OFF:
            return f"{self.replica}: no KV events (no event source configured)"
        if self.events == EVENTS_WAITING:
            return f"{self.replica}: no KV events received yet from {self.source}"
        held = ", ".join(f"{k} {v}" for k, v in sorted(self.resident_blocks.items())) or "nothing"
        c = self.counters
        resyncs = sum(self.resyncs.values())
        return (
            f"{self.replica}: live (seq {self.last_seq}), resident blocks: {held}; "
            f"{c['batches_applied']} batches applied, {c['gaps']} gaps ({c['gaps_healed']} healed), "
            f"{resyncs} resyncs, {c['undecodable']} undecodable"
        )


@dataclass
class _Tier:
    block_size: int = 0
    by_hash: dict[EngineHash, ChainState] = field(default_factory=dict)
    keys: Counter[int] = field(default_factory=Counter)


@dataclass
class _Replica:
    source: str | None
    model: str | None
    events: str
    tiers: dict[tuple[str, int], _Tier] = field(default_factory=dict)
    counters: ReplicaCounters = field(default_factory=ReplicaCounters)
    last_seq: int | None = None
    last_event_at: float | None = None
    notes: deque[str] = field(default_factory=lambda: deque(maxlen=20))


class ResidencyIndex:
    """Resident blocks per replica, medium and cache group (module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._replicas: dict[str, _Replica] = {}
        self._listeners: list[Callable[[str], None]] = []
        self.keyer = ChainKeyer()

    @property
    def lock(self) -> threading.RLock:
        """The index's lock: a listener's owner that also calls the index takes this one, so
        that the two are never taken in opposite orders by two threads."""
        return self._lock

    def add_listener(self, listener: Callable[[str], None]) -> None:
        """Call ``listener(replica)`` after every batch applied to a replica and every clear, on
        the thread that changed the index, with the index's lock held (it may query the index; it
        must not block)."""
        with self._lock:
            self._listeners.append(listener)

    def _changed(self, replica: str) -> None:
        for listener in self._listeners:
            listener(replica)

    # --- set-up (the subscriber) ----------------------------------------------------------------

    def add_replica(self, replica: str, *, source: str | None = None, model: str | None = None) -> None:
        """Declare a replica; ``source`` describes its event stream (None: it has none), ``model``
        is the served model name the namespace of its keys uses (as the trace's ``model``)."""
        with self._lock:
            rec = self._replicas.get(replica)
            if rec is None:
                self._replicas[replica] = _Replica(source, model, EVENTS_WAITING if source else EVENTS_OFF)
            else:
                rec.source, rec.model = source, model
                if source and rec.events == EVENTS_OFF:
                    rec.events = EVENTS_WAITING

    def _rec(self, replica: str) -> _Replica:
        rec = self._replicas.get(replica)
        if rec is None:
            rec = self._replicas[replica] = _Replica(None, None, EVENTS_OFF)
        return rec

    def counters(self, replica: str) -> ReplicaCounters:
        """The replica's live counters (the subscriber updates them)."""
        with self._lock:
            return self._rec(replica).counters

    def mark_live(self, replica: str, now: float, seq: int | None = None) -> None:
        with self._lock:
            rec = self._rec(replica)
            rec.events = EVENTS_LIVE
            rec.last_event_at = now
            if seq is not None:
                rec.last_seq = seq

    def note(self, replica: str, text: str) -> None:
        """Record a resync or restart for :meth:`status`."""
        with self._lock:
            self._rec(replica).notes.append(text)

    def clear(self, replica: str) -> None:
        """Forget every block of ``replica`` (a resync, a restart, ``AllBlocksCleared``)."""
        with self._lock:
            self._rec(replica).tiers.clear()
            self._changed(replica)

    # --- events ---------------------------------------------------------------------------------

    def apply(self, replica: str, batch: EventBatch) -> None:
        """Apply one decoded batch, event by event, in order."""
        with self._lock:
            rec = self._rec(replica)
            c = rec.counters
            c.unknown_events += batch.unknown
            for event in batch.events:
                if isinstance(event, BlockStored):
                    self._store(rec, event)
                elif isinstance(event, BlockRemoved):
                    self._remove(rec, event)
                elif isinstance(event, AllBlocksCleared):
                    rec.tiers.clear()
                    c.clears += 1
                c.events_applied += 1
            self._changed(replica)

    def _parent(self, rec: _Replica, ev: BlockStored, tier: _Tier) -> ChainState | None:
        assert ev.parent is not None
        state = tier.by_hash.get(ev.parent)
        if state is not None:
            return state
        for (_medium, group), other in rec.tiers.items():  # e.g. an offloaded block's parent on the GPU
            if group == ev.group and other is not tier:
                state = other.by_hash.get(ev.parent)
                if state is not None:
                    return state
        return None

    def _store(self, rec: _Replica, ev: BlockStored) -> None:
        tier = rec.tiers.get((ev.medium, ev.group))
        if tier is None:
            tier = rec.tiers[(ev.medium, ev.group)] = _Tier(block_size=ev.block_size)
        tier.block_size = ev.block_size
        salt = None
        perturb = [0] * len(ev.block_hashes)
        for i, extra in enumerate(ev.extra_keys or ()):
            if extra is not None:
                first = ev.parent is None and i == 0
                s, perturb[i] = self.keyer.split_extra(extra, ev.lora_name, first)
                salt = s if first else salt
        if ev.parent is None:
            parent: ChainState | None = self.keyer.root(rec.model, ev.lora_name, salt)
        else:
            parent = self._parent(rec, ev, tier)
        if parent is None:
            rec.counters.orphan_blocks += len(ev.block_hashes)
            return
        states = self.keyer.extend(parent, ev.token_ids, ev.block_size, perturb)
        for h, state in zip(ev.block_hashes, states, strict=True):
            if h not in tier.by_hash:
                tier.by_hash[h] = state
                tier.keys[state.key] += 1

    def _remove(self, rec: _Replica, ev: BlockRemoved) -> None:
        tier = rec.tiers.get((ev.medium, ev.group))
        for h in ev.block_hashes:
            state = tier.by_hash.pop(h, None) if tier is not None else None
            if state is None:
                rec.counters.unresolved_removals += 1
                continue
            assert tier is not None
            left = tier.keys[state.key] - 1
            if left > 0:
                tier.keys[state.key] = left
            else:
                del tier.keys[state.key]

    # --- queries (the gateway) ------------------------------------------------------------------

    def replicas(self) -> list[str]:
        with self._lock:
            return sorted(self._replicas)

    def events_state(self, replica: str) -> str:
        """:data:`EVENTS_OFF`, :data:`EVENTS_WAITING` or :data:`EVENTS_LIVE`."""
        with self._lock:
            rec = self._replicas.get(replica)
            return rec.events if rec is not None else EVENTS_OFF

    def model_of(self, replica: str) -> str | None:
        """The model name that namespaces ``replica``'s block keys (pass it to :meth:`prompt_keys`)."""
        with self._lock:
            rec = self._replicas.get(replica)
            return rec.model if rec is not None else None

    def publishing(self, replica: str) -> bool:
        """Whether the index follows ``replica``'s events (else rely on something else)."""
        return self.events_state(replica) == EVENTS_LIVE

    def resident_prefix_blocks(
        self, replica: str, block_keys: Sequence[int] | np.ndarray, *, medium: str = MEDIUM_GPU, group: int = 0
    ) -> int:
        """How many of ``block_keys`` (a prompt's block keys, in order) are resident, counting
        from the first until the first one that is not (what a prefix-cache lookup reuses)."""
        with self._lock:
            rec = self._replicas.get(replica)
            tier = rec.tiers.get((medium, group)) if rec is not None else None
            if tier is None:
                return 0
            keys = tier.keys
            n = 0
            for k in block_keys:
                if int(k) not in keys:
                    break
                n += 1
            return n

    def holds(
        self, replica: str, block_keys: Sequence[int] | np.ndarray, *, medium: str = MEDIUM_GPU, group: int = 0
    ) -> bool:
        """Whether every one of ``block_keys`` is resident (a key's block-aligned prefix)."""
        return self.resident_prefix_blocks(replica, block_keys, medium=medium, group=group) == len(block_keys)

    def resident_keys(self, replica: str, *, medium: str = MEDIUM_GPU, group: int = 0) -> frozenset[int]:
        with self._lock:
            rec = self._replicas.get(replica)
            tier = rec.tiers.get((medium, group)) if rec is not None else None
            return frozenset(tier.keys) if tier is not None else frozenset()

    def block_size(self, replica: str, *, medium: str = MEDIUM_GPU, group: int = 0) -> int | None:
        """The block size of the replica's events in that tier (None before any ``BlockStored``)."""
        with self._lock:
            rec = self._replicas.get(replica)
            tier = rec.tiers.get((medium, group)) if rec is not None else None
            return tier.block_size if tier is not None and tier.block_size else None

    def prompt_keys(
        self,
        token_ids: Sequence[int] | np.ndarray,
        block_size: int,
        *,
        model: str | None,
        lora: str | None = None,
        cache_salt: str | None = None,
    ) -> list[int]:
        """The block keys of a prompt, to ask :meth:`resident_prefix_blocks` about."""
        return self.keyer.prompt_keys(token_ids, block_size, model=model, lora=lora, cache_salt=cache_salt)

    def status(self, replica: str) -> ReplicaStatus:
        with self._lock:
            rec = self._replicas.get(replica) or _Replica(None, None, EVENTS_OFF)
            blocks = {_tier_label(m, g): len(t.by_hash) for (m, g), t in rec.tiers.items()}
            sizes = {_tier_label(m, g): t.block_size for (m, g), t in rec.tiers.items()}
            return ReplicaStatus(
                replica=replica,
                events=rec.events,
                source=rec.source,
                resident_blocks=blocks,
                block_sizes=sizes,
                last_seq=rec.last_seq,
                last_event_at=rec.last_event_at,
                counters=rec.counters.snapshot(),
                resyncs=dict(rec.counters.resyncs),
                notes=tuple(rec.notes),
            )

    def statuses(self, replicas: Iterable[str] | None = None) -> list[ReplicaStatus]:
        return [self.status(r) for r in (self.replicas() if replicas is None else replicas)]


def _tier_label(medium: str, group: int) -> str:
    return medium if group == 0 else f"{medium}/g{group}"
