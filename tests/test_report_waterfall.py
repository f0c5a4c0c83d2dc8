"""The waterfall in analyze's record and its reports (console, Markdown, HTML), and the next steps
that cite it."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from prefixplan.api import analyze
from prefixplan.report.actions import next_steps
from prefixplan.report.console import render_analysis
from prefixplan.report.html import render_html
from prefixplan.report.markdown import render_markdown


@pytest.fixture(scope="module")
def record() -> dict:
    return analyze(["examples/agent_log.jsonl.gz"], configured_capacity=2e4).to_json()


def test_the_record_carries_a_waterfall_that_adds_up(record):
    wf = record["simulation"]["waterfall"]
    steps = {s["name"]: s["tokens"] for s in wf["steps"]}
    assert sum(t for t in steps.values() if t is not None) + wf["predicted_tokens"] == wf["prompt_tokens"]
    head = next(r for r in record["simulation"]["runs"] if r["label"] == record["simulation"]["headline"])
    assert wf["predicted_tokens"] == head["hit_tokens"]
    persistent = next(r for r in record["simulation"]["runs"] if r["label"] == record["simulation"]["persistent"])
    assert steps["capacity"] == persistent["hit_tokens"] - head["hit_tokens"]
    assert steps["breakers"] == min(
        sum(b["cost_tokens"] for b in record["breakers"]), wf["prompt_tokens"] - persistent["hit_tokens"]
    )
    assert steps["block"] is None  # rows at 16-token keys: the token level is not computed in analyze


def test_reports_show_the_waterfall(record):
    md = render_markdown(record)
    assert "### Where the hits go" in md and "`--block-size 16 --capacity 20000 --policy lru`" in md
    html = render_html(record)
    section = html.split('<section id="waterfall">')[1].split("</section>")[0]
    assert "predicted hits (the model)" in section and "--block-size 16 --capacity 20000 --policy lru" in section
    out = io.StringIO()
    render_analysis(record, Console(file=out, width=200))
    assert "Where the hits go" in out.getvalue()


def test_next_steps_cite_the_waterfall(record):
    actions = {a.kind: a for a in next_steps(record)}
    capacity = next(s for s in record["simulation"]["waterfall"]["steps"] if s["name"] == "capacity")["tokens"]
    size = actions["size-cache"]
    assert size.figures["waterfall_capacity_tokens"] == capacity
    assert f"the waterfall loses {capacity:,} tokens to capacity" in size.effect
    assert "simulation.waterfall" in size.source
    assert "simulation.waterfall" in actions["move-dynamic"].source
