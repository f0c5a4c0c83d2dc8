"""The malformed lines of a run on the console, the same for every command that reads logs: the
count by reason, then up to ten samples as ``file:line: reason``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.console import Console
from rich.markup import escape

SHOWN_SAMPLES = 10


def render_line_errors(errors: Mapping[str, Any] | None, console: Console) -> None:
    """Print ``errors`` (a command's JSON ``errors``: count, by_reason, samples) when any."""
    if not errors or not errors.get("count"):
        return
    by_reason = errors.get("by_reason") or {}
    console.print(
        f"[yellow]{errors['count']} malformed line(s) skipped[/]"
        + (" — " + ", ".join(f"{k}: {v}" for k, v in sorted(by_reason.items())) if by_reason else "")
    )
    for e in (errors.get("samples") or [])[:SHOWN_SAMPLES]:
        console.print(escape(f"  {e['source']}:{e['line']}: {e['reason']}"))
