"""prefixplan diff and report --baseline: the bundled example before and after its planted
timestamp is removed from the system prompts."""

from __future__ import annotations

import json

import pytest
from example_logs import analysis_file, record

from prefixplan.cli.app import main
from prefixplan.report.diff import diff_records


@pytest.fixture(scope="module")
def pair() -> tuple[dict, dict]:
    return record("before"), record("after")


def _rate(rec: dict, name: str) -> float:
    sim = rec["simulation"]
    return next(r for r in sim["runs"] if r["label"] == sim[name])["hit_rate_tokens"]


def test_removing_the_timestamp_raises_the_hit_rate_and_fixes_the_breaker(pair):
    before, after = pair
    d = diff_records(before, after)
    unbounded = d.metric("hit rate, unbounded cache")
    assert (
        unbounded.before == before["summary"]["hit_rate_tokens"]
        and unbounded.after == after["summary"]["hit_rate_tokens"]
    )
    assert unbounded.delta > 0.05  # the fixed prompts are reused: +7 points on the example
    head = next(m for m in d.metrics if m.metric.startswith("hit rate, lru"))
    assert (head.before, head.after) == (_rate(before, "headline"), _rate(after, "headline"))
    assert head.after > head.before
    fixed = [b for b in d.breakers if b.status == "fixed"]
    assert [(b.kind, b.pattern) for b in fixed] == [("dynamic-system", "date-time")]
    assert fixed[0].cost_before == 134_680 and fixed[0].cost_after is None
    assert not any(b["kind"] == "dynamic-system" for b in after["breakers"])
    unchanged = [b for b in d.breakers if b.status == "unchanged"]
    assert [b.kind for b in unchanged] == ["tool-key-order"]  # the other planted breaker is still there
    cost = d.metric("cache-breaker cost")
    assert cost.delta == -134_680
    # the stable prefix is new and longer; the one cut by the timestamp is gone
    new = [p for p in d.prefixes if p.status == "new" and p.rank_after == 1]
    gone = [p for p in d.prefixes if p.status == "gone" and p.rank_before == 1]
    assert new and gone and new[0].length > gone[0].length and new[0].reusable_after > gone[0].reusable_before
    withheld = {c["rank"] for c in after["candidates"] if c["withheld"]}
    hidden = [p for p in d.prefixes if p.rank_after in withheld]
    assert hidden and all(p.preview is None for p in hidden)
    assert not any("2026-11-28" in (p.preview or "") for p in d.prefixes)  # timestamps are masked


def test_diff_command_markdown_and_json(pair, tmp_path, capsys):
    before, after = analysis_file("before"), analysis_file("after")
    md, js = tmp_path / "diff.md", tmp_path / "diff.json"
    assert main(["diff", str(before), str(after), "--markdown", str(md), "--json", str(js)]) == 0
    out = capsys.readouterr().out
    assert "What changed" in out and "fixed" in out and "dynamic-system" in out
    text = md.read_text()
    assert text.startswith("## prefixplan diff")
    assert "| fixed | dynamic-system | date-time | system line 1, col 15 | ≈134,680 | - |" in text
    b, a = pair
    line = next(ln for ln in text.splitlines() if ln.startswith("| hit rate, unbounded cache |"))
    assert (
        f"{100 * b['summary']['hit_rate_tokens']:.1f}%" in line
        and f"{100 * a['summary']['hit_rate_tokens']:.1f}%" in line
    )
    data = json.loads(js.read_text())
    assert {m["metric"]: m["delta"] for m in data["metrics"]}["cache-breaker cost"] == -134_680
    # stable output: the same two records give the same comment
    md2 = tmp_path / "again.md"
    assert main(["diff", str(before), str(after), "--markdown", str(md2)]) == 0
    assert md2.read_text() == text
    assert main(["diff", str(before), str(tmp_path / "missing.json")]) == 2


def test_report_with_a_baseline(tmp_path):
    before, after = analysis_file("before"), analysis_file("after")
    md, page = tmp_path / "r.md", tmp_path / "r.html"
    assert main(["report", str(after), "--baseline", str(before), "--markdown", str(md), "--html", str(page)]) == 0
    text = md.read_text()
    heads = [ln for ln in text.splitlines() if ln.startswith("### ")]
    assert heads[:2] == ["### Next steps", "### Compared with the baseline"]
    assert "| fixed | dynamic-system |" in text
    html = page.read_text()
    assert '<section id="diff">' in html and 'data-status="fixed" data-kind="dynamic-system"' in html


def test_withheld_prefixes_show_no_text_in_a_diff(pair):
    before, after = (json.loads(json.dumps(r)) for r in pair)
    for c in after["candidates"]:
        if c["withheld"]:
            c["preview"] = "SECRET-USER-TEXT"
    d = diff_records(before, after)
    assert "SECRET" not in json.dumps(d.to_json())
