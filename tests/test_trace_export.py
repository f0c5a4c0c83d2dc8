"""Mooncake export: a workload shared without its prompts; read back, it replays like its log."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from prefixplan.cli.app import main

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "agent_log.jsonl.gz"
pytestmark = pytest.mark.skipif(not EXAMPLE.is_file(), reason="example log not generated")


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.heavy
def test_an_export_replays_like_its_log_and_its_ids_differ_per_export(tmp_path: Path) -> None:
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    assert main(["trace", str(EXAMPLE), "--export", "mooncake", "-o", str(a), "-q"]) == 0
    assert main(["trace", str(EXAMPLE), "--export", "mooncake", "-o", str(b), "-q"]) == 0
    la, lb = _lines(a), _lines(b)
    assert [set(x) for x in la[:1]] == [{"timestamp", "input_length", "output_length", "hash_ids"}]
    assert [(x["timestamp"], x["input_length"], len(x["hash_ids"])) for x in la] == [
        (x["timestamp"], x["input_length"], len(x["hash_ids"])) for x in lb
    ]
    ids_a = {h for x in la for h in x["hash_ids"]}
    ids_b = {h for x in lb for h in x["hash_ids"]}
    assert len(ids_a) == len(ids_b) and not ids_a & ids_b  # same structure, unrelated ids
    assert all(0 <= h < 2**32 for h in ids_a)
    times = [x["timestamp"] for x in la]
    assert times == sorted(times) and times[0] == 0
    assert all(len(x["hash_ids"]) == -(-x["input_length"] // 512) for x in la)
    # the same hit rates as the log at the export's block size
    args = ["--capacity", "2e4,1e5", "--policy", "lru,lfu", "-q"]
    assert main(["simulate", str(EXAMPLE), "--block-size", "512", *args, "--json", str(tmp_path / "log.json")]) == 0
    assert main(["simulate", str(a), *args, "--json", str(tmp_path / "mc.json")]) == 0
    log_runs = json.loads((tmp_path / "log.json").read_text())["runs"]
    mc_runs = json.loads((tmp_path / "mc.json").read_text())["runs"]
    persistent = [(r["policy"], r["capacity_tokens"], r["prompt_tokens"], r["hit_tokens"]) for r in log_runs[1:]]
    assert persistent == [(r["policy"], r["capacity_tokens"], r["prompt_tokens"], r["hit_tokens"]) for r in mc_runs[1:]]
    assert any(h for *_, h in persistent)


def test_export_from_a_trace_file_and_block_size_checks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "t.parquet"
    assert main(["trace", str(EXAMPLE), "-o", str(trace), "-q"]) == 0
    out = tmp_path / "m.jsonl"
    assert main(["trace", str(trace), "--export", "mooncake", "--block-size", "256", "-o", str(out), "-q"]) == 0
    assert all(len(x["hash_ids"]) == -(-x["input_length"] // 256) for x in _lines(out))
    assert main(["trace", str(trace), "--export", "mooncake", "--block-size", "100", "-o", str(out), "-q"]) == 2
    assert "every 16 tokens" in capsys.readouterr().err
    assert main(["trace", str(trace), "-o", str(tmp_path / "again.parquet")]) == 2


def test_mooncake_input_length_is_the_prompt_length(tmp_path: Path) -> None:
    """A line's input_length counts (the last hash id may stand for a partial block) and the
    last-token rule applies to it."""
    log = tmp_path / "mc.jsonl"
    rows = [
        {"timestamp": 0, "input_length": 1000, "output_length": 5, "hash_ids": [1, 2]},
        {"timestamp": 10, "input_length": 1030, "output_length": 5, "hash_ids": [1, 2, 3]},
        {"timestamp": 20, "input_length": 1024, "output_length": 5, "hash_ids": [1, 2]},
    ]
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["simulate", str(log), "-q", "--json", str(tmp_path / "s.json")]) == 0
    doc = json.loads((tmp_path / "s.json").read_text())
    persistent = doc["runs"][1]
    assert persistent["prompt_tokens"] == 1000 + 1030 + 1024
    # request 2 reuses both full blocks of request 1? Only one: request 1 has 1 full block (1000 tokens);
    # request 2 (1030 tokens, 2 full blocks) reuses block 1; request 3 (1024 tokens = 2 full blocks) may
    # reuse only 1 block: its last token is never reused
    assert persistent["cached_tokens_per_request"] == [0, 512, 512]
    assert "512-token" in persistent["granularity"] or "512" in persistent["granularity"]
