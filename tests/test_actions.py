"""Next steps: every action's number is the model's own figure in the record, the list is ranked,
and the console, Markdown and HTML reports show the same list first."""

from __future__ import annotations

import io
import itertools
import json
import math

import pytest
from example_logs import CAPACITY, EXAMPLE, analysis_file, record

from prefixplan.report import views
from prefixplan.report.actions import KVSize, capacity_for, next_steps, per_day, profile_of, resolve_kv


def _by_kind(actions):
    out = {}
    for a in actions:
        out.setdefault(a.kind, []).append(a)
    return out


@pytest.mark.heavy
def test_breaker_action_is_the_breakers_cost():
    rec = record()
    actions = next_steps(rec)
    (move,) = _by_kind(actions)["move-dynamic"]
    breaker = next(b for b in rec["breakers"] if b["kind"] == "dynamic-system")
    assert breaker["cost_tokens"] == 134_680  # the planted "Current time:" line of the example
    assert move.figures["tokens"] == breaker["cost_tokens"] and move.tokens_saved == breaker["cost_tokens"]
    assert f"≈{breaker['cost_tokens']:,} prefill tokens" in move.effect
    # its prefill time is the savings model's: each variant after the first prefills the tail again
    profile, price = profile_of(rec)
    sim_profile = rec["simulation"]["prefill_profile"]
    assert (profile.a, profile.b, profile.c) == (
        sim_profile["a_s"],
        sim_profile["b_s_per_token"],
        sim_profile["c_s_per_token2"],
    )
    tail, offset = breaker["tail_tokens"], breaker["token_offset"]
    once = profile.seconds(tail, offset) - profile.seconds(0, offset)  # the fixed overhead is paid anyway
    assert move.figures["gpu_seconds"] == pytest.approx((breaker["variants"] - 1) * once * profile.gpus, rel=1e-12)
    day = 86_400 / rec["summary"]["time_span_s"]
    assert move.figures["gpu_hours_per_day"] == pytest.approx(move.figures["gpu_seconds"] * day / 3600, rel=1e-12)
    assert price == rec["simulation"]["gpu_hour_price"]
    assert move.figures["usd_per_day"] == pytest.approx(move.figures["gpu_hours_per_day"] * price, rel=1e-12)
    assert f"{move.figures['gpu_hours_per_day']:,.2f} GPU-hours/day" in move.effect
    # the title names where the breaker is and shows the masked system context, never the timestamp
    assert "system line 1, col 15" in move.title and "<date-time>" in move.title
    assert breaker["example"] not in move.title
    (tools,) = _by_kind(actions)["fix-breaker"]
    assert tools.figures["tokens"] == next(b["cost_tokens"] for b in rec["breakers"] if b["kind"] != "dynamic-system")


def test_cache_size_is_read_off_the_recorded_curve():
    rec = record()
    sim = rec["simulation"]
    unbounded = next(r for r in sim["runs"] if r["label"] == sim["persistent"])["hit_rate_tokens"]
    curve = sorted((p["capacity_tokens"], p["hit_rate_tokens"]) for p in sim["curves"]["lru"])
    # the headline simulation sweeps finely (R10 steps), not by decades
    assert all(b / a <= 1.3 for (a, _), (b, _) in itertools.pairwise(curve))
    assert curve[-1][1] == pytest.approx(unbounded)  # the sweep reaches the log's footprint
    kv = resolve_kv(model="Llama-3.1-8B-Instruct")
    assert kv is not None and kv.bytes_per_token == 131_072
    (size,) = _by_kind(next_steps(rec, kv))["size-cache"]
    for share in (0.9, 0.95):
        pct = round(share * 100)
        want = next((c, r) for c, r in curve if r >= share * unbounded)
        below = [(c, r) for c, r in curve if c < want[0]]
        assert below and below[-1][1] < share * unbounded  # the smallest capacity that reaches the share
        assert size.figures[f"capacity_{pct}_tokens"] == want[0]
        assert size.figures[f"hit_rate_{pct}"] == want[1]
        assert size.figures[f"kv_gb_{pct}"] == pytest.approx(want[0] * 131_072 / 1e9)
        assert f"{want[0]:,.0f} tokens ({want[0] * 131_072 / 1e9:,.1f} GB) for {pct}%" in size.title
    # the savings at that size are the simulation's own (savings_curve), scaled to a day at the log's rate
    saved = {p["capacity_tokens"]: p["gpu_seconds_saved"] for p in sim["savings_curve"]["lru"]}
    assert size.figures["gpu_seconds_saved_90"] == saved[size.figures["capacity_90_tokens"]]
    assert size.figures["gpu_hours_per_day"] == pytest.approx(
        saved[size.figures["capacity_90_tokens"]] * per_day(rec) / 3600, rel=1e-12
    )
    # and the savings curve at the configured capacity is the headline savings of the same run
    assert saved[float(CAPACITY)] == pytest.approx(sim["savings"]["gpu_seconds_saved"], rel=1e-9)


def test_curve_point_equals_an_independent_simulation():
    """The recorded hit rate at the 90% size is what prefixplan simulate gives at that capacity."""
    import prefixplan

    rec = record()
    (size,) = _by_kind(next_steps(rec))["size-cache"]
    cap = size.figures["capacity_90_tokens"]
    cfg = prefixplan.simulation_config(capacity=f"{cap:g}")
    result = prefixplan.simulate(str(EXAMPLE), cfg)
    assert result.hit_rate("lru", cap) == size.figures["hit_rate_90"]


@pytest.mark.heavy
def test_pin_action_is_the_pinned_run():
    import prefixplan
    from prefixplan.simulation import CacheModel, SimConfig

    rec = record()
    pinned = rec["simulation"]["pinned"]
    (pin,) = _by_kind(next_steps(rec))["pin"]
    head = next(r for r in rec["simulation"]["runs"] if r["label"] == rec["simulation"]["headline"])
    assert pinned["baseline_hit_tokens"] == head["hit_tokens"]
    assert pin.figures["tokens"] == pinned["hit_tokens"] - head["hit_tokens"] > 0
    assert pin.figures["ranks"] == pinned["ranks"] and pin.figures["pinned_tokens"] == pinned["pinned_tokens"]
    assert pin.figures["hit_rate_after"] == pinned["hit_rate_tokens"]
    assert f"#{pinned['ranks'][0]}–#{pinned['ranks'][-1]}" in pin.title
    # the same pins through prefixplan simulate (--analysis --top k, 20% pinned, pre-warmed)
    top = len(pinned["ranks"])
    assert pinned["ranks"] == list(range(1, top + 1))
    cfg = SimConfig(cache=CacheModel(capacities=(float(CAPACITY),), pinned_fraction=0.2, prewarm_pins=True))
    result = prefixplan.simulate(str(EXAMPLE), cfg, pins_from=analysis_file(), pin_top=top)
    run = next(r for r in result.result.runs if r.capacity_tokens == CAPACITY)
    assert run.hit_tokens == pinned["hit_tokens"]
    # KV memory of the pins with a model's KV size
    kv = KVSize(70_272, "DeepSeek-V3")
    (pin,) = _by_kind(next_steps(rec, kv))["pin"]
    assert pin.figures["kv_gb"] == pytest.approx(pinned["pinned_tokens"] * 70_272 / 1e9)


def test_rag_action_and_ranking():
    rec = record()
    actions = next_steps(rec)
    (rag,) = _by_kind(actions)["reorder-rag"]
    assert rag.figures["tokens"] == rec["rag"]["whatif"]["gain_tokens"] > 0
    assert [a.tokens_saved for a in actions] == sorted((a.tokens_saved for a in actions), reverse=True)
    assert actions[0].kind == "move-dynamic"  # the planted breaker is the costliest thing to fix


def test_every_report_shows_the_same_list_first():
    from rich.console import Console

    from prefixplan.report.console import render_analysis
    from prefixplan.report.html import render_html
    from prefixplan.report.markdown import render_markdown

    rec = record()
    titles = [a.title for a in next_steps(rec)]
    md = render_markdown(rec)
    heads = [line for line in md.splitlines() if line.startswith("### ")]
    assert heads[0] == "### Next steps"
    md_items = [line for line in md.splitlines() if line[:3] in {f"{i}. " for i in range(1, 10)}]
    assert len(md_items) == len(titles)
    page = render_html(rec)
    assert page.index("<section") == page.index('<section id="next-steps">')  # the first section
    data = json.loads(page.split('<script type="application/json" id="pp-data">')[1].split("</script>")[0])
    assert [a["title"] for a in data["next_steps"]] == titles
    buf = io.StringIO()
    render_analysis(rec, Console(file=buf, width=400))
    text = buf.getvalue()
    assert text.index("Next steps") < text.index("requests")
    positions = [text.index(t) for t in titles]
    assert positions == sorted(positions)


def test_capacity_for_is_the_smallest_reaching_point():
    curve = [(10.0, 0.1), (20.0, 0.5), (40.0, 0.5), (80.0, 0.9)]
    assert capacity_for(curve, 0.5) == (20.0, 0.5)
    assert capacity_for(list(reversed(curve)), 0.85) == (80.0, 0.9)
    assert capacity_for(curve, 0.95) is None


def test_without_a_time_span_there_are_no_per_day_figures():
    rec = record()
    rec["summary"]["time_span_s"] = 0
    move = next(a for a in next_steps(rec) if a.kind == "move-dynamic")
    assert move.figures["gpu_hours_per_day"] is None and "GPU-seconds over the log" in move.effect
    assert not math.isnan(move.figures["gpu_seconds"])
    assert views.split_withheld([], rec) == ([], None)


def test_pinning_that_would_not_help_is_not_suggested():
    """On the benchmark log LRU already keeps the system prompts resident: a 20% pinned partition
    only shrinks the rest of the cache, and the next steps leave it out."""
    rec = record()
    pinned = rec["simulation"]["pinned"]
    pinned["hit_tokens"] = pinned["baseline_hit_tokens"] - 1
    assert "pin" not in _by_kind(next_steps(rec))
