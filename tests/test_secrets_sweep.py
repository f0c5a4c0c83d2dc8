"""The secrets sweep: one marker in every credential prefixplan reads (the API-key variable, a
named one, the fleet file's variable, URL userinfo) while servers echo the headers they got back
into model names and error bodies. Afterwards the marker, in any form a credential takes on the
wire (as is, Bearer, Basic auth of user:marker, their base64), appears nowhere: stdout, stderr,
logs, --json files, reports, the store with its WAL/SHM files, and the lock file."""

from __future__ import annotations

import base64
import json
import logging
import shutil
from pathlib import Path

import pytest
from fake_engine import FakeEngine

from prefixplan.cli.app import main

ROOT = Path(__file__).resolve().parent.parent
MARKER = "MARKER-c0ffee-5ecret-9d8e7f"
FORMS = [
    MARKER,
    base64.b64encode(MARKER.encode()).decode(),
    base64.b64encode(f"alice:{MARKER}".encode()).decode(),
    base64.b64encode(f":{MARKER}".encode()).decode(),
]
RECORD = {
    "schema_version": 1,
    "granularity": {"block_size": 16},
    "candidates": [
        {
            "rank": 1,
            "name": "sys",
            "key": "sys@v1",
            "length": 64,
            "token_ids": list(range(100, 164)),
            "marginal_tokens": 10,
        }
    ],
}


def _leaks(text: str | bytes) -> list[str]:
    data = text.encode() if isinstance(text, str) else text
    return [f for f in FORMS if f.encode() in data]


def test_no_credential_form_appears_anywhere(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    work = tmp_path / "work"
    shutil.copytree(ROOT / "recipes", work / "recipes")
    (work / ".git").mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("PREFIXPLAN_DB", str(work / "prefixplan.db"))
    for var in ("PREFIXPLAN_API_KEY", "TEAM_KEY", "FLEET_KEY"):
        monkeypatch.setenv(var, MARKER)
    (work / "a.json").write_text(json.dumps(RECORD))
    outputs: list[str] = []

    def run(*args: str) -> int:
        code = main(list(args))
        captured = capsys.readouterr()
        outputs.extend([captured.out, captured.err])
        assert code != 70, captured.err
        return code

    with (
        FakeEngine("vllm", api_key=MARKER, fault="echo_auth_model") as echo_model,
        FakeEngine("vllm", api_key=MARKER, fault="echo_auth_500") as echo_500,
        FakeEngine("vllm", api_key=MARKER) as good,
    ):
        fleet = work / "fleet.yaml"
        fleet.write_text(
            f"replicas:\n  - url: {good.url}\n    api_key_env: FLEET_KEY\n  - url: {echo_500.url}\n"
            "    api_key_env: FLEET_KEY\n"
        )
        for ep in (echo_model.url, echo_500.url, good.url):
            run("warm", "--analysis", "a.json", "--endpoint", ep, "--retries", "0", "--json", "warm.json")
            run("warm", "--analysis", "a.json", "--endpoint", ep, "--api-key-env", "TEAM_KEY", "--retries", "0")
            run("status", "--endpoint", ep, "--json", "status.json")
        run("warm", "--analysis", "a.json", "--endpoints", str(fleet), "--retries", "0", "--json", "fleet.json")
        # URL userinfo is refused, and the refusal does not repeat it
        userinfo = good.url.replace("http://", f"http://alice:{MARKER}@")
        assert run("warm", "--analysis", "a.json", "--endpoint", userinfo) == 2
        assert run("status", "--endpoint", userinfo) == 2
        bad_fleet = tmp_path / "bad-fleet.yaml"  # the input itself holds the marker: kept outside the sweep
        bad_fleet.write_text(f"replicas:\n  - url: {userinfo}\n")
        assert run("warm", "--analysis", "a.json", "--endpoints", str(bad_fleet)) == 2
        assert good.requests and all(r[3].get("authorization") == f"Bearer {MARKER}" for r in good.requests)
    # the rest of the pipeline, in the same folder and store, with the variables still set
    example = ROOT / "examples" / "agent_log.jsonl.gz"
    if example.is_file():
        run("analyze", str(example), "--json", "analysis.json", "--html", "r.html", "--markdown", "r.md", "-q")
    run("lock")
    run("check", "--output-format", "github")
    files = [p for p in work.rglob("*") if p.is_file() and ".git" not in p.parts]
    assert any(p.name.startswith("prefixplan.db") for p in files) and (work / "prefixplan.lock").is_file()
    leaks = {str(p.relative_to(work)): _leaks(p.read_bytes()) for p in files}
    leaks |= {f"output {i}": _leaks(text) for i, text in enumerate(outputs)}
    leaks["logs"] = _leaks(caplog.text)
    assert {k: v for k, v in leaks.items() if v} == {}
    # the sweep is not vacuous: the servers did put the key into what they sent back
    assert "***" in "".join(outputs) + (work / "warm.json").read_text()
