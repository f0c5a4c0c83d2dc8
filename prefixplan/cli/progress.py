"""Progress on the command line: rich bars on a terminal, one summary line per pass otherwise.

Each pass shows its name, requests and tokens done, the rate, how many render workers are at
work (the others wait for the parent), and (when the input's size is known) a bar with the time
remaining. Under ``-q`` nothing is shown; when stderr is not a
terminal (CI logs) each pass ends with one line: name, requests, tokens, seconds, tokens/s.
"""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console


class ConsoleProgress:
    """A :class:`prefixplan.core.progress.Progress` for the terminal (module docstring)."""

    def __init__(self, console: Console, *, quiet: bool = False, clock: Any = time.monotonic) -> None:
        self.console = console
        self.quiet = quiet
        self.live = console.is_terminal and not quiet
        self.clock = clock
        self._bar: Any = None
        self._task: Any = None
        self._name = ""
        self._started = 0.0
        self._requests = 0
        self._tokens = 0
        self._workers = ""

    def begin(self, name: str, total_bytes: int | None = None) -> None:
        self._name, self._started, self._requests, self._tokens = name, self.clock(), 0, 0
        self._workers = ""
        if not self.live:
            return
        from rich.progress import (
            BarColumn,
            Progress,
            SpinnerColumn,
            TaskProgressColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        columns: list[Any] = [SpinnerColumn(), TextColumn("[bold]{task.description}")]
        if total_bytes:
            columns += [BarColumn(), TaskProgressColumn(), TimeRemainingColumn()]
        columns += [TextColumn("{task.fields[counts]}"), TimeElapsedColumn()]
        self._bar = Progress(*columns, console=self.console, transient=True)
        self._bar.start()
        self._task = self._bar.add_task(name, total=total_bytes or None, counts="")

    def update(self, requests: int, tokens: int, bytes_done: int | None = None) -> None:
        self._requests, self._tokens = requests, tokens
        if self._bar is None:
            return
        elapsed = max(self.clock() - self._started, 1e-9)
        counts = f"{requests:,} requests, {tokens:,} tokens, {tokens / elapsed:,.0f} tokens/s{self._workers}"
        self._bar.update(self._task, completed=bytes_done if bytes_done is not None else None, counts=counts)

    def workers(self, busy: int, total: int) -> None:
        """``busy`` of ``total`` render workers have a job (shown with the next update)."""
        self._workers = f", workers {busy}/{total} busy"

    def end(self) -> None:
        elapsed = self.clock() - self._started
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
        if self.quiet or elapsed < 1.0:
            return
        if self._requests:
            rate = self._tokens / elapsed if elapsed > 0 else 0.0
            self.console.print(
                f"{self._name}: {self._requests:,} requests, {self._tokens:,} tokens in {elapsed:.1f} s "
                f"({rate:,.0f} tokens/s)",
                highlight=False,
            )
        else:
            self.console.print(f"{self._name}: {elapsed:.1f} s", highlight=False)
