"""The inputs of an analysis on the console: the header line, and one section per model.

The header's first line is a warning when a tokenizer is not the log model's (the record's
``tokenizer.matches_log_model`` is false): counts are then approximate, and the line names the
``--tokenizer`` to use. Otherwise (and after the warning) it names the inputs and the format each
file was read as.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table


def mismatch_line(record: Mapping[str, Any]) -> str | None:
    """``warning: ...`` when a tokenizer of the record is not its log model's, else None."""
    for tok in [record.get("tokenizer") or {}, *(record.get("tokenizers") or [])]:
        if tok.get("matches_log_model") is False:
            models = tok.get("log_models") or []
            named = ", ".join(models[:3]) + (" ..." if len(models) > 3 else "") or "?"
            use = f"; use {tok['suggested']}" if tok.get("suggested") else ""
            return (
                f"warning: tokenizer {tok.get('spec')} is not the tokenizer of the log's "
                f"model{'s' if len(models) > 1 else ''} ({named}): token counts are APPROXIMATE{use}"
            )
    return None


def inputs_line(record: Mapping[str, Any]) -> str:
    """``prefixplan analyze — FILE (format), ...`` from ``inputs.files`` (paths when absent)."""
    inputs = record.get("inputs") or {}
    files = inputs.get("files") or []
    if not files:
        return "prefixplan analyze — " + ", ".join(inputs.get("paths") or [])
    parts = []
    for f in files:
        formats = f.get("formats") or {}
        kinds = ", ".join(formats) if formats else f.get("reader", "?")
        parts.append(f"{f.get('path')} ({kinds})")
    return "prefixplan analyze — " + "; ".join(parts)


def header_lines(record: Mapping[str, Any]) -> list[str]:
    """The first lines of the analyze report (markup-escaped, ready to print)."""
    lines = []
    warning = mismatch_line(record)
    if warning is not None:
        lines.append(f"[bold yellow]{escape(warning)}[/]")
    lines.append(f"[bold]prefixplan analyze[/]{escape(inputs_line(record)[len('prefixplan analyze') :])}")
    return lines


def render_models(record: Mapping[str, Any], console: Console) -> None:
    """One row per model (requests, tokens, reusable share, tokenizer) when the log has several,
    plus what the readers noted per file (cut prompts, skipped calls)."""
    inputs = record.get("inputs") or {}
    per_model = inputs.get("per_model") or {}
    if len(per_model) > 1:
        table = Table(title="Per model (each its own cache namespace and tokenizer)", title_justify="left")
        table.add_column("model")
        table.add_column("requests", justify="right")
        table.add_column("prompt tokens", justify="right")
        table.add_column("reusable", justify="right")
        table.add_column("tokenizer")
        for model, row in per_model.items():
            table.add_row(
                escape(model),
                f"{row['requests']:,}",
                f"{row['prompt_tokens']:,}",
                f"{row['reusable_tokens']:,} ({100 * row['hit_rate_tokens']:.1f}%)",
                escape(str(row.get("tokenizer") or "-")),
            )
        console.print(table)
    for f in inputs.get("files") or []:
        for note in f.get("notes") or []:
            console.print(escape(f"{f.get('path')}: {note}"))
