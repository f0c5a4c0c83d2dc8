"""`prefixplan simulate` on the bundled example log."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from prefixplan.cli.app import main
from prefixplan.errors import UsageError
from prefixplan.savings.kvsize import lookup_builtin
from prefixplan.simulate.api import parse_capacity, parse_tier
from prefixplan.simulate.options import build_config

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "agent_log.jsonl.gz"


@pytest.mark.skipif(not EXAMPLE.is_file(), reason="example log not generated")
def test_cli_two_generations_and_curve(tmp_path, capsys):
    out = tmp_path / "sim.json"
    code = main(["simulate", str(EXAMPLE), "--engine", "vllm", "--capacity", "1e4,1e5,1e6", "--json", str(out)])
    assert code in (0, None)
    text = capsys.readouterr().out
    assert "in-batch sharing (generation a)" in text and "radix cache, unbounded (generation b)" in text
    assert "Capacity curve" in text and "queueing is not modelled" in text
    doc = json.loads(out.read_text())
    assert doc["granularity"].startswith("vllm: full 16-token blocks")
    rates = [p["hit_rate_tokens"] for p in doc["curves"]["lru"]]
    assert rates == sorted(rates)
    runs = {r["label"]: r for r in doc["runs"]}
    gen_a = runs[doc["in_batch"]]
    gen_b = runs[doc["persistent"]]
    assert gen_a["hit_tokens"] <= gen_b["hit_tokens"]
    assert len(gen_b["cached_tokens_per_request"]) == doc["requests"]
    assert rates[-1] <= gen_b["hit_rate_tokens"] + 1e-12


def test_option_parsing():
    kv = lookup_builtin("Llama-3.1-8B-Instruct")
    assert parse_capacity("1e6", None) == 1e6
    assert parse_capacity("1GiB", kv) == 2**30 / 131_072  # 8192 tokens
    with pytest.raises(UsageError):
        parse_capacity("40GB", None)
    with pytest.raises(UsageError):
        parse_capacity("lots", None)
    t = parse_tier("cpu:1GiB:25:0.5", kv)
    assert (t.name, t.capacity_tokens, t.bandwidth_bytes_per_s, t.latency_s) == ("cpu", 8192.0, 25e9, 0.0005)
    cfg = build_config(capacity="1GiB,2GiB", model="Llama-3.1-8B-Instruct", auto_promote=3, policy="lru,lfu")
    assert cfg.capacities == (8192.0, 16384.0) and cfg.pinned_fraction == 0.2 and cfg.policies == ("lru", "lfu")
    with pytest.raises(UsageError):
        build_config(tiers=["cpu:1e6"])  # tiers need --capacity
