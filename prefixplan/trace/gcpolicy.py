"""Fewer garbage-collector passes while a log is read and rendered.

Parsing a log line allocates dicts and lists by the thousand; with CPython's default thresholds
(a young collection every 700 net allocations, the oldest generation after ten of the middle
one) a one-process analyze of the pinned 100k-request log ran 181 full collections, each
walking every object of the process (the tokenizer, transformers' modules: about 70 ms each),
12% of the run. Reading and rendering make almost no reference cycles (what they drop is freed
by reference counting at once), so while :func:`relaxed_gc` is active the youngest generation
is collected every :data:`YOUNG_THRESHOLD` net allocations and the older ones ten and a hundred
times less often. Cyclic garbage, if any, waits a little longer; nothing else changes.

The setting is process-wide: nested or concurrent scopes share one (a counter), and the
thresholds in force before the first scope come back when the last one ends. Render workers
(processes of prefixplan's own) keep it for their life (:func:`relax_for_process`).
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

YOUNG_THRESHOLD = 50_000
MIDDLE_THRESHOLD = 20
OLD_THRESHOLD = 100

_lock = threading.Lock()
_depth = 0
_saved: tuple[int, int, int] | None = None


def _relaxed(current: tuple[int, int, int]) -> tuple[int, int, int]:
    """Never lower a threshold the caller set higher (0 keeps automatic collection off)."""
    if current[0] == 0:
        return current
    return (max(current[0], YOUNG_THRESHOLD), max(current[1], MIDDLE_THRESHOLD), max(current[2], OLD_THRESHOLD))


def relax_for_process() -> None:
    """Relax the thresholds for the rest of this process's life (a render worker)."""
    gc.set_threshold(*_relaxed(gc.get_threshold()))


@contextmanager
def relaxed_gc() -> Iterator[None]:
    """Relaxed collector thresholds for the duration (module docstring)."""
    global _depth, _saved
    with _lock:
        if _depth == 0:
            _saved = gc.get_threshold()
            gc.set_threshold(*_relaxed(_saved))
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _saved is not None:
                gc.set_threshold(*_saved)
                _saved = None
