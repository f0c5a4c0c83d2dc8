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

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from prefixplan.core import yamlsafe
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

    def seconds(self, new: Any, cached: Any = 0) -> Any:
        """Prefill seconds for arrays (or scalars) of new and cached tokens."""
        new = np.asarray(new, dtype=np.float64)
        cached = np.asarray(cached, dtype=np.float64)
        t = self.a + self.b * new + self.c * new * (cached + new / 2.0)
        return t if t.ndim else float(t)


BUILTIN_PROFILES: dict[str, PrefillProfile] = {
    p.name: p
    for p in (
        PrefillProfile(
            "h100-8b",
            a=0.015,
            b=6.0e-5,
            c=1.5e-9,
            gpu="H100-80GB",
            model="8B dense (bf16)",
            gpu_hour_price=2.5,
            source="assumption: rough public prefill throughput, not measured",
        ),
        PrefillProfile(
            "a100-8b",
            a=0.02,
            b=1.2e-4,
            c=3.0e-9,
            gpu="A100-80GB",
            model="8B dense (bf16)",
            gpu_hour_price=1.6,
            source="assumption: rough public prefill throughput, not measured",
        ),
        PrefillProfile(
            "l4-8b",
            a=0.03,
            b=5.0e-4,
            c=1.2e-8,
            gpu="L4-24GB",
            model="8B dense (bf16)",
            gpu_hour_price=0.8,
            source="assumption: rough public prefill throughput, not measured",
        ),
        PrefillProfile(
            "h100x4-70b",
            a=0.03,
            b=1.5e-4,
            c=2.5e-9,
            gpus=4,
            gpu="4x H100-80GB (TP4)",
            model="70B dense (bf16)",
            gpu_hour_price=2.5,
            source="assumption: rough public prefill throughput, not measured",
        ),
    )
}
DEFAULT_PROFILE = "h100-8b"
PROFILE_KIND = "prefixplan/prefill-profile"
FORMULA = "ttft_s = a_s + b_s_per_token*new + c_s_per_token2*new*(cached + new/2)"
_PROFILE_HINT = "a profile YAML needs a_s and b_s_per_token (seconds, seconds per token); optional c_s_per_token2, gpus"


def builtin_profile(name: str) -> PrefillProfile | None:
    """The built-in (assumed) profile of that name, or None."""
    return BUILTIN_PROFILES.get(name)


def profile_from_mapping(data: Mapping[str, Any], where: str) -> PrefillProfile:
    """A profile from its YAML mapping (the module docstring's format; ``calibrate`` writes it).

    Raises:
        InputError: a required coefficient is missing or not a number (the message names it).
    """
    if not isinstance(data, Mapping):
        raise InputError(f"{where}: a prefill profile must be a mapping", hint=_PROFILE_HINT)
    coef = {}
    for key, alias, required in (("a_s", "a", True), ("b_s_per_token", "b", True), ("c_s_per_token2", "c", False)):
        raw = data.get(key, data.get(alias))
        if raw is None and not required:
            raw = 0.0
        try:
            value = float(raw)
        except (TypeError, ValueError):
            raise InputError(f"{where}: {key}: missing or not a number", hint=_PROFILE_HINT) from None
        if not math.isfinite(value):
            raise InputError(f"{where}: {key}: must be finite", hint=_PROFILE_HINT)
        coef[key] = value
    created = str(data.get("created") or "")
    source = data.get("source") or (f"measured {created} by calibrate" if created else "measured by calibrate")
    try:
        gpus = int(data.get("gpus") or 1)
        price = float(data["gpu_hour_price"]) if data.get("gpu_hour_price") is not None else None
    except (TypeError, ValueError):
        raise InputError(f"{where}: gpus / gpu_hour_price: not a number", hint=_PROFILE_HINT) from None
    return PrefillProfile(
        name=str(data.get("name") or Path(where).stem),
        a=coef["a_s"],
        b=coef["b_s_per_token"],
        c=coef["c_s_per_token2"],
        gpus=gpus,
        gpu=str(data.get("gpu") or ""),
        model=str(data.get("model") or ""),
        gpu_hour_price=price,
        source=str(source),
    )


def load_profile_file(path: str | Path) -> PrefillProfile:
    """Read a profile YAML file.

    Raises:
        InputError: the file is missing, unreadable, not YAML or lacks a coefficient.
    """
    import yaml

    p = Path(path)
    if not p.is_file():
        raise InputError(f"prefill profile {p}: file not found", hint=_PROFILE_HINT)
    try:
        data = yamlsafe.load(p.read_text(encoding="utf-8")) or {}
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"prefill profile {p}: cannot read ({exc})") from None
    except yaml.YAMLError as exc:
        raise InputError(f"prefill profile {p}: invalid YAML ({exc})", hint=_PROFILE_HINT) from None
    return profile_from_mapping(data, str(p))


def looks_like_path(spec: str) -> bool:
    """True when a ``--profile`` value names a file rather than a profile (has a folder or a
    .yaml/.yml/.json suffix), so a missing one is reported as a missing file."""
    return "/" in spec or "\\" in spec or Path(spec).suffix.lower() in (".yaml", ".yml", ".json")


def load_profile(
    spec: str | Path | None,
    *,
    stored: Callable[[str], PrefillProfile | None] | None = None,
) -> PrefillProfile:
    """Resolve ``--profile``: None -> the default (assumed) profile; a built-in name; a YAML file;
    else a name that ``stored`` (a lookup in the store, given by callers that may use it) knows.

    Raises:
        InputError: ``spec`` names a file that is missing or invalid.
        UsageError: ``spec`` is no built-in, no file and no stored profile.
    """
    if spec is None:
        return BUILTIN_PROFILES[DEFAULT_PROFILE]
    text = str(spec)
    builtin = builtin_profile(text)
    if builtin is not None:
        return builtin
    if Path(text).is_file() or looks_like_path(text):
        return load_profile_file(text)
    found = stored(text) if stored is not None else None
    if found is not None:
        return found
    raise UsageError(
        f"unknown prefill profile {text!r}",
        hint="use a YAML file, a name stored by prefixplan calibrate, or one of: "
        + ", ".join(sorted(BUILTIN_PROFILES)),
    )


def profile_mapping(profile: PrefillProfile) -> dict[str, Any]:
    """The YAML mapping of a profile (the format :func:`profile_from_mapping` reads)."""
    data: dict[str, Any] = {
        "kind": PROFILE_KIND,
        "version": 1,
        "formula": FORMULA,
        "a_s": profile.a,
        "b_s_per_token": profile.b,
        "c_s_per_token2": profile.c,
        "name": profile.name,
        "gpu": profile.gpu,
        "model": profile.model,
        "gpus": profile.gpus,
        "source": profile.source,
    }
    if profile.gpu_hour_price is not None:
        data["gpu_hour_price"] = profile.gpu_hour_price
    return data


def dump_profile(profile: PrefillProfile) -> str:
    """YAML text of a profile (the format :func:`load_profile` reads)."""
    import yaml

    return yaml.safe_dump(profile_mapping(profile), sort_keys=False)


def profile_json(profile: PrefillProfile) -> dict[str, Any]:
    """A profile as shown in JSON outputs (warm plans, simulations)."""
    return {
        "name": profile.name,
        "a_s": profile.a,
        "b_s_per_token": profile.b,
        "c_s_per_token2": profile.c,
        "gpus": profile.gpus,
        "source": profile.source,
        "assumed": profile.assumed,
    }


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
