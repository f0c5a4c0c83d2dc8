"""Bounded re-warming: when an engine evicts a key the gateway keeps warm, warm it again, but never
so often that a thrashing cache is made worse.

:class:`RewarmSchedule` is pure (an injected clock, no I/O). Per (key, replica):

* the first re-warm after an eviction is due at once;
* each further attempt waits ``backoff_s`` x 2^(attempts-1), at most ``max_backoff_s``, after the
  previous one (counted from when it was sent);
* a key that stayed resident ``stable_s`` since its last re-warm starts again from no attempts;
* a failed re-warm is due again after its back-off.

Across the fleet at most ``per_minute`` re-warms are sent in any 60 seconds; the ones held back
stay due (``deferred`` counts how many times one was held back).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from prefixplan.errors import UsageError

REWARM_KEYS = ("pinned", "all", "off")
"""Which keys are re-warmed: recipes with ``pin: true``, every active key, or none."""


@dataclass(frozen=True, slots=True)
class RewarmConfig:
    """Which keys are re-warmed and how patiently (module docstring)."""

    keys: str = "pinned"
    backoff_s: float = 5.0
    max_backoff_s: float = 300.0
    per_minute: int = 6
    stable_s: float = 300.0

    def __post_init__(self) -> None:
        if self.keys not in REWARM_KEYS:
            raise UsageError(f"unknown --rewarm {self.keys!r}", hint=f"use one of {', '.join(REWARM_KEYS)}")
        if self.backoff_s <= 0 or self.max_backoff_s < self.backoff_s or self.per_minute < 1:
            raise UsageError("re-warm back-off must be > 0 (max >= base) and the per-minute limit >= 1")


@dataclass
class _Entry:
    attempts: int = 0
    last_attempt: float | None = None
    due: float | None = None  # None: nothing to do (resident, or a re-warm in flight)
    resident_since: float | None = None


class RewarmSchedule:
    """When each evicted (key, replica) may be re-warmed (module docstring)."""

    def __init__(self, config: RewarmConfig | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config or RewarmConfig()
        self.clock = clock
        self._entries: dict[tuple[str, str], _Entry] = {}
        self._sent: deque[float] = deque()
        self.deferred = 0

    def backoff(self, attempts: int) -> float:
        """Seconds to wait after the ``attempts``-th re-warm."""
        if attempts <= 0:
            return 0.0
        c = self.config
        return min(c.max_backoff_s, c.backoff_s * 2.0 ** (attempts - 1))

    def evicted(self, key: str, replica: str) -> None:
        """``key`` was evicted on ``replica``: a re-warm becomes due (after its back-off)."""
        now = self.clock()
        e = self._entries.setdefault((key, replica), _Entry())
        if e.resident_since is not None and now - e.resident_since >= self.config.stable_s:
            e.attempts = 0
        e.resident_since = None
        after = e.last_attempt + self.backoff(e.attempts) if e.last_attempt is not None else now
        e.due = max(now, after) if e.attempts else now

    def resident(self, key: str, replica: str) -> None:
        """``key`` is resident on ``replica`` again (nothing due)."""
        e = self._entries.get((key, replica))
        if e is not None:
            e.due = None
            if e.resident_since is None:
                e.resident_since = self.clock()

    def failed(self, key: str, replica: str) -> None:
        """A re-warm did not make it resident: due again after the back-off."""
        e = self._entries.get((key, replica))
        if e is not None and e.last_attempt is not None:
            e.due = e.last_attempt + self.backoff(e.attempts)

    def forget(self, key: str) -> None:
        for k in [k for k in self._entries if k[0] == key]:
            del self._entries[k]

    def take(self) -> list[tuple[str, str]]:
        """The (key, replica) re-warms to send now, within the per-minute limit, earliest due first."""
        now = self.clock()
        while self._sent and self._sent[0] <= now - 60.0:
            self._sent.popleft()
        due = sorted(
            ((e.due, k) for k, e in self._entries.items() if e.due is not None and e.due <= now),
            key=lambda x: (x[0], x[1]),
        )
        out = []
        for _, k in due:
            if len(self._sent) >= self.config.per_minute:
                self.deferred += 1
                continue
            e = self._entries[k]
            e.attempts += 1
            e.last_attempt = now
            e.due = None
            self._sent.append(now)
            out.append(k)
        return out

    def pending(self) -> int:
        """(key, replica) pairs waiting for a re-warm."""
        return sum(1 for e in self._entries.values() if e.due is not None)
