"""Prefill-time model and GPU profiles.

A request with ``new`` tokens to compute after ``cached`` reused tokens takes::

    t(new, cached) = a + b * new + c * new * (cached + new / 2)     seconds

``a`` is fixed overhead, ``b`` the per-token (linear layers) cost and ``c`` the attention
cost: each new token attends to the cached prefix plus, on average, half of the new tokens.
TTFT with caching is ``t(n - hit, hit)`` plus any tier load time; without caching it is
``t(n, 0)``. Queueing is not modelled.

Profile YAML format (``--profile FILE``); ``prefixplan calibrate`` writes this same format
(its extra keys such as ``stderr``, ``fit`` and ``samples`` are ignored here)::

    kind: prefixplan/prefill-profile
    version: 1
    formula: "ttft_s = a_s + b_s_per_token*new + c_s_per_token2*new*(cached + new/2)"
    a_s: 0.015                  # seconds
    b_s_per_token: 6.0e-5       # seconds per new token
    c_s_per_token2: 1.5e-9      # seconds per (new token x context token)
    name: h100-llama8b          # optional label printed with every figure
    model: meta-llama/Llama-3.1-8B-Instruct   # optional
    gpu: H100-80GB              # optional, free text
    gpus: 1                     # optional, GPUs per replica: GPU-seconds = seconds x gpus
    gpu_hour_price: 2.50        # optional, USD per GPU-hour for self-hosted money
    source: assumption          # optional; calibrate profiles are "measured"

The built-in profiles below are rough assumptions for orientation only; calibrate on your
own endpoint for real numbers.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from prefixplan.errors import InputError, UsageError


@dataclass(frozen=True, slots=True)
class PrefillProfile:
    """Coefficients of the prefill-time model (see module docstring)."""

    name: str
    a: float
    b: float
    c: float
    gpus: int = 1
    gpu: str = ""
    model: str = ""
    gpu_hour_price: float | None = None
    source: str = "assumption"

    @property
    def assumed(self) -> bool:
        return self.source.startswith("assumption")

    def seconds(self, new, cached=0):
        """Prefill seconds for arrays (or scalars) of new and cached tokens."""
        new = np.asarray(new, dtype=np.float64)
        cached = np.asarray(cached, dtype=np.float64)
        t = self.a + self.b * new + self.c * new * (cached + new / 2.0)
        return t if t.ndim else float(t)


BUILTIN_PROFILES: dict[str, PrefillProfile] = {
    p.name: p
    for p in (
        PrefillProfile("h100-8b", a=0.015, b=6.0e-5, c=1.5e-9, gpu="H100-80GB", model="8B dense (bf16)",
                       gpu_hour_price=2.5, source="assumption: rough public prefill throughput, not measured"),
        PrefillProfile("a100-8b", a=0.02, b=1.2e-4, c=3.0e-9, gpu="A100-80GB", model="8B dense (bf16)",
                       gpu_hour_price=1.6, source="assumption: rough public prefill throughput, not measured"),
        PrefillProfile("l4-8b", a=0.03, b=5.0e-4, c=1.2e-8, gpu="L4-24GB", model="8B dense (bf16)",
                       gpu_hour_price=0.8, source="assumption: rough public prefill throughput, not measured"),
        PrefillProfile("h100x4-70b", a=0.03, b=1.5e-4, c=2.5e-9, gpus=4, gpu="4x H100-80GB (TP4)",
                       model="70B dense (bf16)", gpu_hour_price=2.5,
                       source="assumption: rough public prefill throughput, not measured"),
    )
}
DEFAULT_PROFILE = "h100-8b"


def load_profile(spec: str | Path | None) -> PrefillProfile:
    """A built-in profile name, a YAML file in the documented format, or a profile name stored by calibrate."""
    if spec is None:
        return BUILTIN_PROFILES[DEFAULT_PROFILE]
    if str(spec) in BUILTIN_PROFILES:
        return BUILTIN_PROFILES[str(spec)]
    path = Path(spec)
    if not path.is_file():
        from prefixplan.store import find_profile  # a profile `prefixplan calibrate` stored by name

        stored = find_profile(str(spec))
        if stored is not None:
            return PrefillProfile(name=str(spec), a=float(stored["a_s"]), b=float(stored["b_s_per_token"]),
                                  c=float(stored["c_s_per_token2"]), model=str(stored.get("model") or ""),
                                  source=f"measured {stored.get('created') or ''} by calibrate ({stored.get('endpoint')})")
        raise UsageError(f"unknown prefill profile {spec!r}",
                         hint="use a YAML file, a name stored by calibrate, or one of: " + ", ".join(sorted(BUILTIN_PROFILES)))
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        source = data.get("source") or ("measured " + str(data.get("created") or "") + " by calibrate").replace("  ", " ")
        return PrefillProfile(
            name=str(data.get("name") or path.stem),
            a=float(data["a_s"] if "a_s" in data else data["a"]),
            b=float(data["b_s_per_token"] if "b_s_per_token" in data else data["b"]),
            c=float(data.get("c_s_per_token2", data.get("c", 0.0)) or 0.0),
            gpus=int(data.get("gpus") or 1),
            gpu=str(data.get("gpu") or ""),
            model=str(data.get("model") or ""),
            gpu_hour_price=float(data["gpu_hour_price"]) if data.get("gpu_hour_price") is not None else None,
            source=str(source),
        )
    except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError) as exc:
        raise InputError(f"{path}: invalid prefill profile ({exc!r})",
                         hint="required keys: a_s, b_s_per_token; optional c_s_per_token2, gpus") from None


def dump_profile(profile: PrefillProfile) -> str:
    """YAML text of a profile (the format :func:`load_profile` reads)."""
    import yaml

    data = {"kind": "prefixplan/prefill-profile", "version": 1,
            "formula": "ttft_s = a_s + b_s_per_token*new + c_s_per_token2*new*(cached + new/2)",
            "a_s": profile.a, "b_s_per_token": profile.b, "c_s_per_token2": profile.c, "name": profile.name,
            "gpu": profile.gpu, "model": profile.model, "gpus": profile.gpus, "source": profile.source}
    if profile.gpu_hour_price is not None:
        data["gpu_hour_price"] = profile.gpu_hour_price
    return yaml.safe_dump(data, sort_keys=False)


@dataclass(frozen=True, slots=True)
class TimeSavings:
    """Prefill time with and without prefix caching (queueing not modelled)."""

    profile: str
    assumed: bool
    gpu_seconds_without: float
    gpu_seconds_with: float
    ttft_p50_without: float
    ttft_p95_without: float
    ttft_p50_with: float
    ttft_p95_with: float

    @property
    def gpu_seconds_saved(self) -> float:
        return self.gpu_seconds_without - self.gpu_seconds_with


def time_savings(
    prompt_tokens: np.ndarray,
    cached_tokens: np.ndarray,
    profile: PrefillProfile,
    load_seconds: np.ndarray | None = None,
) -> TimeSavings:
    """GPU-seconds and TTFT percentiles with vs without caching."""
    n = np.asarray(prompt_tokens, dtype=np.float64)
    hit = np.asarray(cached_tokens, dtype=np.float64)
    if n.size == 0:
        return TimeSavings(profile.name, profile.assumed, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    without = profile.seconds(n, 0.0)
    compute = profile.seconds(n - hit, hit)
    ttft = compute + (load_seconds if load_seconds is not None else 0.0)
    return TimeSavings(
        profile=profile.name,
        assumed=profile.assumed,
        gpu_seconds_without=float(without.sum()) * profile.gpus,
        gpu_seconds_with=float(compute.sum()) * profile.gpus,
        ttft_p50_without=float(np.percentile(without, 50)),
        ttft_p95_without=float(np.percentile(without, 95)),
        ttft_p50_with=float(np.percentile(ttft, 50)),
        ttft_p95_with=float(np.percentile(ttft, 95)),
    )
