"""Console construction for command output."""

from __future__ import annotations

import os
import shutil

from rich.console import Console


def report_console(*, stderr: bool = False) -> Console:
    """A console for reports: the terminal's width, or 160 columns when output is piped
    (``COLUMNS`` overrides), so tables stay readable in CI logs."""
    probe = Console(stderr=stderr)
    width = None
    if not probe.is_terminal:
        width = int(os.environ.get("COLUMNS", 0)) or max(shutil.get_terminal_size((160, 24)).columns, 160)
    return Console(stderr=stderr, width=width, highlight=False)
