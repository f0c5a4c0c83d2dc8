"""Report inputs (an analysis record, optional check findings, a baseline record, a KV size) and
writing the HTML / Markdown reports."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prefixplan.analysis.record import AnalysisRecord
from prefixplan.analysis.record_io import load_record, read_json_file
from prefixplan.errors import InputError, OutputsFailed, UsageError

if TYPE_CHECKING:
    from prefixplan.report.actions import KVSize


@dataclass(frozen=True, slots=True)
class ReportInput:
    """What a report shows: the record and, optionally, ``prefixplan check`` findings, an earlier
    record to compare with (``baseline``) and the KV size for GB figures (``kv``)."""

    record: AnalysisRecord
    check: Mapping[str, Any] | None = None
    baseline: AnalysisRecord | None = None
    baseline_name: str | None = None
    kv: KVSize | None = None

    def to_json(self) -> dict[str, Any]:
        """The JSON view the renderers read (the record, plus ``check`` when given)."""
        data = self.record.to_json()
        if self.check is not None:
            data["check"] = dict(self.check)
        return data


def load_report_input(
    path: str | Path,
    *,
    check: str | Path | None = None,
    baseline: str | Path | None = None,
    model: str | None = None,
    model_config: str | None = None,
) -> ReportInput:
    """Read an analysis record (``prefixplan analyze --json``) and optionally check findings, a
    baseline record and a model's KV size (``model``: a built-in name; ``model_config``: a
    ``config.json``).

    Raises:
        InputError: a file is missing, not JSON, not an analysis record, or from a newer schema.
        UsageError: the model is not in the built-in KV table.
    """
    from prefixplan.report.actions import resolve_kv

    record = load_record(path)
    found = None
    if check is not None:
        result = read_json_file(check, "check result")
        if not isinstance(result, Mapping) or not isinstance(result.get("findings"), list):
            raise InputError(
                f"check result {check}: no findings list", hint="pass the file written by prefixplan check --json FILE"
            )
        found = {"findings": result["findings"], "exit_code": result.get("exit_code")}
    base = load_record(baseline) if baseline is not None else None
    return ReportInput(
        record,
        found,
        base,
        str(baseline) if baseline is not None else None,
        resolve_kv(model, model_config),
    )


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
    """Write the HTML and/or Markdown report atomically (``-`` = stdout). Each is written on its
    own: one that cannot be written does not stop the other.

    Raises:
        UsageError: both outputs are stdout; or a report could not be written (the message names
            each failure and what was written).
    """
    from prefixplan.core.fileio import atomic_write_text

    if html is not None and markdown is not None and str(html) == "-" and str(markdown) == "-":
        raise UsageError("--html - and --markdown - cannot both write to stdout")
    rep = report if isinstance(report, ReportInput) else ReportInput(report)
    data = rep.to_json()
    diff = None
    if rep.baseline is not None:
        from prefixplan.report.diff import diff_records

        base = rep.baseline.to_json()
        diff = diff_records(base, data, before_name=f"{rep.baseline_name} (baseline)", after_name="this analysis")
    files: list[tuple[str, str]] = []
    failed: list[str] = []
    if html is not None:
        from prefixplan.report.diff import render_diff_html
        from prefixplan.report.html import render_html

        extra = [render_diff_html(diff)] if diff is not None else []
        try:
            atomic_write_text(html, render_html(data, top=top, title=title, kv=rep.kv, extra_sections=extra))
            files.append(("html", str(html)))
        except UsageError as err:
            failed.append(str(err))
    if markdown is not None:
        from prefixplan.report.diff import render_diff_markdown
        from prefixplan.report.markdown import render_markdown

        lines = render_diff_markdown(diff, title="Compared with the baseline", level=3).splitlines() if diff else []
        text = render_markdown(
            data, top=10 if top is None else top, title=title, kv=rep.kv, extra=[*lines, ""] if lines else []
        )
        try:
            atomic_write_text(markdown, text)
            files.append(("markdown", str(markdown)))
        except UsageError as err:
            failed.append(str(err))
    if failed:
        raise OutputsFailed(failed, files)
    return Written(tuple(files))
