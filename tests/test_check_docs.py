"""docs/keys.md: its commands run, its GitHub Actions step is valid, its sample output is real."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from prefixplan.cli.app import main

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "keys.md"


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", DOC.read_text(), flags=re.S)


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.email=t@example.com", "-c", "user.name=t", "-c", "commit.gpgsign=false", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
    )


@pytest.fixture()
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    shutil.copytree(ROOT / "recipes", tmp_path / "recipes")
    monkeypatch.chdir(tmp_path)
    _git(tmp_path, "init", "-q")
    assert main(["lock"]) == 0
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-q", "-m", "base")
    _git(tmp_path, "update-ref", "refs/remotes/origin/main", "HEAD")  # stands in for `git fetch origin main`
    return tmp_path


def test_every_documented_prefixplan_command_runs(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    commands = []
    for block in _blocks("bash"):
        for line in block.splitlines():
            line = line.split("  #")[0].strip()
            if line.startswith("prefixplan "):
                commands.append(shlex.split(line)[1:])
    assert ["check", "--base", "origin/main", "--output-format", "github"] in commands
    assert any(c[:2] == ["keys", "gc"] for c in commands)
    for args in commands:
        assert main(args) == 0, args
    capsys.readouterr()


def test_github_actions_step_is_valid_yaml() -> None:
    (step,) = [b for b in _blocks("yaml") if "GITHUB_BASE_REF" in b]
    parsed = yaml.safe_load(step)
    assert parsed[0]["name"] == "prefix cache keys"
    assert "prefixplan check --base" in parsed[0]["run"] and "--output-format github" in parsed[0]["run"]


def test_documented_failing_output_is_what_check_prints(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = repo / "recipes/parts/support/system.md"
    p.write_text(p.read_text().replace("Be brief and friendly", "Be brief, warm and friendly"))
    capsys.readouterr()
    assert main(["check"]) == 1
    printed = [ln.rstrip() for ln in capsys.readouterr().out.splitlines()]
    console = _blocks("console")[0].splitlines()
    documented = console[1 : console.index("check: 3 keys, 1 errors, 0 warnings, 0 notices: failed (exit 1)") + 1]
    assert printed == [ln.rstrip() for ln in documented]
    assert main(["check", "--output-format", "github"]) == 1
    line = capsys.readouterr().out.strip()
    doc_line = next(ln for ln in console if ln.startswith("::error"))
    assert line.startswith(doc_line.split("; ...")[0])


def test_pre_commit_hooks_file() -> None:
    hooks = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    by_id = {h["id"]: h for h in hooks}
    assert by_id["prefixplan-check"]["entry"] == "prefixplan check"
    assert by_id["prefixplan-check"]["pass_filenames"] is False
    assert re.search(by_id["prefixplan-check"]["files"], "recipes/parts/support/system.md")
    assert re.search(by_id["prefixplan-check"]["files"], "prefixplan.lock")
