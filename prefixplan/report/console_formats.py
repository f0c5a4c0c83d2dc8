"""``prefixplan formats``: the table of input formats on the console."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from prefixplan.logs.detect import SNIFF_LINES, FormatInfo


def render_formats(formats: Sequence[FormatInfo], console: Console) -> None:
    """One row per format: what writes it, how it is detected, what it needs, where ids come from."""
    table = Table(title="Input formats (--log-format NAME forces one; auto detects them)", title_justify="left")
    for column in ("format", "written by", "detected by", "needs", "token ids"):
        table.add_column(column, overflow="fold")
    for f in formats:
        table.add_row(f.name, escape(f.source), escape(f.detected_by), escape(f.needs), escape(f.tokens))
    console.print(table)
    console.print(
        f"JSON-lines formats are detected per line (a file may mix them); server logs per file, from "
        f"their first {SNIFF_LINES} non-blank lines. A folder is read file by file. Parquet and CSV tables "
        f"hold one request a row (.parquet, .csv, .csv.gz or --log-format parquet|csv; --columns maps fields "
        f"to columns); inputs may be s3://, gs://, az:// or https:// URLs. Details: docs/logs.md"
    )
