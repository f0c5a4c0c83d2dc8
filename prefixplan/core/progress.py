"""Progress of long passes, reported by the library and shown (or not) by the caller.

The library calls ``begin(pass_name, total_bytes)``, ``update(requests, tokens, bytes_done)``,
``workers(busy, total)`` (render workers at work vs waiting for the parent) and ``end()``; the command line shows rich progress bars on a terminal and one summary line
otherwise. ``NO_PROGRESS`` ignores everything (the default for library calls).
"""

from __future__ import annotations

from typing import Protocol


class Progress(Protocol):
    """What a pass reports while it runs."""

    def begin(self, name: str, total_bytes: int | None = None) -> None: ...

    def update(self, requests: int, tokens: int, bytes_done: int | None = None) -> None: ...

    def workers(self, busy: int, total: int) -> None: ...

    def end(self) -> None: ...


class NoProgress:
    """A :class:`Progress` that shows nothing."""

    def begin(self, name: str, total_bytes: int | None = None) -> None:
        return None

    def update(self, requests: int, tokens: int, bytes_done: int | None = None) -> None:
        return None

    def workers(self, busy: int, total: int) -> None:
        return None

    def end(self) -> None:
        return None


NO_PROGRESS = NoProgress()
