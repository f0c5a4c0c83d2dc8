"""What ``check`` and ``lock`` report: findings, their exit codes, and the results."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prefixplan.errors import ExitCode

FAIL_LEVELS = ("error", "warning")


@dataclass(frozen=True, slots=True)
class Finding:
    """One result of ``check``.

    ``exit_code`` is what the finding makes ``check`` return when it counts as failing
    (lint warnings count only with ``fail_on="warning"``).
    """

    code: str
    severity: str  # error | warning | notice
    message: str
    key: str | None = None
    part: str | None = None
    file: str | None = None
    line: int | None = None
    column: int | None = None
    diff: tuple[str, ...] = ()
    cost_tokens: int | None = None
    exit_code: int = ExitCode.FINDINGS

    def to_dict(self) -> dict[str, Any]:
        d = {f: getattr(self, f) for f in self.__dataclass_fields__}
        d["diff"] = list(self.diff)
        return d


@dataclass(frozen=True, slots=True)
class CheckResult:
    """Findings of one ``check`` run and the exit code they imply."""

    findings: tuple[Finding, ...]
    exit_code: int
    keys: tuple[str, ...] = ()
    base_ref: str | None = None
    fail_on: str = "error"

    @property
    def ok(self) -> bool:
        return self.exit_code == ExitCode.OK

    def to_dict(self) -> dict[str, Any]:
        return {
            "exit_code": self.exit_code,
            "ok": self.ok,
            "keys": list(self.keys),
            "base_ref": self.base_ref,
            "fail_on": self.fail_on,
            "findings": [f.to_dict() for f in self.findings],
        }


@dataclass(frozen=True, slots=True)
class LockResult:
    """What ``lock_recipes`` did."""

    path: Path
    written: bool
    added: tuple[str, ...]
    unchanged: tuple[str, ...]
    removed: tuple[str, ...]
    registered: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "written": self.written,
            "added": list(self.added),
            "unchanged": list(self.unchanged),
            "removed": list(self.removed),
            "registered": list(self.registered),
        }


def exit_code_of(findings: Sequence[Finding], fail_on: str) -> int:
    codes = set()
    for f in findings:
        if f.severity == "error" or (fail_on == "warning" and f.severity == "warning"):
            codes.add(f.exit_code)
    for code in (ExitCode.USAGE, ExitCode.FINDINGS, ExitCode.NOT_LOCKED):
        if code in codes:
            return code
    return ExitCode.OK
