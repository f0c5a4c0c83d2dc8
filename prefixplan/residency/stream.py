"""One replica's event stream, in sequence: duplicates, reordering, gaps, replay, resyncs, restarts.

Engines number their batches 0, 1, 2, ... (8-byte big-endian, per publisher process). The stream
applies them to the :class:`~prefixplan.residency.index.ResidencyIndex` strictly in that order:

* a batch that arrives before its predecessors waits (bounded by ``max_pending``);
* a **gap** (a later batch arrived, an earlier one did not) asks the replay endpoint for every
  buffered batch from the first missing one; what the replay returns fills the gap and the
  waiting batches follow. Without a replay endpoint the gap may still close by itself within
  ``reorder_window`` seconds;
* a **duplicate** (a sequence number already applied, with the same payload digest) is dropped;
* a sequence number that goes back with a different payload is a **restart** of the engine: the
  replica's blocks are forgotten (a restarted engine holds none) and its stream is joined anew;
* a **resync** clears the replica and re-learns it from what comes next, and is counted by
  reason: ``replay-short`` (the replay buffer no longer holds the gap: re-learned from the oldest
  batch it holds), ``replay-incomplete`` (the replay ended with the gap still open),
  ``replay-timeout``, ``gap-no-replay`` (no replay endpoint, and the gap stayed open),
  ``pending-overflow``, ``undecodable`` (a batch could not be decoded: it may have removed blocks).

On start (and after a restart) the stream joins through the replay endpoint from sequence 0, so
an index started after the engine learns what the engine's buffer still holds (vLLM keeps the last
``buffer_steps`` batches, 10,000 by default). Without a replay endpoint it joins at the first batch
it receives. When idle it asks the replay endpoint every ``probe_interval`` seconds for batches
from the next expected number: that finds batches lost at the end of a burst, which no later
batch would reveal, and shows the publisher is alive.

The stream does no I/O: its methods take the clock reading and return the sequence number to ask
the replay endpoint for (or None); :mod:`prefixplan.residency.subscriber` does the sockets.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass

from prefixplan.residency.decode import UndecodablePayload, decode_batch
from prefixplan.residency.index import ResidencyIndex

END_SEQ = 0xFFFF_FFFF_FFFF_FFFF
"""The sequence number of the replay endpoint's end marker."""


@dataclass(frozen=True)
class StreamConfig:
    """How patient a stream is (seconds are the subscriber clock's)."""

    replay_timeout: float = 5.0
    reorder_window: float = 1.0
    max_pending: int = 4096
    duplicate_window: int = 4096
    probe_interval: float | None = 30.0


def _digest(payload: bytes) -> bytes:
    return hashlib.blake2b(payload, digest_size=8).digest()


class ReplicaStream:
    """The sequence state of one replica's events (module docstring)."""

    def __init__(
        self, replica: str, index: ResidencyIndex, *, replay: bool, config: StreamConfig | None = None
    ) -> None:
        self.replica = replica
        self.index = index
        self.replay = replay
        self.config = config or StreamConfig()
        self.counters = index.counters(replica)
        self.expected: int | None = None
        self.pending: dict[int, bytes] = {}
        self.recent: OrderedDict[int, bytes] = OrderedDict()
        self.asked: int | None = None  # start of the replay in flight
        self.asked_expected: int | None = None  # what was expected when it was asked
        self.purpose = ""  # join | gap | probe
        self.deadline = 0.0
        self.hole_since: float | None = None
        self.last_probe = 0.0
        self.replay_resets = 0  # bumped when an unanswered replay socket must be replaced

    # --- inputs ---------------------------------------------------------------------------------

    def start(self, now: float) -> int | None:
        """Joining: ask the replay endpoint for everything it holds."""
        self.last_probe = now
        return self._ask(0, "join", now) if self.replay else None

    def on_live(self, seq: int, payload: bytes, now: float) -> int | None:
        """A batch from the publisher; returns a replay start to ask for, or None."""
        self.counters.batches_received += 1
        self.index.mark_live(self.replica, now)
        if self.expected is None and self.asked is None:
            self.expected = seq  # no replay to join through: join here
        if self.expected is None or seq > self.expected:
            self._wait(seq, payload, now)
        elif seq == self.expected:
            self._apply(seq, payload, now)
            self._drain(now)
        elif self.recent.get(seq) == _digest(payload):
            self.counters.duplicates += 1
        else:
            return self._restart(seq, payload, now)
        return self._check_hole(now)

    def on_replay(self, seq: int, payload: bytes, now: float) -> None:
        """A batch the replay endpoint returned."""
        self.counters.batches_replayed += 1
        if self.asked is None:  # an answer to a request given up on: the socket is being replaced
            return
        self.index.mark_live(self.replica, now)
        if self.expected is None:
            self.expected = seq
        if seq < self.expected:
            return
        if seq > self.expected:
            self._resync("replay-short", f"replay began at {seq}, {self.expected} was needed", now)
            self.expected = seq
        self._apply(seq, payload, now)
        self._drain(now)

    def on_replay_end(self, now: float) -> int | None:
        """The replay endpoint's end marker; returns a replay start to ask for, or None."""
        if self.asked is None:
            return None
        self.index.mark_live(self.replica, now)
        self.asked = None
        self.last_probe = now
        if self.expected is None:
            self.expected = 0  # nothing was buffered: the publisher, numbering from 0, had sent nothing
        self._drain(now)
        if self.pending and min(self.pending) > self.expected:
            first = min(self.pending)
            if self.purpose == "gap" and self.expected == self.asked_expected:
                # asked after a later batch had arrived, so the missing ones were published before
                # the request: a buffer without them has lost them
                self._resync("replay-incomplete", f"batches {self.expected}..{first - 1} not returned", now)
                self.expected = first
                self._drain(now)
            # else they may have been published after the replay was served: asked for again below
        return self._check_hole(now)

    def tick(self, now: float) -> int | None:
        """Deadlines: replay timeouts, gaps without replay, idle probes."""
        if self.asked is not None:
            if now < self.deadline:
                return None
            self.counters.replay_timeouts += 1
            self.replay_resets += 1
            purpose, self.asked = self.purpose, None
            self.last_probe = now
            if purpose != "probe" and self.pending:
                first = min(self.pending)
                if self.expected is not None and first > self.expected:
                    self._resync("replay-timeout", f"no replay answer; batches {self.expected}..{first - 1} lost", now)
                self.expected = first if self.expected is None else max(first, self.expected)
                self._drain(now)
            return self._check_hole(now)
        if self.pending and not self.replay and self.hole_since is not None:
            if now - self.hole_since >= self.config.reorder_window:
                assert self.expected is not None
                first = min(self.pending)
                self._resync("gap-no-replay", f"batches {self.expected}..{first - 1} lost", now)
                self.expected = first
                self._drain(now)
            return self._check_hole(now)
        interval = self.config.probe_interval
        if self.replay and interval is not None and now - self.last_probe >= interval:
            if self.expected is None:
                return self._ask(0, "join", now)
            return self._ask(self.expected, "probe", now)
        return None

    # --- internals ------------------------------------------------------------------------------

    def _ask(self, start: int, purpose: str, now: float) -> int:
        self.asked, self.purpose, self.asked_expected = start, purpose, self.expected
        self.deadline = now + self.config.replay_timeout
        self.counters.replay_requests += 1
        return start

    def _wait(self, seq: int, payload: bytes, now: float) -> None:
        """Keep a batch that came before its predecessors (bounded)."""
        if seq in self.pending:
            self.counters.duplicates += 1
            return
        self.pending[seq] = payload
        if len(self.pending) > self.config.max_pending:
            first = min(self.pending)
            if self.expected is not None:
                self._resync("pending-overflow", f"{len(self.pending)} batches waited for {self.expected}", now)
            if self.asked is not None:
                self.asked = None
                self.replay_resets += 1
            self.expected = first
            self._drain(now)

    def _check_hole(self, now: float) -> int | None:
        """Count a gap that closed, or one that opened; while batches wait and no replay is in
        flight, ask the replay endpoint for the missing ones."""
        if not self.pending:
            if self.hole_since is not None:
                self.counters.gaps_healed += 1
            self.hole_since = None
            return None
        if self.expected is None:
            return None  # joining: the join replay decides where the stream starts
        if self.hole_since is None:
            self.counters.gaps += 1
            self.hole_since = now
        if self.replay and self.asked is None:
            return self._ask(self.expected, "gap", now)
        return None

    def _apply(self, seq: int, payload: bytes, now: float) -> None:
        assert self.expected == seq
        self.expected = seq + 1
        self.index.mark_live(self.replica, now, seq)
        self.recent[seq] = _digest(payload)
        while len(self.recent) > self.config.duplicate_window:
            self.recent.popitem(last=False)
        try:
            batch = decode_batch(payload)
        except UndecodablePayload as err:
            self.counters.undecodable += 1
            self._resync("undecodable", f"batch {seq}: {err}", now)
            return
        self.index.apply(self.replica, batch)
        self.counters.batches_applied += 1

    def _drain(self, now: float) -> None:
        """Apply the waiting batches that now follow in order."""
        if not self.pending:
            return
        assert self.expected is not None
        for seq in [s for s in self.pending if s < self.expected]:
            del self.pending[seq]  # returned by a replay meanwhile
        while self.expected in self.pending:
            seq = self.expected
            self._apply(seq, self.pending.pop(seq), now)
            self.counters.reordered += 1

    def _resync(self, reason: str, detail: str, now: float) -> None:
        """Forget the replica's blocks; whatever closes the open gap now is not a healed one."""
        self.counters.resyncs[reason] += 1
        self.index.note(self.replica, f"resync ({reason}): {detail}; blocks forgotten")
        self.index.clear(self.replica)
        self.hole_since = None

    def _restart(self, seq: int, payload: bytes, now: float) -> int | None:
        """The sequence went back: a new engine process. Forget the old one and join anew."""
        self.counters.restarts += 1
        self.index.note(self.replica, f"restart: sequence went back from {self.expected} to {seq}; blocks forgotten")
        self.index.clear(self.replica)
        self.recent.clear()
        self.pending = {}
        self.hole_since = None
        if self.asked is not None:
            self.replay_resets += 1  # an answer from the old process would be misread
            self.asked = None
        if self.replay:
            self.expected = None
            self.pending[seq] = payload
            return self._ask(0, "join", now)
        self.expected = seq
        self._apply(seq, payload, now)
        return None
