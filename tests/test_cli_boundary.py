"""The one error boundary: unexpected exceptions exit 70 (not 1, which means findings);
unwritable output paths are usage errors naming the path, not tracebacks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from prefixplan.cli.app import main
from prefixplan.errors import ExitCode


def _log(tmp_path: Path) -> Path:
    log = tmp_path / "log.jsonl"
    log.write_text(json.dumps({"model": "m", "messages": [{"role": "user", "content": "hello"}]}) + "\n")
    return log


def test_unexpected_exception_exits_internal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    import prefixplan.analysis.pipeline

    def boom(*args, **kwargs):
        raise RuntimeError("planted bug")

    monkeypatch.setattr(prefixplan.analysis.pipeline, "run_analysis", boom)
    assert main(["analyze", str(_log(tmp_path)), "--no-store", "-q"]) == ExitCode.INTERNAL == 70
    assert "planted bug" in capsys.readouterr().err


@pytest.mark.parametrize("where", ["folder", "under-a-file"])
def test_unwritable_json_output_is_a_usage_error(tmp_path: Path, capsys, where: str) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    target = tmp_path if where == "folder" else blocker / "out.json"
    assert main(["analyze", str(_log(tmp_path)), "--no-store", "-q", "--json", str(target)]) == ExitCode.USAGE
    err = capsys.readouterr().err
    assert "error:" in err and "cannot write" in err and "Traceback" not in err
    assert blocker.read_text() == "x"


def test_negative_top_is_refused(tmp_path: Path, capsys) -> None:
    # a negative --top used to slice candidates[:-1], silently dropping the last one
    assert main(["analyze", str(_log(tmp_path)), "--no-store", "-q", "--top", "-1"]) == ExitCode.USAGE
    assert "--top" in capsys.readouterr().err
