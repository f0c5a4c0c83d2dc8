"""Savings model: KV bytes golden values, prefill/TTFT and money hand-computed examples."""

from __future__ import annotations

import json

import numpy as np
import pytest

from prefixplan.errors import InputError, UsageError
from prefixplan.savings.kvsize import from_config, load_config, lookup_builtin, prefix_memory_bytes
from prefixplan.savings.prefill import PrefillProfile, dump_profile, load_profile, time_savings
from prefixplan.savings.pricing import hosted_cost, load_prices, self_hosted_saving


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        # 2 (K,V) x layers x kv_heads x head_dim x 2 bytes (bf16)
        ("Llama-3.1-8B-Instruct", 2 * 32 * 8 * 128 * 2),  # 131,072
        ("meta-llama/Llama-3.1-70B-Instruct", 2 * 80 * 8 * 128 * 2),  # 327,680
        ("Qwen2.5-7B-Instruct", 2 * 28 * 4 * 128 * 2),  # 57,344
        ("Qwen3-32B", 2 * 64 * 8 * 128 * 2),  # 262,144
        # MLA: layers x (kv_lora_rank + qk_rope_head_dim) x 2 bytes
        ("DeepSeek-V3", 61 * (512 + 64) * 2),  # 70,272
    ],
)
def test_kv_bytes_golden(model, expected):
    assert lookup_builtin(model).bytes_per_token == expected


def test_kv_golden_literals():
    assert lookup_builtin("Llama-3.1-8B-Instruct").bytes_per_token == 131_072
    assert lookup_builtin("Llama-3.1-70B-Instruct").bytes_per_token == 327_680
    assert lookup_builtin("Qwen2.5-7B-Instruct").bytes_per_token == 57_344
    assert lookup_builtin("Qwen3-32B").bytes_per_token == 262_144
    assert lookup_builtin("DeepSeek-V3").bytes_per_token == 70_272
    assert lookup_builtin("Llama-3.1-8B-Instruct", dtype_bytes=1).bytes_per_token == 65_536


def test_config_json_defaults(tmp_path):
    # head_dim missing -> hidden / heads; num_key_value_heads missing -> heads (MHA)
    cfg = {"num_hidden_layers": 4, "num_attention_heads": 8, "hidden_size": 512, "torch_dtype": "float32"}
    shape = from_config(cfg)
    assert (shape.kv_heads, shape.head_dim, shape.dtype_bytes) == (8, 64, 4)
    assert shape.bytes_per_token == 2 * 4 * 8 * 64 * 4
    assert from_config(cfg, dtype_bytes=2).bytes_per_token == 2 * 4 * 8 * 64 * 2  # --kv-dtype-bytes 2
    # Qwen3-style explicit head_dim wins over hidden/heads
    q3 = {
        "num_hidden_layers": 64,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "hidden_size": 5120,
        "torch_dtype": "bfloat16",
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(q3))
    assert load_config(tmp_path).bytes_per_token == 262_144
    mla = {
        "num_hidden_layers": 61,
        "num_attention_heads": 128,
        "kv_lora_rank": 512,
        "qk_rope_head_dim": 64,
        "hidden_size": 7168,
        "torch_dtype": "bfloat16",
    }
    assert from_config({"text_config": mla}).bytes_per_token == 70_272
    with pytest.raises(InputError):
        from_config({"hidden_size": 3})
    with pytest.raises(UsageError):
        lookup_builtin("no-such-model")


def test_prefix_memory():
    shape = lookup_builtin("Llama-3.1-8B-Instruct")
    assert prefix_memory_bytes(4096, shape) == 4096 * 131_072  # 512 MiB


def test_prefill_and_ttft_hand_computed():
    prof = PrefillProfile("t", a=0.01, b=1e-4, c=1e-8)
    # without: 0.01 + 1e-4*1000 + 1e-8*1000*(0 + 500) = 0.115
    assert prof.seconds(1000, 0) == pytest.approx(0.115)
    # with 800 cached: 0.01 + 1e-4*200 + 1e-8*200*(800 + 100) = 0.0318
    assert prof.seconds(200, 800) == pytest.approx(0.0318)
    s = time_savings(np.array([1000, 1000]), np.array([800, 0]), prof)
    assert s.gpu_seconds_without == pytest.approx(0.230)
    assert s.gpu_seconds_with == pytest.approx(0.115 + 0.0318)
    assert s.gpu_seconds_saved == pytest.approx(0.0832)
    assert s.ttft_p50_without == pytest.approx(0.115)
    assert s.ttft_p50_with == pytest.approx((0.115 + 0.0318) / 2)
    # p95 of two values by linear interpolation: 0.0318 + 0.95 * (0.115 - 0.0318)
    assert s.ttft_p95_with == pytest.approx(0.0318 + 0.95 * 0.0832)
    # tier load time adds to TTFT, not to GPU compute
    s2 = time_savings(np.array([1000]), np.array([800]), prof, load_seconds=np.array([0.5]))
    assert s2.ttft_p50_with == pytest.approx(0.5318)
    assert s2.gpu_seconds_with == pytest.approx(0.0318)


def test_profile_yaml_round_trip(tmp_path):
    prof = PrefillProfile("mine", a=0.02, b=2e-5, c=3e-10, gpus=2, gpu="H100", source="measured 2025-01-01")
    path = tmp_path / "p.yaml"
    path.write_text(dump_profile(prof))
    back = load_profile(path)
    assert back == prof
    assert not back.assumed
    assert load_profile(None).basis == "derived" and not load_profile(None).assumed  # a roofline, not typed in
    with pytest.raises(UsageError):
        load_profile("nope")
    # a calibrate-style file (extra keys ignored) is read as measured
    cal = tmp_path / "cal.yaml"
    cal.write_text(
        "kind: prefixplan/prefill-profile\nversion: 1\na_s: 0.01\nb_s_per_token: 1.0e-4\n"
        "c_s_per_token2: 1.0e-8\ncreated: '2026-01-01'\nstderr: {a_s: 0.001}\nsamples: [[1, 0, 0.1]]\n"
    )
    got = load_profile(cal)
    assert (got.a, got.b, got.c, got.assumed) == (0.01, 1e-4, 1e-8, False)
    assert got.seconds(1000, 0) == pytest.approx(0.115)


def test_money_hand_computed(tmp_path):
    table = load_prices()
    assert table["as_of"]
    # Anthropic Sonnet $3/M: 10,000 prompt tokens, 8,000 read, 1,000 written (5m), 1,000 plain
    m = hosted_cost("anthropic", "claude-sonnet-4-5-20250929", 10_000, 8_000, 1_000, "5m", table)
    assert m.cost_without == pytest.approx(0.03)
    assert m.cost_with == pytest.approx(3e-6 * (1_000 + 1_000 * 1.25 + 8_000 * 0.1))  # 0.00915
    m1h = hosted_cost("anthropic", "claude-sonnet-4", 10_000, 8_000, 1_000, "1h", table)
    assert m1h.cost_with == pytest.approx(3e-6 * (1_000 + 2_000 + 800))
    # OpenAI gpt-4o $2.50/M, cached $1.25/M; longest key wins over gpt-4o for gpt-4o-mini
    o = hosted_cost("openai", "gpt-4o-2024-08-06", 10_000, 8_000, table=table)
    assert o.cost_with == pytest.approx(2_000 * 2.5e-6 + 8_000 * 1.25e-6)  # 0.015
    assert hosted_cost("openai", "gpt-4o-mini", 1_000_000, 0, table=table).cost_without == pytest.approx(0.15)
    # user override replaces one entry, keeps the rest
    over = tmp_path / "prices.yaml"
    over.write_text("providers:\n  openai:\n    models:\n      gpt-4o: {input: 10.0, cached_input: 1.0}\n")
    t2 = load_prices(over)
    assert hosted_cost("openai", "gpt-4o", 1_000_000, 500_000, table=t2).cost_with == pytest.approx(5.0 + 0.5)
    assert "gpt-4.1" in t2["providers"]["openai"]["models"]
    assert self_hosted_saving(7200.0, 2.5) == pytest.approx(5.0)
    with pytest.raises(UsageError):
        hosted_cost("openai", "unknown-model", 1, 0, table=table)
