"""The commands that read what others wrote, each one call of one request: ``prefixplan report``
(:func:`run_report`), ``prefixplan diff`` (:func:`run_diff`) and ``prefixplan formats``
(:func:`run_formats`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from prefixplan.logs.detect import FormatInfo
    from prefixplan.report.diff import RecordDiff
    from prefixplan.report.files import Written


@dataclass(frozen=True)
class ReportRequest:
    """What ``prefixplan report`` is asked: the analysis record (``-``: stdin), the reports to
    write (``html``, ``markdown``; ``-``: stdout), and what they add: the findings of a
    ``check --json`` file, a ``baseline`` record to compare with, a model's KV size."""

    analysis: str
    html: str | None = None
    markdown: str | None = None
    check: str | None = None
    baseline: str | None = None
    model: str | None = None
    model_config: str | None = None
    top: int | None = None
    title: str | None = None


@dataclass(frozen=True)
class DiffRequest:
    """What ``prefixplan diff`` is asked: two analysis records, the earlier first."""

    before: str
    after: str


@dataclass(frozen=True)
class FormatsRequest:
    """``prefixplan formats`` takes nothing: every input format."""


def run_report(request: ReportRequest) -> Written:
    """The ``prefixplan report`` command as one call (:class:`ReportRequest`): read the record
    (and what the report adds) and write each report; returns what was written."""
    from prefixplan.report.files import load_report_input, write_reports

    report_input = load_report_input(
        request.analysis,
        check=request.check,
        baseline=request.baseline,
        model=request.model,
        model_config=request.model_config,
    )
    return write_reports(
        report_input, html=request.html, markdown=request.markdown, top=request.top, title=request.title
    )


def run_diff(request: DiffRequest) -> RecordDiff:
    """The ``prefixplan diff`` command as one call (:class:`DiffRequest`): what changed between
    two analysis records."""
    from prefixplan.report.diff import diff_files

    return diff_files(request.before, request.after)


def run_formats(request: FormatsRequest = FormatsRequest()) -> list[FormatInfo]:
    """The ``prefixplan formats`` command as one call: every input format, how it is detected and
    what it needs."""
    from prefixplan.logs.detect import formats_table

    return formats_table()
