"""Report inputs (an analysis record, optional check findings) and writing the HTML / Markdown reports."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prefixplan.analysis.record import AnalysisRecord, load_record, read_json_file
from prefixplan.errors import InputError, UsageError


@dataclass(frozen=True, slots=True)
class ReportInput:
    """What a report shows: the record and, optionally, ``prefixplan check`` findings."""

    record: AnalysisRecord
    check: Mapping[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        """The JSON view the renderers read (the record, plus ``check`` when given)."""
        data = self.record.to_json()
        if self.check is not None:
            data["check"] = dict(self.check)
        return data


def load_report_input(path: str | Path, *, check: str | Path | None = None) -> ReportInput:
    """Read an analysis record (``prefixplan analyze --json``) and optionally check findings.

    Args:
        path: the record file, or ``-`` for stdin.
        check: a ``prefixplan check --json`` result whose ``findings`` are added to the report.

    Raises:
        InputError: the file is missing, not JSON, not an analysis record, or from a newer schema.
    """
    record = load_record(path)
    found = None
    if check is not None:
        result = read_json_file(check, "check result")
        if not isinstance(result, Mapping) or not isinstance(result.get("findings"), list):
            raise InputError(
                f"check result {check}: no findings list", hint="pass the file written by prefixplan check --json FILE"
            )
        found = {"findings": result["findings"], "exit_code": result.get("exit_code")}
    return ReportInput(record, found)


@dataclass(frozen=True, slots=True)
class Written:
    """What :func:`write_reports` wrote: ``(format, path)`` pairs."""

    files: tuple[tuple[str, str], ...]


def write_reports(
    report: ReportInput | AnalysisRecord,
    *,
    html: str | Path | None = None,
    markdown: str | Path | None = None,
    top: int | None = None,
    title: str | None = None,
) -> Written:
    """Write the HTML and/or Markdown report atomically (``-`` = stdout).

    Raises:
        UsageError: both outputs are stdout.
    """
    from prefixplan.core.fileio import atomic_write_text

    if html is not None and markdown is not None and str(html) == "-" and str(markdown) == "-":
        raise UsageError("--html - and --markdown - cannot both write to stdout")
    data = (report if isinstance(report, ReportInput) else ReportInput(report)).to_json()
    files = []
    if html is not None:
        from prefixplan.report.html import render_html

        atomic_write_text(html, render_html(data, top=top, title=title))
        files.append(("html", str(html)))
    if markdown is not None:
        from prefixplan.report.markdown import render_markdown

        atomic_write_text(markdown, render_markdown(data, top=10 if top is None else top, title=title))
        files.append(("markdown", str(markdown)))
    return Written(tuple(files))
