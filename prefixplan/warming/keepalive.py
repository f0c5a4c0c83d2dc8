"""``warm --every``: re-warm on a fixed period so prefixes stay below the eviction horizon.

Rounds never overlap (each starts only after the previous one finished; missed ticks are skipped,
not caught up), the total run time is bounded, and SIGTERM / SIGINT stop it cleanly: the signal
sets an event that the round checks between prefixes (requests in flight finish, the rest are
skipped) and that the loop waits on between rounds, never in an uninterruptible sleep.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from prefixplan.errors import UsageError

R = TypeVar("R")


def keepalive(
    run_round: Callable[[int], R],
    every_s: float,
    *,
    max_duration_s: float | None = None,
    max_rounds: int | None = None,
    stop: threading.Event | None = None,
    on_round: Callable[[int, R], None] | None = None,
    install_signals: bool = True,
    clock: Callable[[], float] = time.monotonic,
) -> list[R]:
    """Call ``run_round(i)`` every ``every_s`` seconds until stopped; return the rounds' results.

    Stops after ``max_rounds`` rounds, when ``max_duration_s`` has passed (no round starts after
    it), or when ``stop`` is set (by SIGTERM/SIGINT when ``install_signals`` and on the main thread).
    """
    if every_s <= 0:
        raise UsageError("--every must be > 0")
    stop = stop or threading.Event()
    previous: dict[signal.Signals, Any] = {}
    if install_signals and threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            previous[sig] = signal.signal(sig, lambda *_: stop.set())
    results: list[R] = []
    start = clock()
    try:
        i = 0
        while not stop.is_set():
            if max_rounds is not None and i >= max_rounds:
                break
            if max_duration_s is not None and clock() - start >= max_duration_s:
                break
            result = run_round(i)
            results.append(result)
            if on_round is not None:
                on_round(i, result)
            i += 1
            now = clock()
            # Next tick on the fixed grid; skip ticks a long round overran.
            ticks = int((now - start) // every_s) + 1
            wait = start + ticks * every_s - now
            if max_duration_s is not None:
                wait = min(wait, max(0.0, start + max_duration_s - now))
            if (max_rounds is not None and i >= max_rounds) or stop.wait(max(0.0, wait)):
                break
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return results
