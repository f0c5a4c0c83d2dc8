"""The contract between prefixplan and whoever types its commands.

* Every command and subcommand answers an unknown option, a missing required argument (or an
  option without its value) and a misspelled command with exit 2, one ``error:`` line naming
  the problem, a ``hint:`` line, and no traceback.
* One meaning per flag name: two commands never give the same flag different help.
* Help reads like a person wrote it (no ``<bool>``, ``<list[str]>``, ``{logs}`` placeholders).
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
import typer

from prefixplan.cli.app import build_app, main

ROOT = Path(__file__).resolve().parent.parent


def _leaves(command: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    subs = getattr(command, "commands", None)
    if subs:
        out = []
        for name, sub in sorted(subs.items()):
            out.extend(_leaves(sub, (*path, name)))
        return out
    return [(path, command)]


LEAVES = _leaves(typer.main.get_command(build_app()))
GROUPS = [()] + sorted({p[:1] for p, _ in LEAVES if len(p) > 1})


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def _assert_usage_error(code: int, err: str, what: str) -> None:
    assert code == 2, (what, code, err)
    lines = [line for line in err.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error:")]
    assert len(errors) == 1, (what, err)
    assert any(line.startswith("hint:") for line in lines), (what, err)
    assert "Traceback" not in err, (what, err)


@pytest.mark.parametrize("path", [p for p, _ in LEAVES], ids=" ".join)
def test_unknown_option(path: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run([*path, "--no-such-option"], capsys)
    _assert_usage_error(code, err, path)
    assert "--no-such-option" in err


@pytest.mark.parametrize("path,command", LEAVES, ids=[" ".join(p) for p, _ in LEAVES])
def test_missing_argument_or_value(path: tuple[str, ...], command: Any, capsys: pytest.CaptureFixture[str]) -> None:
    required = [p for p in command.params if getattr(p, "required", False)]
    if required:
        code, _, err = _run(list(path), capsys)
        _assert_usage_error(code, err, path)
        names = [getattr(p, "metavar", None) or p.name for p in required]
        assert any(
            str(n).lower().strip(".") in err.lower() or opt in err
            for p in required
            for n in names
            for opt in getattr(p, "opts", [])
        ), err
    else:
        option = next(p for p in command.params if p.param_type_name == "option" and not p.is_flag and not p.hidden)
        code, _, err = _run([*path, option.opts[0]], capsys)
        _assert_usage_error(code, err, path)
        assert option.opts[0] in err


@pytest.mark.parametrize("group", GROUPS, ids=lambda g: " ".join(g) or "prefixplan")
def test_misspelled_command(group: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run([*group, "analyse" if not group else "lsit"], capsys)
    _assert_usage_error(code, err, group)
    assert "No such command" in err


@pytest.mark.parametrize("group", GROUPS, ids=lambda g: " ".join(g) or "prefixplan")
def test_group_without_command_shows_help_and_exits_2(group: tuple[str, ...], capsys) -> None:
    code, out, err = _run(list(group), capsys)
    _assert_usage_error(code, err, group)
    assert "Usage:" in out


def test_non_empty_log_in_an_unknown_format_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "server.log"
    log.write_text("INFO 11-30 10:00:01 [api_server.py:1] Started server process\nINFO 11-30 10:00:02 ready\n")
    for command in ("analyze", "simulate"):
        code, _, err = _run([command, str(log), "--no-store"] if command == "analyze" else [command, str(log)], capsys)
        _assert_usage_error(code, err, command)
        assert "no requests" in err and "openai-chat" in err and "mooncake" in err and "line 1" in err
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    code, _, _ = _run(["analyze", str(empty), "--no-store", "-q"], capsys)
    assert code == 0  # an empty log is not an error: there is nothing to read


# -- one meaning per flag ----------------------------------------------------------------------


def flag_meanings() -> dict[str, dict[str, list[str]]]:
    """flag -> help text -> commands that use it (visible options only)."""
    table: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for path, command in LEAVES:
        for p in command.params:
            if p.param_type_name != "option" or p.hidden:
                continue
            for flag in (*p.opts, *p.secondary_opts):
                table[flag][p.help or ""].append(" ".join(path))
    return table


def test_one_meaning_per_flag_name() -> None:
    clashes = {flag: dict(helps) for flag, helps in flag_meanings().items() if len(helps) > 1}
    assert clashes == {}


def test_docs_cli_table_lists_every_flag_with_its_commands() -> None:
    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    rows = {
        m.group(1): m.group(2)
        for m in re.finditer(r"^\| `(--?[a-z][a-z-]*(?:/--[a-z-]+)?)` \|[^|]*\| ([^|]*) \|$", text, re.M)
    }
    for flag, helps in flag_meanings().items():
        if flag in ("--help", "--install-completion", "--show-completion", "--version"):
            continue
        key = next((k for k in rows if flag in k.split("/")), None)
        assert key is not None, f"docs/cli.md has no row for {flag}"
        commands = {c for cs in helps.values() for c in cs}
        documented = {c.strip() for c in rows[key].split(",")}
        assert commands <= documented, (flag, commands - documented)


# -- help text ----------------------------------------------------------------------------------


@pytest.mark.parametrize("path", [(), *[p for p, _ in LEAVES]], ids=lambda p: " ".join(p) or "prefixplan")
def test_help_reads_like_a_person_wrote_it(path: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert main([*path, "--help"]) == 0
    out = capsys.readouterr().out
    for placeholder in ("<bool>", "<list[", "<str>", "<int>", "<float>", "<path>", "{logs}", "{key}", "{analysis}"):
        assert placeholder not in out, (path, placeholder)


def test_no_help_text_loses_a_bracket_to_rich_markup() -> None:
    """Rich reads ``[ray]`` as markup and drops it: help texts say it another way."""
    bad = [
        (path, param.name)
        for path, command in LEAVES
        for param in command.params
        if re.search(r"\[[a-z][a-z_-]*\]", getattr(param, "help", None) or "")
    ]
    assert bad == []


def test_shell_completion_is_offered(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    assert "--install-completion" in capsys.readouterr().out


# -- deprecated spellings --------------------------------------------------------------------


def test_analyze_says_where_the_store_is_and_what_it_wrote(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PREFIXPLAN_DB", raising=False)
    log = tmp_path / "log.jsonl"
    log.write_text(json.dumps({"model": "m", "messages": [{"role": "user", "content": "hello"}]}) + "\n")
    code, out, err = _run(["analyze", str(log), "-q", "--json", "a.json", "--markdown", "a.md"], capsys)
    assert code == 0
    text = out + err
    assert "created the store prefixplan.db" in text and "wrote a.json" in text and "wrote a.md" in text
    code, out, err = _run(["analyze", str(log), "-q"], capsys)
    assert "created the store" not in out + err  # said once, on first creation


def test_progress_summary_lines_when_not_a_terminal() -> None:
    """Off a terminal each pass longer than a second ends with one line (name, requests, tokens,
    rate); under -q nothing. A fake clock makes the timing exact."""
    import io

    from rich.console import Console

    from prefixplan.cli.progress import ConsoleProgress

    now = [100.0]
    out = io.StringIO()
    progress = ConsoleProgress(Console(file=out, width=200), clock=lambda: now[0])
    progress.begin("reading and rendering", total_bytes=1000)
    progress.update(400, 1_817_123, 500)
    now[0] += 4.0
    progress.update(800, 3_634_246, 1000)
    progress.end()
    progress.begin("a short pass")
    now[0] += 0.5
    progress.end()
    assert out.getvalue().splitlines() == [
        "reading and rendering: 800 requests, 3,634,246 tokens in 4.0 s (908,562 tokens/s)"
    ]
    quiet = io.StringIO()
    progress = ConsoleProgress(Console(file=quiet), quiet=True, clock=lambda: now[0])
    progress.begin("x")
    now[0] += 9
    progress.end()
    assert quiet.getvalue() == ""


# -- outputs, empty results, closed pipes, the store ---------------------------------------------

EXAMPLE = str(ROOT / "examples" / "agent_log.jsonl.gz")


def test_one_output_on_stdout_and_the_console_moves_to_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(["analyze", EXAMPLE, "--no-store", "--json", "-", "--markdown", "-"], capsys)
    _assert_usage_error(code, err, "two outputs on stdout")
    assert "only one output can write to stdout, not --json and --markdown" in err
    code, out, err = _run(["analyze", EXAMPLE, "--no-store", "--html", "-"], capsys)
    assert code == 0 and out.lstrip().startswith("<!DOCTYPE html>") and out.rstrip().endswith("</html>")
    assert "Top shared prefixes" in err  # the console report went to stderr, not after the page


def test_a_log_that_leaves_no_request_is_an_error_saying_why(tmp_path: Path, capsys) -> None:
    code, _, err = _run(["analyze", EXAMPLE, "--no-store", "-q", "--since", "2100-01-01"], capsys)
    _assert_usage_error(code, err, "--since after the log")
    assert "no request left to analyze" in err and "none fell inside --since/--until" in err
    log = tmp_path / "tools.jsonl"
    bad_tool = {"type": "function", "function": {"name": "get_[/]weather", "parameters": {"type": "object"}}}
    lines = [{"messages": [{"role": "user", "content": f"hi {i}"}], "tools": [bad_tool]} for i in range(3)]
    log.write_text("".join(json.dumps(line) + "\n" for line in lines))
    code, _, err = _run(["analyze", str(log), "--no-store", "-q", "-t", "mistral:v3"], capsys)
    _assert_usage_error(code, err, "nothing renderable")
    assert "3 request(s) read; 3 could not be rendered (first: " in err and "tools.jsonl:1: render:" in err


def test_an_unrecognised_line_is_described_without_its_secrets(tmp_path: Path, capsys) -> None:
    log = tmp_path / "secrets.log"
    log.write_text("Authorization: Bearer sk-live-SECRET123456 user said my private password is hunter2\n")
    code, _, err = _run(["analyze", str(log), "--no-store", "-q"], capsys)
    _assert_usage_error(code, err, "unknown format")
    assert "Authorization: Bearer ***" in err and "SECRET123456" not in err and "hunter2" not in err


def test_negative_top_is_refused_everywhere(tmp_path: Path, capsys) -> None:
    for argv in (["report", str(tmp_path / "a.json"), "--top", "-3"], ["analyze", EXAMPLE, "--top", "-1"]):
        code, _, err = _run(argv, capsys)
        _assert_usage_error(code, err, " ".join(argv))
        assert "'--top'" in err or "--top must be" in err


def test_a_closed_stdout_is_exit_141_not_findings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import io
    import sys

    sink = open(tmp_path / "sink", "w")  # a real descriptor for rich to redirect

    class ClosedPipe(io.TextIOBase):
        def write(self, s: str) -> int:
            raise BrokenPipeError(32, "Broken pipe")

        def flush(self) -> None:
            raise BrokenPipeError(32, "Broken pipe")

        def fileno(self) -> int:
            return sink.fileno()

    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    try:
        assert main(["formats"]) == 141
    finally:
        sink.close()


def test_read_only_commands_do_not_create_a_store(tmp_path: Path, capsys) -> None:
    missing = tmp_path / "typo" / "x.db"
    for argv in (["keys", "list", "--db", str(missing)], ["status", "--key-stats", "--db", str(missing)]):
        code, _, err = _run(argv, capsys)
        assert code == 5 and f"no store at {missing}" in err, (argv, code, err)
    assert not missing.parent.exists()
