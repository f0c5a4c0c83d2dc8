"""Prefill-time model and GPU profiles.

A request with ``new`` tokens to compute after ``cached`` reused tokens takes::

    t(new, cached) = a + b * new + c * new * (cached + new / 2)     seconds

``a`` is fixed overhead, ``b`` the per-token (linear layers) cost and ``c`` the attention
cost: each new token attends to the cached prefix plus, on average, half of the new tokens.
TTFT with caching is ``t(n - hit, hit)`` plus any tier load time; without caching it is
``t(n, 0)``. Queueing is not modelled here (:mod:`prefixplan.simulation.load` replays the log
through a queue per replica with the same coefficients).

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
    gpu: H100-80GB              # optional, free text (a GPU table name or alias for derived ones)
    gpus: 1                     # optional, GPUs per replica: GPU-seconds = seconds x gpus
    gpu_hour_price: 2.50        # optional, USD per GPU-hour for self-hosted money
    source: measured by calibrate   # optional; the default. "derived from ..." or "assumption ..."

Every profile says where its figures come from (:attr:`PrefillProfile.basis`): ``measured``
(``prefixplan calibrate`` on a live endpoint; a YAML file without ``source`` counts as one),
``derived`` (the roofline of a model on a GPU, :mod:`prefixplan.savings.roofline`: the built-in
profiles, and ``simulate --model/--model-config --gpu``) or ``assumption`` (a figure someone typed).
A measured profile wins over a derived one wherever one is given (``--profile``).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from prefixplan.core import yamlsafe
from prefixplan.errors import InputError, UsageError

if TYPE_CHECKING:
    from prefixplan.savings.roofline import Roofline


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
        return self.basis == "assumption"

    @property
    def basis(self) -> str:
        """``derived`` (from a roofline), ``assumption`` or ``measured``, read from :attr:`source`."""
        for kind in ("derived", "assumption"):
            if self.source.startswith(kind):
                return kind
        return "measured"

    @property
    def provenance(self) -> str:
        """What the figures are printed with: ``derived from <model>, <GPU>, efficiency E``, or
        ``measured ...`` / ``assumption ...`` (the source up to its first ``;``)."""
        head = self.source.split(";", 1)[0].strip()
        if self.basis == "measured" and not head.startswith("measured"):
            return f"measured ({head})"
        return head

    def seconds(self, new: Any, cached: Any = 0) -> Any:
        """Prefill seconds for arrays (or scalars) of new and cached tokens."""
        new = np.asarray(new, dtype=np.float64)
        cached = np.asarray(cached, dtype=np.float64)
        t = self.a + self.b * new + self.c * new * (cached + new / 2.0)
        return t if t.ndim else float(t)


@dataclass(frozen=True, slots=True)
class BuiltinProfile:
    """What a built-in profile is derived from: a model shape of :mod:`prefixplan.savings.roofline`
    on ``tp`` GPUs of the GPU table, and a GPU-hour price (USD, an assumption for the money figures)."""

    model: str
    gpu: str
    tp: int = 1
    gpu_hour_price: float | None = None


BUILTIN_PROFILES: dict[str, BuiltinProfile] = {
    "h100-8b": BuiltinProfile("Llama-3.1-8B-Instruct", "H100-SXM", gpu_hour_price=2.5),
    "h200-8b": BuiltinProfile("Llama-3.1-8B-Instruct", "H200"),
    "a100-8b": BuiltinProfile("Llama-3.1-8B-Instruct", "A100-SXM-80GB", gpu_hour_price=1.6),
    "l4-8b": BuiltinProfile("Llama-3.1-8B-Instruct", "L4", gpu_hour_price=0.8),
    "h100x4-70b": BuiltinProfile("Llama-3.1-70B-Instruct", "H100-SXM", tp=4, gpu_hour_price=2.5),
}
"""The built-in profiles by name, each derived (on first use) from the roofline of its model and GPU
at the default efficiency and overhead (:func:`builtin_profile`)."""
DEFAULT_PROFILE = "h100-8b"
PROFILE_KIND = "prefixplan/prefill-profile"
FORMULA = "ttft_s = a_s + b_s_per_token*new + c_s_per_token2*new*(cached + new/2)"
_PROFILE_HINT = "a profile YAML needs a_s and b_s_per_token (seconds, seconds per token); optional c_s_per_token2, gpus"


def builtin_profile(name: str) -> PrefillProfile | None:
    """The built-in profile of that name (derived from its model and GPU), or None."""
    return _derived_builtin(name) if name in BUILTIN_PROFILES else None


@functools.cache
def _derived_builtin(name: str) -> PrefillProfile:
    from prefixplan.savings.roofline import roofline

    spec = BUILTIN_PROFILES[name]
    return derived_profile(roofline(spec.model, spec.gpu, tp=spec.tp), name=name, gpu_hour_price=spec.gpu_hour_price)


def derived_profile(
    roof: Roofline,
    *,
    name: str | None = None,
    grid: tuple[np.ndarray, np.ndarray] | None = None,
    gpu_hour_price: float | None = None,
) -> PrefillProfile:
    """A profile fitted to the roofline ``roof`` over ``grid``
    (:func:`prefixplan.savings.roofline.default_grid`), its ``source`` beginning with the roofline's
    provenance (``derived from <model>, <GPU>, efficiency E``).

    Where the compute roof sets the time the roofline has exactly the profile's form, so the fit
    is close there; the memory roof (few new tokens, or slow memory) it can only approximate. Over
    the default grid the profile stays within about 25% of the roofline on the HBM GPUs (within 10%
    from 256 new tokens on), and within about 30% on the GDDR ones (L4, L40S), whose memory roof
    reaches to more new tokens; :func:`fit_error` says how far for a given roofline.
    """
    from prefixplan.savings.roofline import default_grid, fit_coefficients

    new, cached = grid if grid is not None else default_grid()
    a, b, c = fit_coefficients(roof, np.asarray(new, dtype=np.float64), np.asarray(cached, dtype=np.float64))
    return PrefillProfile(
        name=name or roof.name,
        a=a,
        b=b,
        c=c,
        gpus=roof.tp,
        gpu=roof.gpu.name,
        model=roof.model.name,
        gpu_hour_price=gpu_hour_price,
        source=roof.source + "; a, b, c least-squares fitted to the roofline",
    )


def fit_error(profile: PrefillProfile, roof: Roofline, grid: tuple[np.ndarray, np.ndarray] | None = None) -> float:
    """The largest ``|profile / roofline - 1|`` over ``grid``: how far the fitted profile strays."""
    from prefixplan.savings.roofline import default_grid

    new, cached = grid if grid is not None else default_grid()
    ratio = np.asarray(profile.seconds(new, cached)) / np.asarray(roof.seconds(new, cached))
    return float(np.max(np.abs(ratio - 1.0)))


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
        return _derived_builtin(DEFAULT_PROFILE)
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
        "basis": profile.basis,
        "provenance": profile.provenance,
        "assumed": profile.assumed,
    }


PERCENTILES = (50, 95, 99)
"""The TTFT percentiles every figure reports."""


@dataclass(frozen=True, slots=True)
class TimeSavings:
    """Prefill time with and without prefix caching (queueing not modelled): GPU-seconds over the
    log, and TTFT percentiles (:data:`PERCENTILES`) per request."""

    profile: str
    assumed: bool
    gpu_seconds_without: float
    gpu_seconds_with: float
    ttft_without: tuple[float, float, float]
    ttft_with: tuple[float, float, float]
    provenance: str = ""

    @property
    def gpu_seconds_saved(self) -> float:
        return self.gpu_seconds_without - self.gpu_seconds_with

    @property
    def ttft_p50_without(self) -> float:
        return self.ttft_without[0]

    @property
    def ttft_p95_without(self) -> float:
        return self.ttft_without[1]

    @property
    def ttft_p50_with(self) -> float:
        return self.ttft_with[0]

    @property
    def ttft_p95_with(self) -> float:
        return self.ttft_with[1]


def percentiles(seconds: np.ndarray) -> tuple[float, float, float]:
    """p50, p95, p99 of ``seconds`` (numpy's linear interpolation); zeros when empty."""
    if not np.asarray(seconds).size:
        return (0.0, 0.0, 0.0)
    p50, p95, p99 = (float(x) for x in np.percentile(seconds, PERCENTILES))
    return p50, p95, p99


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
        zero = (0.0, 0.0, 0.0)
        return TimeSavings(profile.name, profile.assumed, 0.0, 0.0, zero, zero, profile.provenance)
    without = profile.seconds(n, 0.0)
    compute = profile.seconds(n - hit, hit)
    ttft = compute + (load_seconds if load_seconds is not None else 0.0)
    return TimeSavings(
        profile=profile.name,
        assumed=profile.assumed,
        gpu_seconds_without=float(without.sum()) * profile.gpus,
        gpu_seconds_with=float(compute.sum()) * profile.gpus,
        ttft_without=percentiles(without),
        ttft_with=percentiles(ttft),
        provenance=profile.provenance,
    )
