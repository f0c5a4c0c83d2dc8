"""Jobs wait here, not in the pool's queue, until a render worker can start them.

A job given to ``ProcessPoolExecutor`` is soon moved into the queue its processes read, and
from there it cannot be taken back: at the end of a pass one worker could still hold a whole
file it has not started while every other process has finished. :class:`Dispatcher` keeps the
jobs in a queue of its own, hands a worker the next one the moment its last finishes (a done
callback, on the pool's thread), keeps at most ``depth(job)`` jobs per ready worker in the pool
(one for whole files: seconds each; a few for small ones, so no worker waits for a round trip),
and lets the calling process take the oldest waiting job whenever it is free to render one.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Generic, TypeVar

J = TypeVar("J")
R = TypeVar("R")


class Dispatcher(Generic[J, R]):
    """Jobs waiting for a worker, the jobs the workers hold, and each job's slot: a future set
    with the job's result wherever it runs (a worker, or the caller through :meth:`take`).

    ``submit`` hands a job to the pool; ``ready`` says how many workers have started; ``depth``
    how many jobs like this one a ready worker may hold (running and queued)."""

    def __init__(
        self,
        submit: Callable[[J], Future[R]],
        ready: Callable[[], int],
        depth: Callable[[J], int],
    ) -> None:
        self._submit = submit
        self._ready = ready
        self._depth = depth
        # re-entrant: a run's generator that the garbage collector closes on the pool's thread
        # while that thread is inside fill() calls close() there, and must not wait on itself
        self._lock = threading.RLock()
        self._waiting: deque[tuple[Future[R], J]] = deque()
        self._held: dict[Future[R], Future[R]] = {}  # a worker's future -> the job's slot
        self._closed = False

    def add(self, job: J) -> Future[R]:
        """Queue ``job``; its slot (handed to a worker at once if one has room; cancelled once
        the dispatcher is closed)."""
        slot: Future[R] = Future()
        with self._lock:
            if self._closed:
                slot.cancel()
                return slot
            self._waiting.append((slot, job))
        self.fill()
        return slot

    def fill(self, _done: object = None) -> None:
        """Hand waiting jobs, oldest first, to the workers while they have room (also a done
        callback: of a worker's warm-up, ``_done``)."""
        handed: list[Future[R]] = []
        with self._lock:
            ready = self._ready()
            while not self._closed and self._waiting and len(self._held) < ready * self._depth(self._waiting[0][1]):
                slot, job = self._waiting.popleft()
                try:
                    future = self._submit(job)
                except Exception as exc:  # a broken pool: the job's slot says so
                    slot.set_exception(exc)
                    continue
                self._held[future] = slot
                handed.append(future)
        for future in handed:  # outside the lock: a future already done calls back at once
            future.add_done_callback(self._finished)

    def _finished(self, future: Future[R]) -> None:
        with self._lock:
            slot = self._held.pop(future, None)
        if slot is not None and not slot.done():
            if future.cancelled():
                slot.cancel()
            elif (exc := future.exception()) is not None:
                slot.set_exception(exc)
            else:
                slot.set_result(future.result())
        self.fill()

    def waiting(self) -> int:
        """Jobs no worker holds yet."""
        return len(self._waiting)

    def held(self) -> int:
        """Jobs the workers hold (running or queued in the pool)."""
        return len(self._held)

    def take(self, slot: Future[R] | None = None) -> tuple[Future[R], J] | None:
        """The job of ``slot`` if it is still waiting (None: the oldest waiting job), removed
        from the queue for the caller to render; None when there is none."""
        with self._lock:
            if slot is None:
                return self._waiting.popleft() if self._waiting else None
            for at, (waiting, job) in enumerate(self._waiting):
                if waiting is slot:
                    del self._waiting[at]
                    return waiting, job
        return None

    def close(self) -> None:
        """Hand out nothing more; cancel the waiting jobs and those the workers have not started."""
        with self._lock:
            self._closed = True
            waiting, self._waiting = list(self._waiting), deque()
            held = list(self._held)
        for slot, _ in waiting:
            slot.cancel()
        for future in held:
            future.cancel()
