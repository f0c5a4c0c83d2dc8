"""Reading analysis records and writing the HTML / Markdown reports (``prefixplan report``)."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prefixplan.errors import InputError, UsageError

KNOWN_SCHEMA = 1


def _read_json(path: str | Path, what: str) -> Any:
    try:
        text = sys.stdin.read() if str(path) == "-" else Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{what} {path}: no such file", hint="write one with prefixplan analyze LOG --json FILE") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{what} {path}: cannot read ({exc})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{what} {path}: not JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})") from None


def load_record(path: str | Path, *, check: str | Path | None = None) -> dict[str, Any]:
    """Read an analysis record (``prefixplan analyze --json``); optionally merge check findings.

    Args:
        path: the record file, or ``-`` for stdin.
        check: a ``prefixplan check --json`` result whose ``findings`` are added to the report.

    Raises:
        InputError: the file is missing, not JSON, not an analysis record, or from a newer schema.
    """
    record = _read_json(path, "analysis record")
    if not isinstance(record, dict) or "summary" not in record or "schema_version" not in record:
        raise InputError(f"analysis record {path}: not an analysis record (no schema_version/summary)",
                         hint="pass the file written by prefixplan analyze LOG --json FILE")
    if not isinstance(record["schema_version"], int) or record["schema_version"] > KNOWN_SCHEMA:
        raise InputError(f"analysis record {path}: schema_version {record['schema_version']!r} is newer than this "
                         f"prefixplan understands ({KNOWN_SCHEMA})", hint="upgrade prefixplan")
    if check is not None:
        result = _read_json(check, "check result")
        if not isinstance(result, Mapping) or not isinstance(result.get("findings"), list):
            raise InputError(f"check result {check}: no findings list", hint="pass the file written by prefixplan check --json FILE")
        record = {**record, "check": {"findings": result["findings"], "exit_code": result.get("exit_code")}}
    return record


@dataclass(frozen=True, slots=True)
class Written:
    """What :func:`write_reports` wrote: ``(format, path)`` pairs."""

    files: tuple[tuple[str, str], ...]


def write_reports(record: Mapping[str, Any], *, html: str | Path | None = None, markdown: str | Path | None = None,
                  top: int | None = None, title: str | None = None) -> Written:
    """Write the HTML and/or Markdown report of ``record`` atomically (``-`` = stdout).

    Raises:
        UsageError: both outputs are stdout.
    """
    from prefixplan.core.fileio import atomic_write_text

    if html is not None and markdown is not None and str(html) == "-" and str(markdown) == "-":
        raise UsageError("--html - and --markdown - cannot both write to stdout")
    files = []
    if html is not None:
        from prefixplan.report.html import render_html

        atomic_write_text(html, render_html(record, top=top, title=title))
        files.append(("html", str(html)))
    if markdown is not None:
        from prefixplan.report.markdown import render_markdown

        atomic_write_text(markdown, render_markdown(record, top=10 if top is None else top, title=title))
        files.append(("markdown", str(markdown)))
    return Written(tuple(files))
