"""The GitHub Action (action.yml): its metadata against a JSON Schema of GitHub's documented action
fields, its expressions against its own inputs and steps, and its composite steps run locally as
the runner would (bash -eo pipefail, env from ``${{ }}`` expressions, GITHUB_OUTPUT), with a fake
``gh`` on PATH that records the comment instead of calling GitHub."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
ACTION = ROOT / "action.yml"
EXPR = re.compile(r"\$\{\{\s*([^}]*?)\s*\}\}")

FAKE_GH = """#!/usr/bin/env python3
# records every call; lists the comments saved by earlier calls
import json, os, sys
log = os.environ["FAKE_GH_LOG"]
calls = json.load(open(log)) if os.path.exists(log) else []
args = sys.argv[1:]
body = None
for i, a in enumerate(args):
    if a == "-F" and args[i + 1].startswith("body=@"):
        body = open(args[i + 1][len("body=@"):]).read()
calls.append({"args": args, "body": body, "token": os.environ.get("GH_TOKEN")})
json.dump(calls, open(log, "w"))
if "-X" not in args:  # the list call: ids of earlier comments that start with the marker
    for n, c in enumerate(calls[:-1]):
        if c["body"] and c["body"].startswith("<!-- prefixplan -->"):
            print(1000 + n)
"""


def load_action() -> dict:
    return yaml.safe_load(ACTION.read_text())


def test_metadata_matches_the_schema():
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((ROOT / "tests" / "schemas" / "github-action.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    action = load_action()
    jsonschema.validate(action, schema)
    # the schema itself rejects what GitHub's documentation forbids
    bad = json.loads(json.dumps(action))
    del bad["runs"]["steps"][0]["shell"]  # a composite run step needs a shell
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)
    bad = json.loads(json.dumps(action))
    bad["inputs"]["logs"]["required"] = "yes"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)


def test_expressions_name_declared_inputs_and_steps():
    action = load_action()
    steps = action["runs"]["steps"]
    ids = {s["id"] for s in steps if "id" in s}
    text = ACTION.read_text()
    for expr in EXPR.findall(text):
        head, _, rest = expr.partition(".")
        if head == "inputs":
            assert rest in action["inputs"], expr
        elif head == "steps":
            step, kind, _ = rest.split(".", 2)
            assert step in ids and kind == "outputs", expr
        else:
            assert head in ("github", "runner"), expr
    for step in steps:  # inputs reach scripts only through env (no ${{ }} inside run: no injection)
        assert "run" in step and not EXPR.search(step["run"]), step.get("name")
        assert step["shell"] == "bash" and step.get("name")


def _eval(expr: str, ctx: dict) -> str:
    value: object = ctx
    for part in expr.split("."):
        value = value.get(part, "") if isinstance(value, dict) else ""
    return "" if value is None else str(value)


def run_action(work: Path, inputs: dict[str, str], github: dict, bin_dir: Path) -> tuple[int, str, dict]:
    """Run the composite steps in ``work`` like the runner: defaults, env from expressions,
    ``bash --noprofile --norc -eo pipefail``, outputs from GITHUB_OUTPUT. Stops at the first failure."""
    action = load_action()
    given = {k: inputs.get(k, spec.get("default", "")) for k, spec in action["inputs"].items()}
    temp = work / "_runner_temp"
    temp.mkdir(exist_ok=True)
    ctx = {"inputs": {}, "github": {**github, "action_path": str(ROOT)}, "runner": {"temp": str(temp)}, "steps": {}}
    ctx["inputs"] = {k: EXPR.sub(lambda m: _eval(m.group(1), ctx), v) for k, v in given.items()}
    log = []
    for i, step in enumerate(action["runs"]["steps"]):
        out_file = temp / f"output-{i}"
        out_file.write_text("")
        env = {
            **os.environ,
            "PATH": f"{bin_dir}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
            "GITHUB_OUTPUT": str(out_file),
            "GITHUB_STEP_SUMMARY": str(temp / "summary.md"),
            "COLUMNS": "160",
        }
        env.update({k: EXPR.sub(lambda m: _eval(m.group(1), ctx), str(v)) for k, v in step.get("env", {}).items()})
        script = temp / f"step-{i}.sh"
        script.write_text(step["run"])
        proc = subprocess.run(
            ["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        log.append(f"## {step['name']} (exit {proc.returncode})\n{proc.stdout}{proc.stderr}")
        outputs = dict(line.split("=", 1) for line in out_file.read_text().splitlines() if "=" in line)
        if "id" in step:
            ctx["steps"][step["id"]] = {"outputs": outputs}
        if proc.returncode != 0:
            return proc.returncode, "\n".join(log), ctx
    return 0, "\n".join(log), ctx


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A pull request's checkout: the repository's recipes and lock, and the example log, in git."""
    work = tmp_path / "repo"
    work.mkdir()
    shutil.copytree(ROOT / "recipes", work / "recipes")
    shutil.copy(ROOT / "prefixplan.lock", work / "prefixplan.lock")
    (work / "logs").mkdir()
    shutil.copy(ROOT / "examples" / "agent_log.jsonl.gz", work / "logs" / "agent_log.jsonl.gz")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    subprocess.run([*git, "init", "-q"], cwd=work, check=True)
    subprocess.run([*git, "add", "-A"], cwd=work, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "base"], cwd=work, check=True)
    return work


@pytest.fixture
def fake_gh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    gh = bin_dir / "gh"
    gh.write_text(FAKE_GH.replace("#!/usr/bin/env python3", f"#!{sys.executable}", 1))
    gh.chmod(0o755)
    calls = tmp_path / "gh-calls.json"
    monkeypatch.setenv("FAKE_GH_LOG", str(calls))
    return bin_dir, calls


PR = {
    "event_name": "pull_request",
    "base_ref": "",
    "repository": "acme/app",
    "token": "t0ken",
    "event": {"pull_request": {"number": 42}},
}


@pytest.mark.heavy
def test_pull_request_run_comments_the_report_and_updates_it(repo, fake_gh):
    bin_dir, calls = fake_gh
    inputs = {"install": "none", "logs": "logs/*.jsonl.gz", "analyze-args": "--capacity 1e5 --top 10"}
    code, log, ctx = run_action(repo, inputs, PR, bin_dir)
    assert code == 0, log
    assert ctx["steps"]["check"]["outputs"]["exit-code"] == "0"
    body_path = Path(ctx["steps"]["report"]["outputs"]["path"])
    body = body_path.read_text()
    assert body.startswith("<!-- prefixplan -->\n## prefixplan report")
    assert body.index("### Next steps") < body.index("### Summary")
    assert "Move the date-time at system line 1, col 15 after the stable prefix" in body
    assert "### prefixplan check: passed" in body and "check: 3 keys, 0 errors" in body
    record = json.loads(Path(ctx["steps"]["report"]["outputs"]["analysis"]).read_text())
    assert record["summary"]["requests"] == 400
    made = json.loads(calls.read_text())
    assert [c["args"][:3] for c in made] == [
        ["api", "repos/acme/app/issues/42/comments", "--paginate"],
        ["api", "-X", "POST"],
    ]
    assert made[1]["body"] == body and made[1]["token"] == "t0ken"
    # a second run (here without logs: the check alone) edits the same comment instead of adding one
    code, log, _ = run_action(repo, {"install": "none"}, PR, bin_dir)
    assert code == 0, log
    made = json.loads(calls.read_text())
    assert made[-1]["args"][:4] == ["api", "-X", "PATCH", "repos/acme/app/issues/comments/1001"]
    assert (Path(repo / "_runner_temp" / "summary.md")).read_text().count("<!-- prefixplan -->") == 2


def test_a_silent_prompt_edit_fails_with_annotations_after_commenting(repo, fake_gh):
    bin_dir, calls = fake_gh
    part = repo / "recipes" / "parts" / "support" / "system.md"
    part.write_text(part.read_text().replace("Be brief", "Be brief and warm", 1))
    code, log, ctx = run_action(repo, {"install": "none"}, PR, bin_dir)
    assert code == 1, log
    assert "::error file=recipes/parts/support/system.md" in log and "content-changed" in log
    body = Path(ctx["steps"]["report"]["outputs"]["path"]).read_text()
    assert "### prefixplan check: failed (exit 1)" in body and "content-changed" in body
    made = json.loads(calls.read_text())
    assert made[-1]["args"][:3] == ["api", "-X", "POST"]  # the comment is posted before the job fails
    assert "## Fail when the check failed (exit 1)" in log


def test_outside_a_pull_request_nothing_is_posted(repo, fake_gh):
    bin_dir, calls = fake_gh
    push = {"event_name": "push", "base_ref": "", "repository": "acme/app", "token": "t", "event": {}}
    code, log, _ = run_action(repo, {"install": "none"}, push, bin_dir)
    assert code == 0, log
    assert "no pull-request comment" in log and not calls.exists()
