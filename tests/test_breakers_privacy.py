"""Cache breakers follow the min_tenants privacy rule: no system text of a single user's
prompt is quoted (record, console), while shared breakers keep their context."""

from __future__ import annotations

import json
from pathlib import Path

from prefixplan.analysis.breakers import BreakerFinder
from prefixplan.api import analyze

PRIVATE = "Private notes for Alice Smith, account 4242-SECRET. Now: 2026-01-0{d}T10:00:00Z. " + "Be helpful. " * 30


def _log(tmp_path: Path, users: list[str | None]) -> Path:
    rows = []
    for i, who in enumerate(users):
        row = {
            "model": "m",
            "messages": [{"role": "system", "content": PRIVATE.format(d=i + 1)}, {"role": "user", "content": f"q{i}"}],
        }
        if who:
            row["user"] = who
        rows.append(json.dumps(row))
    path = tmp_path / "log.jsonl"
    path.write_text("\n".join(rows) + "\n")
    return path


def test_single_user_breaker_is_withheld(tmp_path: Path) -> None:
    rec = analyze(str(_log(tmp_path, ["alice"] * 3)), rag_whatif=False, simulate=False).to_json()
    (b,) = [b for b in rec["breakers"] if b["kind"] == "dynamic-system"]
    assert b["variants"] == 3 and b["withheld"] and b["tenants"] == 1
    assert b["example"] == "" and "withheld" in b["preview"]
    assert "Alice" not in json.dumps(rec) and "2026-01-0" not in json.dumps(rec["breakers"])


def test_shared_breaker_keeps_its_context(tmp_path: Path) -> None:
    rec = analyze(str(_log(tmp_path, ["alice", "bob", None])), rag_whatif=False, simulate=False).to_json()
    (b,) = [b for b in rec["breakers"] if b["kind"] == "dynamic-system"]
    assert not b["withheld"] and b["tenants"] == 2  # kept up to min_tenants
    assert b["example"] == "2026-01-01T10:00:00Z" and "<date-time>" in b["preview"]


def test_finder_threshold_is_configurable(tmp_path: Path) -> None:
    from oracles.prompts import iter_prompts

    from prefixplan.api import source_options
    from prefixplan.logs import LineErrors

    opts = source_options(str(_log(tmp_path, ["alice", "bob", "carol"])))
    finders = {m: BreakerFinder(min_tenants=m) for m in (3, 4)}
    for prompt in iter_prompts(opts, LineErrors()):
        for f in finders.values():
            f.add(prompt)
    assert not finders[3].results()[0].withheld
    assert finders[4].results()[0].withheld and finders[4].results()[0].tenants == 3
