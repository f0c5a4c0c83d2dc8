"""`prefixplan simulate` on the bundled example log."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from prefixplan.cli.app import main
from prefixplan.errors import UsageError
from prefixplan.savings.kvsize import lookup_builtin
from prefixplan.simulation.capacity import parse_capacity, parse_tier
from prefixplan.simulation.options import build_config

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "agent_log.jsonl.gz"


@pytest.mark.skipif(not EXAMPLE.is_file(), reason="example log not generated")
def test_cli_two_generations_and_curve(tmp_path, capsys):
    out = tmp_path / "sim.json"
    code = main(["simulate", str(EXAMPLE), "--granularity", "vllm", "--capacity", "1e4,1e5,1e6", "--json", str(out)])
    assert code == 0
    text = capsys.readouterr().out
    assert "in-batch sharing (generation a)" in text and "radix cache, unbounded (generation b)" in text
    assert "Capacity curve" in text and "queueing is not modelled" in text
    for cap in ("10k", "100k", "1M"):
        assert f"lru {cap} tok" in text
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


@pytest.mark.skipif(not EXAMPLE.is_file(), reason="example log not generated")
def test_cli_json_to_stdout(capsys):
    code = main(["simulate", str(EXAMPLE), "--granularity", "vllm", "--capacity", "1e4,1e5,1e6", "--json", "-"])
    cap = capsys.readouterr()
    assert code == 0
    doc = json.loads(cap.out)  # stdout is the JSON document alone
    assert "Capacity curve" in cap.err and "Capacity curve" not in cap.out  # the report moves to stderr
    assert [p["capacity_tokens"] for p in doc["curves"]["lru"]] == [1e4, 1e5, 1e6]
    runs = {r["label"]: r for r in doc["runs"]}
    assert doc["headline"] == "lru 10k tok"
    for name in ("in_batch", "persistent", "headline"):
        per = runs[doc[name]]["cached_tokens_per_request"]
        assert len(per) == doc["requests"] and sum(per) == runs[doc[name]]["hit_tokens"]
        assert all(c % 16 == 0 for c in per)
    assert "cached_tokens_per_request" not in runs["lru 100k tok"]  # only the named runs carry arrays


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
    assert (
        cfg.cache.capacities == (8192.0, 16384.0)
        and cfg.cache.pinned_fraction == 0.2
        and cfg.cache.policies == ("lru", "lfu")
    )
    with pytest.raises(UsageError):
        build_config(tiers=["cpu:1e6"])  # tiers need --capacity


def _sim_log(tmp_path: Path) -> Path:
    system = (
        "You are the support assistant of a large company with many rules. " * 100
    )  # > 1,024 tokens: hosted caches start there
    rows = [
        {
            "model": "m",
            "user": f"u{i % 4}",
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": f"question {i}"}],
        }
        for i in range(12)
    ]
    log = tmp_path / "log.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return log


def test_docs_and_program_agree_on_profiles_providers_and_capacities(tmp_path: Path, capsys) -> None:
    from prefixplan.errors import ExitCode

    log = _sim_log(tmp_path)
    # A built-in profile name works wherever --profile does; a missing YAML file says so.
    assert main(["simulate", str(log), "--profile", "h100-8b", "-q"]) == 0
    capsys.readouterr()
    assert main(["simulate", str(log), "--profile", "my-endpoint.yaml", "-q"]) == ExitCode.USAGE
    assert "file not found" in capsys.readouterr().err
    # Hosted providers: money, never an H100's GPU-seconds or TTFT.
    assert main(["simulate", str(log), "--provider", "openai", "--model", "gpt-4o", "--json", "-", "-q"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["savings"] is None and doc["money"]["usd_saved"] > 0
    assert any("not modelled for hosted APIs" in n for n in doc["notes"])
    # Anthropic with one breakpoint at each prompt's end: no reads here, and the output says why and what to do.
    assert (
        main(
            [
                "simulate",
                str(log),
                "--provider",
                "anthropic",
                "--model",
                "claude-sonnet-4",
                "--breakpoints",
                "auto",
                "--json",
                "-",
                "-q",
            ]
        )
        == 0
    )
    doc = json.loads(capsys.readouterr().out)
    assert doc["money"]["usd_saved"] < 0 and any("no request read a cached prefix" in n for n in doc["notes"])
    # A capacity given in bytes reads back in bytes; tiered hit rates say what the GPU alone holds.
    assert (
        main(
            ["simulate", str(log), "--capacity", "1GB", "--model", "Llama-3.1-8B-Instruct", "--tier", "cpu:2GB:25:0.5"]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "lru 7.63k tok (1 GB) + cpu 15.3k tok (2 GB)" in out and "GPU only" in out and "e+0" not in out
