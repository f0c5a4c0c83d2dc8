"""The waterfall in analyze's record and its reports (console, Markdown, HTML), and the next steps
that cite it."""

from __future__ import annotations

import io

import numpy as np
import pytest
from rich.console import Console

from prefixplan.api import analyze
from prefixplan.report.actions import next_steps
from prefixplan.report.console import render_analysis
from prefixplan.report.html import render_html
from prefixplan.report.markdown import render_markdown
from prefixplan.report.waterfall import waterfall_bars


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


def test_the_token_level_bound_brackets_the_exact_figure(record):
    """analyze's rows carry 16-token keys: its waterfall bounds the token-level hits; simulate's
    token-level run (one key a token) on the same log falls inside, at the bound's low end the
    whole-block hits."""
    from prefixplan.api import simulate, simulation_config

    wf = record["simulation"]["waterfall"]
    bound = wf["token_level_bound"]
    persistent = next(r for r in record["simulation"]["runs"] if r["label"] == record["simulation"]["persistent"])
    assert bound["low"] == persistent["hit_tokens"]
    exact = simulate(["examples/agent_log.jsonl.gz"], simulation_config(capacity="2e4")).result.waterfall
    token = exact.run("token").hit_tokens
    assert exact.token_bound is None and exact.to_json()["token_level_bound"] is None
    assert bound["low"] <= token <= bound["high"]
    assert bound["high"] > token  # a bound, not the figure
    lines = [f"{b.label} {b.source}" for b in waterfall_bars(wf)]
    assert f"shared at token level: a bound (keys per block) {bound['low']:,} to {bound['high']:,} tokens" in " ".join(
        lines
    )


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("block", [4, 16])
def test_the_bound_holds_on_random_logs(seed, block):
    from prefixplan.api import simulate, simulation_config
    from prefixplan.simulation import SimRequest, Simulation
    from prefixplan.simulation.waterfall import token_bound
    from tests.test_simulate_waterfall import _records

    records = _records(seed, 30)
    exact = simulate(records, simulation_config(block_size=block), workers=1).result.waterfall
    sim = Simulation(simulation_config(block_size=block, waterfall=False))
    for i, rec in enumerate(records):
        sim.add(SimRequest(rec["timestamp"], "m", np.asarray(rec["prompt"], dtype=np.uint32), index=i))
    sim.result()
    low, high = token_bound(sim.trace)
    assert low == exact.run("block").hit_tokens
    assert low <= exact.run("token").hit_tokens <= high
