"""simulate --analysis: pins and hot prefixes from a real analysis record; partitions; tiers
and byte capacities end to end from the CLI."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
from oracles.prompts import iter_prompts

from prefixplan.api import source_options
from prefixplan.cli.app import main
from prefixplan.errors import UsageError
from prefixplan.logs import LineErrors
from prefixplan.savings.kvsize import lookup_builtin
from prefixplan.simulation.options import build_config

WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "epsilon",
    "zeta",
    "eta",
    "theta",
    "iota",
    "kappa",
    "lambda",
    "mu",
    "nu",
    "xi",
    "omicron",
    "pi",
    "rho",
    "sigma",
    "tau",
]


def _text(n: int, seed: int) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(n))


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


HOT = "You are the hot assistant. " + _text(300, 99)


@pytest.fixture(scope="module")
def hot_log(tmp_path_factory):
    """Every 6th request uses the hot system prompt (4 users); a burst of 5 unrelated long
    prompts in between pushes it out of a small LRU cache."""
    tmp = tmp_path_factory.mktemp("pins")
    rows = []
    for i in range(60):
        system = HOT if i % 6 == 0 else f"Cold {i}. " + _text(200, i)
        rows.append(
            {
                "model": "m",
                "messages": [{"role": "system", "content": system}, {"role": "user", "content": f"q {i}"}],
                "user": f"u{i % 4}",
            }
        )
    log = _write(tmp / "log.jsonl", rows)
    record = tmp / "analysis.json"
    assert main(["analyze", str(log), "--json", str(record), "-q", "--no-store"]) == 0
    return log, record


def _sim(capsys, *args: str) -> tuple[int, dict, str]:
    code = main(["simulate", *args, "--json", "-"])
    cap = capsys.readouterr()
    return code, (json.loads(cap.out) if code == 0 else {}), cap.err


def test_pins_from_analysis_protect_the_hot_prefix(hot_log, capsys):
    log, record = hot_log
    top = json.loads(record.read_text())["candidates"][0]
    assert top["token_ids"] is not None and top["length"] > 300
    code, doc, _ = _sim(
        capsys, str(log), "--analysis", str(record), "--top", "1", "--pinned-fraction", "0.4", "--capacity", "1000"
    )
    assert code == 0
    (risk,) = doc["risk"]
    assert risk["label"] == f"#1 {top['key'] or top['label']}" and risk["tokens"] == top["length"]
    assert risk["uses"] == 10  # requests 0, 6, ..., 54
    by = risk["by_model"]
    # a burst of 5 long prompts between uses exceeds the 608-token LRU share: evicted every time
    assert by["lru"] == {"reprefills": 9, "reprefill_tokens": 9 * top["length"]}
    assert by["pinned 40%"] == {"reprefills": 0, "reprefill_tokens": 0}
    assert set(by) == {"lru", "pinned 40%", "auto-promote 40%"}
    head = next(r for r in doc["runs"] if r["label"] == doc["headline"])
    part = head["partition"]
    assert part["pinned_fraction"] == 0.4 and part["pinned_by"] == "pins"
    assert part["pinned_tokens"] == int(1000 // 16 * 0.4) * 16 and part["pinned_used_tokens"] == top["length"]
    assert "40% pinned / 60% lru" in doc["headline"]
    # the pinned headline run reuses the hot prefix 9 times more than plain LRU at the same size
    code, plain, _ = _sim(capsys, str(log), "--capacity", "1000")
    plain_head = next(r for r in plain["runs"] if r["label"] == plain["headline"])
    assert "partition" not in plain_head
    assert head["hit_tokens"] > plain_head["hit_tokens"]
    # the console report shows the partition and the risk table
    assert (
        main(
            [
                "simulate",
                str(log),
                "--analysis",
                str(record),
                "--top",
                "1",
                "--pinned-fraction",
                "0.4",
                "--capacity",
                "1000",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "Partition of 1,000 tokens: 40% pinned" in out and "Eviction risk of hot prefixes" in out
    assert "pinned 40%" in out and "auto-promote 40%" in out and "9 (" in out


def test_pinned_fraction_with_pins_alone_and_running_share(hot_log):
    cfg = build_config(capacity="1e4", pinned_fraction=0.2, running_fraction=0.2, pins=True)
    assert cfg.cache.pinned_fraction == 0.2 and cfg.cache.running_fraction == 0.2
    assert cfg.cache.partition(1e4) == (8000.0, 0.25)  # the cache is 80%; pins take a quarter of it
    assert build_config(capacity="1e4", pins=True).cache.pinned_fraction == 0.2  # default share
    with pytest.raises(UsageError, match="needs pins"):
        build_config(capacity="1e4", pinned_fraction=0.2)
    with pytest.raises(UsageError, match="choose one"):
        build_config(capacity="1e4", pins=True, auto_promote=3)
    with pytest.raises(UsageError):
        build_config(capacity="1e4", pinned_fraction=0.5, running_fraction=0.5, pins=True)


def test_twenty_sixty_twenty_partition(hot_log, capsys):
    log, record = hot_log
    code, doc, _ = _sim(
        capsys,
        str(log),
        "--analysis",
        str(record),
        "--top",
        "1",
        "--capacity",
        "2000",
        "--pinned-fraction",
        "0.2",
        "--running-fraction",
        "0.2",
    )
    assert code == 0
    head = next(r for r in doc["runs"] if r["label"] == doc["headline"])
    assert "(20% pinned / 60% lru / 20% running)" in head["label"]
    part = head["partition"]
    # 1600 cache tokens = 100 blocks: 25 pinned (a quarter of the cache = 20% of the total), 75 LRU
    assert (part["pinned_tokens"], part["policy_tokens"], part["running_tokens"]) == (400, 1200, 400.0)
    assert part["policy_fraction"] == 0.6


def test_withheld_and_missing_pins_are_noted(hot_log, tmp_path, capsys):
    log, record = hot_log
    doc = json.loads(record.read_text())
    doc["candidates"][0]["token_ids"] = None
    withheld = tmp_path / "withheld.json"
    withheld.write_text(json.dumps(doc))
    code, out, _ = _sim(capsys, str(log), "--analysis", str(withheld), "--top", "3", "--capacity", "1000")
    assert code == 0 and out["risk"] == []
    notes = " ".join(out["notes"])
    assert "withheld by the privacy rule" in notes and "no pins" in notes
    code, _, err = _sim(capsys, str(log), "--analysis", str(tmp_path / "nope.json"), "--capacity", "1000")
    assert code == 2 and "not found" in err


def test_tokenizer_fingerprint_mismatch_is_refused(hot_log, tmp_path, capsys):
    log, record = hot_log
    doc = json.loads(record.read_text())
    real = doc["tokenizer"]["fingerprint"]
    for t in [doc["tokenizer"], *doc["tokenizers"]]:
        t["fingerprint"] = "tok1:0123456789abcdef"
        t["spec"] = "hf:/elsewhere"
    other = tmp_path / "other.json"
    other.write_text(json.dumps(doc))
    code, _, err = _sim(capsys, str(log), "--analysis", str(other), "--capacity", "1000")
    assert code == 2
    err = " ".join(err.split())
    assert "tok1:0123456789abcdef" in err and real in err and "never match" in err


def test_tokenizer_mismatch_real_tokenizers(hot_log, qwen3_path, capsys):
    log, record = hot_log  # analysed with the default mistral:nemo
    code, _, err = _sim(
        capsys, str(log), "--tokenizer", f"hf:{qwen3_path}", "--analysis", str(record), "--capacity", "1000"
    )
    assert code == 2
    err = " ".join(err.split())
    assert json.loads(record.read_text())["tokenizer"]["fingerprint"] in err and f"hf:{qwen3_path}" in err


def test_tiers_and_byte_capacities_from_the_cli(tmp_path, capsys):
    """GPU, CPU and disk of 100 MB each (Qwen3-32B: 381 tokens, 23 blocks); A B C A finds A
    in the lower tiers. LRU tiers are one recency stack cut in 23-block ranges; after C the
    stack is C's blocks (root first), then B's, then A's, so A's j-th block is at depth
    len(C) + len(B) + j."""
    rows = [
        {"model": "m", "messages": [{"role": "user", "content": f"Prompt {k}. " + _text(250, 300 + ord(k))}]}
        for k in "ABCA"
    ]
    log = _write(tmp_path / "tiers.jsonl", rows)
    lengths = [len(p.tokens) for p in iter_prompts(source_options(str(log)), LineErrors())]
    kv = lookup_builtin("Qwen3-32B").bytes_per_token
    assert kv == 262_144
    g = int(100e6 / kv) // 16  # blocks per 100 MB
    blocks = [n // 16 for n in lengths]
    assert g == 23 and blocks[1] + blocks[2] <= 2 * g and blocks[1] + blocks[2] + blocks[0] > 2 * g
    hit_blocks = (lengths[3] - 1) // 16
    depth = [blocks[2] + blocks[1] + j for j in range(hit_blocks)]
    assert min(depth) >= g  # nothing of A is left on the GPU
    cpu = 16 * sum(1 for d in depth if g <= d < 2 * g)
    disk = 16 * sum(1 for d in depth if 2 * g <= d < 3 * g)
    assert cpu and disk and cpu + disk == 16 * hit_blocks
    prof = tmp_path / "zero.yaml"
    prof.write_text("name: zero\na_s: 0\nb_s_per_token: 0\nc_s_per_token2: 0\n")
    args = [
        str(log),
        "--model",
        "Qwen3-32B",
        "--capacity",
        "100MB",
        "--tier",
        "cpu:100MB:25:0.5",
        "--tier",
        "disk:100MB:3:2",
        "--profile",
        str(prof),
    ]
    code, doc, _ = _sim(capsys, *args)
    assert code == 0 and doc["kv_bytes_per_token"] == kv
    head = next(r for r in doc["runs"] if r["label"] == doc["headline"])
    assert head["capacity_tokens"] == pytest.approx(100e6 / kv)
    assert "+ cpu 381 tok (0.1 GB) + disk 381 tok (0.1 GB)" in head["label"]
    assert head["cached_tokens_per_request"] == [0, 0, 0, 16 * hit_blocks]
    assert head["loaded_tokens"] == {"cpu": cpu, "disk": disk}
    # zero prefill cost: TTFT is the load time, cpu 25 GB/s + 0.5 ms, disk 3 GB/s + 2 ms
    load = cpu * kv / 25e9 + 0.0005 + disk * kv / 3e9 + 0.002
    assert doc["savings"]["ttft_p95_with_s"] == pytest.approx(np.percentile([0, 0, 0, load], 95))
    assert main(["simulate", *args]) == 0
    out = capsys.readouterr().out
    assert f"cpu {cpu:,} tok, disk {disk:,} tok" in out and "262,144 bytes/token" in out
