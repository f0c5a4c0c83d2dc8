"""GitHub Actions annotations (workflow commands) for ``check --format github``."""

from __future__ import annotations

from prefixplan.gate.findings import CheckResult


def _esc_data(s: str) -> str:
    return s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _esc_prop(s: str) -> str:
    return _esc_data(s).replace(":", "%3A").replace(",", "%2C")


def github_annotations(result: CheckResult) -> list[str]:
    """GitHub Actions workflow commands (``::error file=F,line=L,title=T::message``), one per finding."""
    out = []
    for f in result.findings:
        level = {"error": "error", "warning": "warning"}.get(f.severity, "notice")
        props = []
        if f.file:
            props.append(f"file={_esc_prop(f.file)}")
        if f.line:
            props.append(f"line={int(f.line)}")
        if f.column:
            props.append(f"col={int(f.column)}")
        title = f.code + (f" {f.key}" if f.key else "")
        props.append(f"title={_esc_prop(title)}")
        body = f.message + ("\n" + "\n".join(f.diff) if f.diff else "")
        out.append(f"::{level} {','.join(props)}::{_esc_data(body)}")
    return out
