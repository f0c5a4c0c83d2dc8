"""The CI gate: lock + check, the mutation test, --base, CLI exit codes and annotations."""

from __future__ import annotations

import json
import random
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from prefixplan.cli.app import main
from prefixplan.errors import ExitCode, KeyConflictError
from prefixplan.gate.check import run_check
from prefixplan.gate.lock import lock_recipes
from prefixplan.store import open_store

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture()
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the bundled recipes in a fresh git repo, locked and committed."""
    shutil.copytree(ROOT / "recipes", tmp_path / "recipes")
    monkeypatch.chdir(tmp_path)
    _git(tmp_path, "init", "-q")
    lock_recipes("recipes", "prefixplan.lock")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-q", "-m", "base")
    return tmp_path


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.email=t@example.com", "-c", "user.name=t", "-c", "commit.gpgsign=false", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def _bump(path: Path, name: str | None = None) -> None:
    text = path.read_text()
    new = re.sub(r"version: (\d+)", lambda m: f"version: {int(m.group(1)) + 1}", text, count=1)
    assert new != text
    path.write_text(new)


# -- mutation test -------------------------------------------------------------------------------


def _normalise_tools(root: Path) -> None:
    """Rewrite JSON tool files with json.dumps(indent=2) so a key swap changes only key order."""
    for f in (root / "recipes/parts").rglob("*.json"):
        f.write_text(json.dumps(json.loads(f.read_text()), indent=2) + "\n")


def _objects(obj, path=()):  # type: ignore[no-untyped-def]
    if isinstance(obj, dict):
        yield path, obj
        for k, v in obj.items():
            yield from _objects(v, path + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _objects(v, path + (i,))


def _mutate(root: Path, rng: random.Random) -> tuple[str, Path, str]:
    """Apply one random single edit; return (kind, recipe file to bump, edited file)."""
    kind = rng.choice(["system-char", "tool-field", "tool-key-order", "document-byte"])
    if kind == "system-char":
        recipe, f = rng.choice(
            [("agent.yaml", "parts/agent/system.md"), ("support-bot.yaml", "parts/support/system.md")]
        )
        path = root / "recipes" / f
        data = bytearray(path.read_bytes())
        i = rng.randrange(len(data))
        data[i] = rng.choice([c for c in b"abcdefghijklmnopqrstuvwxyz .,!" if c != data[i]])
        path.write_bytes(bytes(data))
    elif kind in ("tool-field", "tool-key-order"):
        recipe, folder = rng.choice([("agent.yaml", "parts/agent/tools"), ("support-bot.yaml", "parts/support/tools")])
        path = rng.choice(sorted((root / "recipes" / folder).glob("*.json")))
        f = str(path.relative_to(root / "recipes"))
        obj = json.loads(path.read_text())
        objs = [o for _, o in _objects(obj)]
        if kind == "tool-key-order":
            o = rng.choice([o for o in objs if len(o) >= 2])
            items = list(o.items())
            i = rng.randrange(len(items) - 1)
            items[i], items[i + 1] = items[i + 1], items[i]
            o.clear()
            o.update(items)
            assert json.loads(json.dumps(obj)) == json.loads(path.read_text())  # same schema, new order
        else:
            o = rng.choice(
                [o for o in objs if any(isinstance(v, (str, int)) and not isinstance(v, bool) for v in o.values())]
            )
            k = rng.choice([k for k, v in o.items() if isinstance(v, (str, int)) and not isinstance(v, bool)])
            o[k] = o[k] + rng.choice(["!", " please", "s"]) if isinstance(o[k], str) else o[k] + rng.randint(1, 5)
        path.write_text(json.dumps(obj, indent=2) + "\n")
    else:
        recipe = "manual-rag.yaml"
        path = rng.choice(sorted((root / "recipes/parts/manual").glob("*.md")))
        f = str(path.relative_to(root / "recipes"))
        data = bytearray(path.read_bytes())
        i = rng.randrange(len(data))
        data[i] = rng.choice([c for c in b"ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789" if c != data[i]])
        path.write_bytes(bytes(data))
    return kind, root / "recipes" / recipe, f


def test_every_random_single_edit_fails_until_bump_and_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pristine = tmp_path / "pristine"
    shutil.copytree(ROOT / "recipes", pristine / "recipes")
    _normalise_tools(pristine)
    monkeypatch.chdir(pristine)
    lock_recipes("recipes", "prefixplan.lock")
    assert run_check("recipes", "prefixplan.lock", diff_ref=None).exit_code == ExitCode.OK
    rng = random.Random(20250301)
    kinds: dict[str, int] = {}
    for n in range(80):
        work = tmp_path / f"m{n}"
        shutil.copytree(pristine, work)
        monkeypatch.chdir(work)
        kind, recipe, edited = _mutate(work, rng)
        kinds[kind] = kinds.get(kind, 0) + 1
        res = run_check("recipes", "prefixplan.lock", diff_ref=None, lint=False)
        assert res.exit_code == ExitCode.FINDINGS, (kind, edited, res.findings)
        changed = [f for f in res.findings if f.code == "content-changed"]
        assert changed and all(f.file is not None for f in changed)
        assert any(edited in (f.part or "") for f in changed), (edited, [f.part for f in changed])
        with pytest.raises(KeyConflictError, match="bump"):
            lock_recipes("recipes", "prefixplan.lock")
        _bump(recipe)
        assert run_check("recipes", "prefixplan.lock", diff_ref=None, lint=False).exit_code == ExitCode.NOT_LOCKED
        with open_store(work / "mut.db") as store:  # each mutation is its own branch
            lock_recipes("recipes", "prefixplan.lock", store=store)
            assert [str(r.key) for r in store.list_keys("active")] == sorted(
                str(k) for k in run_check("recipes", "prefixplan.lock", lint=False, diff_ref=None).keys
            )
        assert run_check("recipes", "prefixplan.lock", diff_ref=None, lint=False).exit_code == ExitCode.OK
        shutil.rmtree(work)
    assert set(kinds) == {"system-char", "tool-field", "tool-key-order", "document-byte"}


# -- check details ---------------------------------------------------------------------------------


def test_edit_shows_part_and_line_diff(repo: Path) -> None:
    p = repo / "recipes/parts/support/system.md"
    p.write_text(p.read_text().replace("Be brief and friendly", "Be brief, warm and friendly"))
    res = run_check("recipes", "prefixplan.lock")
    assert res.exit_code == ExitCode.FINDINGS
    (f,) = [f for f in res.findings if f.code == "content-changed"]
    assert f.key == "support-bot@v3" and f.part == "system parts/support/system.md"
    assert f.file == "recipes/parts/support/system.md" and f.line == 7
    assert "-3. Be brief and friendly; write the way a helpful shop assistant talks." in f.diff
    assert "+3. Be brief, warm and friendly; write the way a helpful shop assistant talks." in f.diff
    assert "bump `version:` to 4" in f.message


def test_inline_and_chunk_edits_are_located(repo: Path) -> None:
    r = repo / "recipes/manual-rag.yaml"
    r.write_text(r.read_text().replace("Cite the section heading", "Quote the section heading"))
    m = repo / "recipes/parts/manual/03-troubleshooting.md"
    m.write_text(m.read_text().replace("ten seconds", "twelve seconds"))
    res = run_check("recipes", "prefixplan.lock")
    parts = {f.part: f for f in res.findings if f.code == "content-changed"}
    assert set(parts) == {"system inline", "document[11] parts/manual/03-troubleshooting.md#chunk4"}
    assert parts["system inline"].file == "recipes/manual-rag.yaml"
    assert any("Quote the section heading" in d for d in parts["system inline"].diff)
    chunk = parts["document[11] parts/manual/03-troubleshooting.md#chunk4"]
    assert chunk.file == "recipes/parts/manual/03-troubleshooting.md" and chunk.line == 24


def test_hand_edited_lock_against_base(repo: Path) -> None:
    p = repo / "recipes/parts/agent/system.md"
    p.write_text(p.read_text() + "\nOne more rule.\n")
    lock = repo / "prefixplan.lock"
    # the "fix" CI must refuse: delete the entry and re-lock under the same version
    text = lock.read_text()
    start = text.index('  "relay-agent@v1":')
    end = text.index('  "support-bot@v3":')
    lock.write_text(text[:start] + text[end:])
    lock_recipes("recipes", "prefixplan.lock")
    assert run_check("recipes", "prefixplan.lock").exit_code == ExitCode.OK  # lock and recipes agree...
    res = run_check("recipes", "prefixplan.lock", base_ref="HEAD")  # ...but not with the base
    assert res.exit_code == ExitCode.FINDINGS
    (f,) = [f for f in res.findings if f.code == "lock-edited"]
    assert f.key == "relay-agent@v1" and f.file == "prefixplan.lock" and f.line is not None
    assert lock.read_text().splitlines()[f.line - 1].strip() == '"relay-agent@v1":'


def test_version_decrease_and_stale_entries(repo: Path) -> None:
    r = repo / "recipes/support-bot.yaml"
    r.write_text(r.read_text().replace("version: 3", "version: 2"))
    res = run_check("recipes", "prefixplan.lock")
    assert res.exit_code == ExitCode.FINDINGS
    assert [f.code for f in res.findings if f.severity == "error"] == ["version-decreased"]
    (repo / "recipes/agent.yaml").unlink()
    r.write_text(r.read_text().replace("version: 2", "version: 3"))
    res = run_check("recipes", "prefixplan.lock")
    assert res.exit_code == ExitCode.OK
    assert [(f.code, f.key) for f in res.findings] == [("stale-lock-entry", "relay-agent@v1")]


def test_a_version_set_back_against_the_base_fails_even_with_a_fresh_lock(repo: Path) -> None:
    # support-bot is at v3 at the base; set it back to v2 with other content and rebuild the lock
    # from scratch: the lock and the recipes agree, and no key of the lock is also in the base's.
    p = repo / "recipes/parts/support/system.md"
    p.write_text(p.read_text() + "\nOne more rule.\n")
    r = repo / "recipes/support-bot.yaml"
    r.write_text(r.read_text().replace("version: 3", "version: 2"))
    (repo / "prefixplan.lock").unlink()
    lock_recipes("recipes", "prefixplan.lock")
    assert run_check("recipes", "prefixplan.lock").exit_code == ExitCode.OK
    res = run_check("recipes", "prefixplan.lock", base_ref="HEAD")
    assert res.exit_code == ExitCode.FINDINGS
    (f,) = [f for f in res.findings if f.severity == "error"]
    assert (f.code, f.key, f.file) == ("version-decreased", "support-bot@v2", "prefixplan.lock")
    assert "was at support-bot@v3 at HEAD" in f.message and "set version: 4" in f.message


def test_a_bad_glob_and_a_version_past_nine_digits_name_their_fields(repo: Path) -> None:
    r = repo / "recipes/support-bot.yaml"
    text = r.read_text()
    r.write_text(text.replace("version: 3", "version: 2024050101"))
    res = run_check("recipes", "prefixplan.lock")
    assert res.exit_code == ExitCode.USAGE
    assert any("prefixes[0].version" in f.message and "1 to 999999999" in f.message for f in res.findings), res.findings
    (repo / "recipes/docs.yaml").write_text(
        "prefixes:\n  - name: docs\n    version: 1\n    system: Answer from the documents.\n"
        "    documents:\n      - {glob: 'parts/**.md', chunk: headings}\n"
    )
    r.write_text(text)
    res = run_check("recipes", "prefixplan.lock")
    assert res.exit_code == ExitCode.USAGE
    assert any("documents[0].glob" in f.message and "invalid glob" in f.message for f in res.findings), res.findings


def test_lint_warnings_fail_only_with_fail_on_warning(repo: Path) -> None:
    p = repo / "recipes/parts/support/system.md"
    p.write_text("Today is 2025-03-01.\n" + p.read_text())
    _bump(repo / "recipes/support-bot.yaml")
    lock_recipes("recipes", "prefixplan.lock")
    res = run_check("recipes", "prefixplan.lock")
    assert res.exit_code == ExitCode.OK
    (w,) = res.findings
    assert (w.code, w.severity, w.file, w.line, w.column) == (
        "date-time",
        "warning",
        "recipes/parts/support/system.md",
        1,
        10,
    )
    assert w.cost_tokens and w.cost_tokens > 400  # the whole prompt and three tools follow it
    assert run_check("recipes", "prefixplan.lock", fail_on="warning").exit_code == ExitCode.FINDINGS


def test_lock_registers_versions_and_supersedes(repo: Path) -> None:
    with open_store() as s:
        lock_recipes("recipes", "prefixplan.lock", store=s, now=1_700_000_000)
        p = repo / "recipes/parts/support/system.md"
        p.write_text(p.read_text() + "\nThanks!\n")
        _bump(repo / "recipes/support-bot.yaml")
        res = lock_recipes("recipes", "prefixplan.lock", store=s, now=1_700_000_000 + 3600)
        assert res.added == ("support-bot@v4",) and res.removed == ("support-bot@v3",)
        old, new = s.versions("support-bot")
        assert (old.status, new.status) == ("superseded", "active")
        assert old.retain_until == "2023-11-21T23:13:20Z" and new.kind == "system+tools" and new.pinned
        assert s.expire(now=1_700_000_000 + 3600 + 7 * 86400)[0].key.version == 3


# -- CLI --------------------------------------------------------------------------------------------


def test_cli_exit_codes(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check"]) == 0  # clean
    p = repo / "recipes/parts/support/system.md"
    p.write_text(p.read_text().replace("Pia", "Pia Lind"))
    assert main(["check"]) == 1  # edited under the same version
    assert main(["lock"]) == 1  # lock refuses (KeyConflictError)
    err = capsys.readouterr().err
    assert "support-bot@v3" in err and "bump the version" in err
    _bump(repo / "recipes/support-bot.yaml")
    assert main(["check"]) == 3  # bumped, not locked
    assert "run `prefixplan lock`" in capsys.readouterr().out
    assert main(["lock"]) == 0
    assert main(["check"]) == 0  # bumped and locked
    (repo / "recipes/broken.yaml").write_text("prefixes:\n  - name: x\n    version: one\n    system: hi\n")
    assert main(["check"]) == 2  # malformed recipe
    assert "recipes/broken.yaml: prefixes[0].version" in capsys.readouterr().out
    assert main(["lock"]) == 2
    assert main(["check", "--output-format", "nope"]) == 2


def test_cli_json_and_github_annotations(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = repo / "recipes/parts/support/system.md"
    p.write_text(p.read_text().replace("Be brief and friendly", "Be brief, warm and friendly"))
    capsys.readouterr()
    assert main(["check", "--json", "-"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["exit_code"] == 1 and data["findings"][0]["code"] == "content-changed"
    assert main(["check", "--output-format", "github"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1
    m = re.fullmatch(r"::error file=([^,]+),line=(\d+),title=([^:]+)::(.*)", lines[0])
    assert m, lines[0]
    assert m.groups()[:3] == ("recipes/parts/support/system.md", "7", "content-changed support-bot@v3")
    body = m.group(4)
    assert "\n" not in body and "%0A-3. Be brief and friendly" in body
    # warnings and malformed recipes annotate too
    (repo / "recipes/broken.yaml").write_text("prefixes:\n  - name: x\n    version: 1\n    tools: [missing.json]\n")
    assert main(["check", "--output-format", "github"]) == 2
    out = capsys.readouterr().out
    assert (
        "::error file=recipes/broken.yaml,line=4,title=recipe-invalid::recipes/broken.yaml: prefixes[0].tools[0]: file not found: missing.json"
        in out
    )


def test_cli_keys_commands(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lock"]) == 0
    p = repo / "recipes/parts/support/system.md"
    p.write_text(p.read_text() + "\nBye.\n")
    _bump(repo / "recipes/support-bot.yaml")
    assert main(["lock"]) == 0
    capsys.readouterr()
    assert main(["keys", "list", "--json", "-"]) == 0
    keys = {(k["key"], k["status"]) for k in json.loads(capsys.readouterr().out)}
    assert ("support-bot@v3", "superseded") in keys and ("support-bot@v4", "active") in keys
    assert main(["keys", "show", "support-bot@v4", "--json", "-"]) == 0
    assert json.loads(capsys.readouterr().out)["status"] == "active"
    assert main(["keys", "history", "support-bot", "--json", "-"]) == 0
    assert [k["version"] for k in json.loads(capsys.readouterr().out)] == [3, 4]
    assert main(["keys", "show", "nope@v1"]) == 2
    far = str(2_000_000_000 + 10 * 365 * 86400)
    assert main(["keys", "expire", "--now", far, "--json", "-"]) == 0
    assert [k["key"] for k in json.loads(capsys.readouterr().out)] == ["support-bot@v3"]
    assert main(["keys", "gc", "--json", "-"]) == 0
    assert json.loads(capsys.readouterr().out) == {"deleted": False, "keys": ["support-bot@v3"]}
    assert main(["keys", "gc", "--yes"]) == 0
    assert "deleted 1 expired version(s): support-bot@v3" in capsys.readouterr().out
    assert main(["keys", "history", "support-bot", "--json", "-"]) == 0
    assert [k["version"] for k in json.loads(capsys.readouterr().out)] == [4]


def test_repository_recipes_match_committed_lock(monkeypatch: pytest.MonkeyPatch) -> None:
    """The project's own gate: bundled recipes and prefixplan.lock agree, lint clean."""
    monkeypatch.chdir(ROOT)
    res = run_check("recipes", "prefixplan.lock", diff_ref=None, fail_on="warning")
    assert res.exit_code == ExitCode.OK, res.findings
    assert res.keys == ("nimbus-manual-rag@v2", "relay-agent@v1", "support-bot@v3")


# -- lock as one transaction (store and lock file agree after any failure) ----------------------


def _state(repo: Path, db: Path) -> tuple[str, dict[int, str]]:
    with open_store(db) as s:
        return (repo / "prefixplan.lock").read_text(), {v.version: v.status for v in s.versions("support-bot")}


def test_a_failed_lock_write_registers_nothing(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from prefixplan.errors import UsageError

    db = repo / "pp.db"
    with open_store(db) as s:
        lock_recipes("recipes", "prefixplan.lock", store=s)
    before = _state(repo, db)
    _bump(repo / "recipes/support-bot.yaml")

    def refuse(*_a: object, **_k: object) -> str:
        raise UsageError("cannot write prefixplan.lock: No space left on device")

    monkeypatch.setattr("prefixplan.gate.lock.write_lock", refuse)
    with open_store(db) as s, pytest.raises(UsageError, match="No space left"):
        lock_recipes("recipes", "prefixplan.lock", store=s)
    assert _state(repo, db) == before  # no support-bot@v4 burned, v3 still active (its retention not started)
    monkeypatch.undo()
    monkeypatch.chdir(repo)
    with open_store(db) as s:  # the retry after fixing the disk simply works
        assert lock_recipes("recipes", "prefixplan.lock", store=s).added == ("support-bot@v4",)
    assert _state(repo, db)[1] == {3: "superseded", 4: "active"}


def test_a_failed_store_write_puts_the_old_lock_back(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from prefixplan.errors import StoreError
    from prefixplan.store.versions import VersionsMixin

    db = repo / "pp.db"
    with open_store(db) as s:
        lock_recipes("recipes", "prefixplan.lock", store=s)
    before = _state(repo, db)
    _bump(repo / "recipes/support-bot.yaml")
    (repo / "recipes/relay.yaml").write_text(
        "prefixes:\n  - name: zz-last\n    version: 1\n    system: registered after support-bot\n"
    )
    real = VersionsMixin.record_version

    def fail_on_last(self, name, **kw):  # type: ignore[no-untyped-def]
        if name == "zz-last":
            raise StoreError(f"{self.path}: write failed: database or disk is full")
        return real(self, name, **kw)

    monkeypatch.setattr(VersionsMixin, "record_version", fail_on_last)
    with open_store(db) as s, pytest.raises(StoreError, match="disk is full"):
        lock_recipes("recipes", "prefixplan.lock", store=s)
    # support-bot@v4 was registered before the failure, in the same transaction: rolled back
    assert _state(repo, db) == before


def test_lock_cleans_temp_files_a_killed_lock_left(repo: Path) -> None:
    import os

    stale = repo / ".prefixplan.lock.k1ll3d.tmp"
    fresh = repo / ".prefixplan.lock.wr1t1ng.tmp"  # a concurrent lock's, still being written
    for f in (stale, fresh):
        f.write_text("partial")
    os.utime(stale, (1_000_000_000, 1_000_000_000))
    lock_recipes("recipes", "prefixplan.lock")
    assert not stale.exists() and fresh.exists()


def test_human_output_keeps_recipe_text_on_its_line(capsys: pytest.CaptureFixture[str]) -> None:
    """A newline in a recipe's file name or a message quoting it would start a line where `::`
    is a GitHub workflow command and a fence closes the Action's comment block."""
    from prefixplan.gate.findings import CheckResult, Finding
    from prefixplan.report.console_gate import render_check

    hostile = "nope\n```\n</details> @octocat\n::add-mask::x"
    finding = Finding(
        code="recipe-invalid", severity="error", message=f"file not found: {hostile}", file=hostile, line=7
    )
    render_check(CheckResult((finding,), ExitCode.USAGE, (), None, "error"))
    out = capsys.readouterr().out
    assert not any(line.startswith(("::", "```", "</details>")) for line in out.splitlines())
    assert "nope⏎```⏎</details> @octocat⏎::add-mask::x" in out
