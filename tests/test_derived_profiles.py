"""Built-in prefill profiles are derived from a model and a GPU (the roofline), printed with their
provenance; simulate derives one from --model/--model-config on --gpu x --tensor-parallel, and a
measured --profile is used as it is."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from prefixplan.errors import UsageError
from prefixplan.savings.derive import model_profile
from prefixplan.savings.prefill import (
    BUILTIN_PROFILES,
    PrefillProfile,
    builtin_profile,
    load_profile,
    profile_from_mapping,
    profile_json,
)
from prefixplan.simulation.options import build_config

# The coefficients these profiles had when fitted once by hand from the roofline (issue 39): deriving
# them again at the default efficiency (0.5) and overhead (5 ms) must give the same figures.
REFERENCE = {
    "h100-8b": (0.00624, 2.72e-5, 1.06e-9),
    "a100-8b": (0.00571, 8.87e-5, 3.35e-9),
    "l4-8b": (0.0271, 2.08e-4, 8.78e-9),
    "h100x4-70b": (0.00785, 6.66e-5, 1.32e-9),
}


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_builtin_profiles_are_derived_and_keep_their_names(name: str) -> None:
    profile = load_profile(name)
    assert profile is builtin_profile(name)  # derived once, on first use
    assert (profile.a, profile.b, profile.c) == pytest.approx(REFERENCE[name], rel=0.01)
    assert profile.basis == "derived" and not profile.assumed
    spec = BUILTIN_PROFILES[name]
    assert profile.provenance == (
        f"derived from meta-llama/{spec.model}, "
        + (spec.gpu if spec.tp == 1 else f"{spec.tp}x {spec.gpu} (TP{spec.tp})")
        + ", efficiency 0.5"
    )
    assert (profile.gpus, profile.gpu_hour_price) == (spec.tp, spec.gpu_hour_price)


def test_the_default_is_h100_8b_and_every_builtin_resolves() -> None:
    assert load_profile(None).name == "h100-8b"
    assert set(BUILTIN_PROFILES) >= {"h100-8b", "h200-8b", "a100-8b", "l4-8b", "h100x4-70b"}
    for name in BUILTIN_PROFILES:
        assert load_profile(name).name == name
    with pytest.raises(UsageError, match="unknown prefill profile") as err:
        load_profile("no-such-profile")
    assert "h200-8b" in (err.value.hint or "")


def test_basis_and_provenance_of_each_kind() -> None:
    measured = PrefillProfile("ep", 0.01, 1e-4, 0.0, source="measured 2026-01-01 by calibrate (http://x:8000)")
    assert (measured.basis, measured.provenance) == ("measured", "measured 2026-01-01 by calibrate (http://x:8000)")
    typed = PrefillProfile("t", 0.01, 1e-4, 0.0, source="assumption: a guess")
    assert typed.assumed and typed.basis == "assumption"
    free = PrefillProfile("f", 0.01, 1e-4, 0.0, source="my bench")
    assert (free.basis, free.provenance) == ("measured", "measured (my bench)")
    # the JSON a record keeps reads back with the same provenance (the report's next steps use it)
    back = profile_from_mapping(profile_json(load_profile(None)), "record")
    assert (back.basis, back.provenance) == ("derived", load_profile(None).provenance)
    assert profile_json(load_profile(None))["basis"] == "derived"


def test_model_profile_from_flags(tmp_path: Path) -> None:
    assert model_profile().profile is None  # nothing to derive from: the default
    qwen = model_profile(model="Qwen3-32B", gpu="H200", tp=2).profile
    assert qwen is not None and qwen.provenance == "derived from Qwen/Qwen3-32B, 2x H200 (TP2), efficiency 0.5"
    assert qwen.gpus == 2 and qwen.gpu_hour_price is None  # no built-in profile prices an H200
    gpu_only = model_profile(gpu="L4").profile
    assert gpu_only is not None and (gpu_only.a, gpu_only.b, gpu_only.c) == pytest.approx(
        (load_profile("l4-8b").a, load_profile("l4-8b").b, load_profile("l4-8b").c)
    )
    slower = model_profile(gpu="L4", efficiency=0.25).profile
    assert slower is not None and slower.seconds(8192) > 1.8 * gpu_only.seconds(8192)
    # a config file gives the shape (the same file that gives the KV bytes)
    config = tmp_path / "config.json"
    config.write_text(
        json.dumps(
            {
                "model_type": "llama",
                "hidden_size": 4096,
                "intermediate_size": 14336,
                "num_hidden_layers": 32,
                "num_attention_heads": 32,
                "num_key_value_heads": 8,
                "vocab_size": 128256,
                "torch_dtype": "bfloat16",
            }
        )
    )
    from_file = model_profile(model_config=config).profile
    assert from_file is not None and from_file.seconds(4096) == pytest.approx(load_profile("h100-8b").seconds(4096))
    # a 70B model on one H100 does not fit: said in a note
    assert any("do not fit" in n for n in model_profile(model="Llama-3.1-70B-Instruct").notes)


def test_unknown_shapes_fall_back_with_a_note_unless_a_gpu_was_asked_for() -> None:
    choice = model_profile(model="DeepSeek-V3")  # MLA, and no built-in roofline shape
    assert choice.profile is None and "h100-8b" in choice.notes[0]
    with pytest.raises(UsageError, match="cannot derive a prefill profile for DeepSeek-V3"):
        model_profile(model="DeepSeek-V3", gpu="H100")
    with pytest.raises(UsageError, match="no GPU figures"):
        model_profile(model="Qwen3-8B", gpu="TPU-v9")


def test_build_config_chooses_the_profile() -> None:
    assert build_config().savings.profile == load_profile(None)
    derived = build_config(model="Qwen3-8B", gpu="H100").savings.profile
    assert derived is not None and derived.name == "Qwen3-8B@H100-SXM"
    # --model alone derives too (it gives the KV bytes as well); an unknown shape notes the default
    assert build_config(model="Qwen3-8B").savings.profile == derived
    fallback = build_config(model="DeepSeek-V3")
    assert fallback.savings.profile == load_profile(None) and any("no roofline shape" in n for n in fallback.notes)
    # a measured (or built-in) profile is used as it is; with derivation flags both at once is an error
    measured = PrefillProfile("ep", 0.01, 1e-4, 0.0, source="measured by calibrate")
    assert build_config(model="Qwen3-8B", profile=measured).savings.profile is measured
    with pytest.raises(UsageError, match="--profile and --gpu"):
        build_config(profile=measured, gpu="H100")
    with pytest.raises(UsageError, match="hosted"):
        build_config(provider="openai", model="gpt-4.1", gpu="H100")
    assert build_config(provider="openai", model="gpt-4.1").savings.profile == load_profile(None)
