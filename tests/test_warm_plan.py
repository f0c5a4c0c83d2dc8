"""Warm plan selection: top-N, keys, nesting (deepest of each chain once), KV budget (exact tree
knapsack checked against brute force over all ancestor-closed subsets)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from records import plan_from_record

from prefixplan.errors import UsageError
from prefixplan.savings.prefill import PrefillProfile
from prefixplan.warming.plan import estimate_prefill, select_within_budget


def cand(rank: int, ids: list[int] | None, value: int, parent: int | None = None, key: str | None = None) -> dict:
    return {
        "rank": rank,
        "name": f"p{rank}",
        "key": key,
        "length": len(ids) if ids else 64,
        "token_ids": ids,
        "marginal_tokens": value,
        "reusable_tokens": value,
        "parent": parent,
        "namespace": "m",
    }


SYS = list(range(64))
TOOLS = SYS + list(range(500, 532))  # child of SYS
RAG = TOOLS + list(range(900, 932))  # child of TOOLS
OTHER = list(range(2000, 2048))
RECORD = {
    "tokenizer": {"spec": "hf:x", "fingerprint": "fp1", "label": "x"},
    "granularity": {"block_size": 16},
    "candidates": [
        cand(1, SYS, 1000, key="sys@v2"),
        cand(2, TOOLS, 600, parent=1),
        cand(3, OTHER, 300),
        cand(4, RAG, 100, parent=2),
        cand(5, None, 50),
    ],
}


def test_top_n_warms_deepest_of_each_chain_once() -> None:
    plan = plan_from_record(RECORD, top=3)
    assert [i.rank for i in plan.items] == [2, 3]
    assert plan.items[0].covers == (1,) and plan.items[0].token_ids == tuple(TOOLS)
    assert plan.items[0].value_tokens == 1600 and plan.value_tokens == 1900
    assert plan.memory_tokens == 96 + 48 and plan.selected == (1, 2, 3)
    plan = plan_from_record(RECORD, top=5)
    assert [i.rank for i in plan.items] == [3, 4] and plan.items[1].covers == (1, 2)
    assert plan.skipped == ((5, "token ids withheld (privacy) and not in the store"),)


def test_parent_from_token_ids_when_record_has_none() -> None:
    rec = dict(RECORD, candidates=[dict(c, parent=None) for c in RECORD["candidates"]])
    plan = plan_from_record(rec, top=4)
    assert [i.rank for i in plan.items] == [3, 4] and plan.items[1].covers == (1, 2)


def test_keys_and_store_lookup_for_withheld_ids() -> None:
    plan = plan_from_record(RECORD, keys=["sys@v2"])
    assert [(i.rank, i.key, i.name, i.version) for i in plan.items] == [(1, "sys@v2", "sys", 2)]
    with pytest.raises(UsageError, match="nope@v1"):
        plan_from_record(RECORD, keys=["nope@v1"])
    rec = dict(RECORD, candidates=[*RECORD["candidates"][:4], cand(5, None, 50, key="secret@v1")])
    plan = plan_from_record(rec, keys=["secret@v1"], token_lookup=lambda k: list(range(7000, 7040)))
    assert plan.items[0].token_ids == tuple(range(7000, 7040))


def test_short_prefix_skipped_and_block_override() -> None:
    rec = dict(RECORD, candidates=[cand(1, list(range(10)), 5)])
    plan = plan_from_record(rec, top=1)
    assert plan.items == () and "shorter than one cache block" in plan.skipped[0][1]
    assert plan_from_record(rec, top=1, block_size=8).items[0].rank == 1


def test_budget_needs_kv_bytes_and_selects_best_set() -> None:
    with pytest.raises(UsageError, match="KV bytes per token"):
        plan_from_record(RECORD, top=4, budget_gb=1)
    # 100 bytes/token; budget 9600 bytes = 96 tokens = SYS+TOOLS chain (value 1600) beats SYS+OTHER (1300).
    plan = plan_from_record(RECORD, top=4, budget_gb=9600e-9, kv_bytes_per_token=100)
    assert [i.rank for i in plan.items] == [2] and plan.memory_tokens == 96 and plan.memory_bytes == 9600
    assert {r for r, _ in plan.skipped} == {3, 4}
    # 160 tokens: SYS+TOOLS+OTHER (144 tokens, 1900) beats SYS+TOOLS+RAG (128 tokens, 1700).
    plan = plan_from_record(RECORD, top=4, budget_gb=16000e-9, kv_bytes_per_token=100)
    assert [i.rank for i in plan.items] == [2, 3] and plan.value_tokens == 1900 and plan.memory_tokens == 144
    plan = plan_from_record(RECORD, top=4, budget_gb=1, kv_bytes_per_token=100)
    assert [i.rank for i in plan.items] == [3, 4]


def _closed(subset: set[int], parents: dict[int, int | None]) -> bool:
    return all(parents[n] is None or parents[n] in subset for n in subset)


@st.composite
def forests(draw: st.DrawFn) -> tuple[dict[int, int], dict[int, int], dict[int, int | None], int]:
    n = draw(st.integers(1, 8))
    parents: dict[int, int | None] = {}
    for i in range(n):
        parents[i] = draw(st.one_of(st.none(), st.integers(0, i - 1))) if i else None
    values = {i: draw(st.integers(0, 50)) for i in range(n)}
    costs = {i: draw(st.integers(0, 6)) for i in range(n)}
    return values, costs, parents, draw(st.integers(0, 20))


@settings(max_examples=200, deadline=None)
@given(forests())
def test_budget_selection_matches_brute_force(case: tuple) -> None:
    values, costs, parents, cap = case
    chosen = select_within_budget(values, costs, parents, cap)
    assert _closed(chosen, parents) and sum(costs[n] for n in chosen) <= cap
    best = 0
    nodes = list(values)
    for k in range(len(nodes) + 1):
        for sub in itertools.combinations(nodes, k):
            s = set(sub)
            if _closed(s, parents) and sum(costs[n] for n in s) <= cap:
                best = max(best, sum(values[n] for n in s))
    assert sum(values[n] for n in chosen) == best


def test_estimates_reuse_shared_prefix_and_profile_formula() -> None:
    plan = plan_from_record(RECORD, top=5)
    assert len(estimate_prefill(plan)) == len(plan.items)  # the default (assumed) profile
    p = PrefillProfile("t", a=0.01, b=1e-4, c=0.0)
    assert p.seconds(100, 0) == pytest.approx(0.02)
    est = estimate_prefill(plan, p)
    # item 1 (OTHER, 48 tokens + 1) cold; item 2 (RAG, 128 + 1) shares nothing with OTHER.
    assert est == [pytest.approx(0.01 + 49e-4), pytest.approx(0.01 + 129e-4)]
    d = plan.to_dict(p)
    assert d["est_prefill_s"] == pytest.approx(sum(est), abs=1e-3) and d["items"][0]["tokens"] == 48


def test_kv_bytes_from_config() -> None:
    from prefixplan.savings.kvsize import from_config

    cfg = {
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": 32,
        "hidden_size": 64,
        "torch_dtype": "float32",
    }
    assert from_config(cfg).bytes_per_token == 512  # vLLM reported 512 for the tiny model
    assert from_config({**cfg, "torch_dtype": "bfloat16"}).bytes_per_token == 256


def test_mla_model_config_budget_uses_the_latent_kv_size(tmp_path, capsys) -> None:
    """warm --budget with a DeepSeek (MLA) config: 61 x (512 + 64) x 2 B = 70,272 B/token, not the
    1,748,992 B/token of a per-head K/V formula (which would overstate memory 25x)."""
    import json

    from prefixplan.cli.app import main

    cfg = {
        "num_hidden_layers": 61,
        "num_attention_heads": 128,
        "num_key_value_heads": 128,
        "hidden_size": 7168,
        "kv_lora_rank": 512,
        "qk_rope_head_dim": 64,
        "qk_nope_head_dim": 128,
        "v_head_dim": 128,
        "torch_dtype": "bfloat16",
    }
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    ids = list(range(1024))
    rec = {
        "schema_version": 1,
        "tokenizer": {"spec": "hf:x", "fingerprint": "fp"},
        "granularity": {"block_size": 16},
        "candidates": [{"rank": 1, "name": "sys", "length": 1024, "token_ids": ids, "marginal_tokens": 5000}],
    }
    (tmp_path / "a.json").write_text(json.dumps(rec))
    # 0.1 GB holds 1,024 tokens at 70,272 B (72 MB) but not at 1,748,992 B (1.79 GB).
    code = main(
        [
            "warm",
            "--analysis",
            str(tmp_path / "a.json"),
            "--budget",
            "0.1",
            "--model-config",
            str(tmp_path / "config.json"),
            "--dry-run",
            "--json",
            "-",
            "--no-store",
        ]
    )
    plan = json.loads(capsys.readouterr().out)["plan"]
    assert code == 0 and plan["kv_bytes_per_token"] == 70_272
    assert [i["rank"] for i in plan["items"]] == [1] and plan["memory_bytes"] == 1024 * 70_272


def test_a_budget_never_sends_an_ancestor_that_was_skipped() -> None:
    """Under --budget the knapsack sees each usable prefix's ancestors (their blocks are needed),
    but an ancestor that is not usable itself (withheld ids, shorter than a block) carries no
    value: it is never sent alone."""
    from prefixplan.warming.plan import WarmCandidate, WarmSource, plan_warm

    ids = tuple(range(200))
    child = WarmCandidate(rank=1, name="c", key=None, token_ids=ids, length=200, value=10, parent=2)
    withheld = WarmCandidate(rank=2, name="p", key=None, token_ids=None, length=96, value=1000)
    plan = plan_warm(WarmSource((child, withheld), block_size=16), top=1, budget_gb=2e-7, kv_bytes_per_token=2)
    assert plan.items == () and [r for r, _ in plan.skipped] == [1]  # 200 tokens do not fit 100
    short = WarmCandidate(rank=2, name="p", key=None, token_ids=ids[:8], length=8, value=1000)
    plan = plan_warm(WarmSource((child, short), block_size=16), top=1, budget_gb=1e-6, kv_bytes_per_token=2)
    assert [(i.rank, len(i.token_ids)) for i in plan.items] == [(1, 200)]
    tight = plan_warm(WarmSource((child, short), block_size=16), top=1, budget_gb=2e-7, kv_bytes_per_token=2)
    assert tight.items == ()
