"""``calibrate``: measure TTFT over prompt lengths and cached fractions and fit the prefill model

    ttft_s = a_s + b_s_per_token * new + c_s_per_token2 * new * (cached + new / 2)

by ordinary least squares (``new`` = prompt tokens computed, ``cached`` = tokens reused; the last
term is attention over the context each new token sees). The profile is a YAML file (format in
docs/warm.md) that ``--profile`` options read.

Each sample uses fresh random token ids (from the server's own tokenization of a text, so they
are valid ids), warms the cached part first, then times the full prompt (streamed, max_tokens 1)
and takes ``cached`` from the server's report when it gives one.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prefixplan.engines.base import EngineAdapter
from prefixplan.errors import UsageError
from prefixplan.savings.prefill import FORMULA, PROFILE_KIND, PrefillProfile

DEFAULT_LENGTHS = (256, 512, 1024, 2048)
DEFAULT_FRACTIONS = (0.0, 0.5, 0.9)


@dataclass(frozen=True, slots=True)
class TimingSample:
    """One measured request."""

    new: int
    cached: int
    ttft_s: float


@dataclass(frozen=True, slots=True)
class Fit:
    """Non-negative least-squares coefficients, their standard errors and the fit quality.

    ``clamped`` names the coefficients the fit held at 0 (a negative cost is not a model);
    ``separable`` is False when the samples cannot tell the linear and attention terms apart
    (their columns are nearly collinear over the measured range): then only the total prefill
    cost is measured, not its split, and ``notes`` says so.
    """

    a_s: float
    b_s_per_token: float
    c_s_per_token2: float
    stderr: tuple[float, float, float]
    rmse_s: float
    r2: float
    max_abs_residual_s: float
    n_samples: int
    clamped: tuple[str, ...] = ()
    separable: bool = True

    @property
    def attention_measurable(self) -> bool:
        """True when the attention term is positive and more than twice its standard error."""
        return self.separable and self.c_s_per_token2 > 0 and self.c_s_per_token2 > 2 * self.stderr[2]

    @property
    def notes(self) -> list[str]:
        out = []
        if self.clamped:
            out.append(f"held at 0 (a negative cost is not a model): {', '.join(self.clamped)}")
        if not self.separable:
            out.append(
                "the samples cannot separate the per-token and attention terms over this range; "
                "their sum predicts TTFT, their split does not"
            )
        elif not self.attention_measurable:
            out.append(
                "attention term c not measurable on this server/range (c <= 2 stderr); keep it as an upper bound"
            )
        return out


@dataclass(frozen=True, slots=True)
class Profile:
    """A calibrated prefill profile for one endpoint."""

    fit: Fit
    endpoint: str | None = None
    engine: str | None = None
    model: str | None = None
    block_size: int | None = None
    created: str | None = None
    samples: tuple[TimingSample, ...] = field(default=(), repr=False)

    def prefill_profile(self, name: str | None = None) -> PrefillProfile:
        """The fitted coefficients as the profile every command uses (``simulate``, ``warm``)."""
        f = self.fit
        return PrefillProfile(
            name=name or self.model or "calibrated",
            a=f.a_s,
            b=f.b_s_per_token,
            c=f.c_s_per_token2,
            model=self.model or "",
            source=f"measured {self.created or ''} by calibrate ({self.endpoint})",
        )

    def to_dict(self) -> dict[str, Any]:
        f = self.fit
        notes = []
        if not f.attention_measurable:
            notes.append(
                "attention term c not measurable on this server/range (c <= 2 stderr); keep it as an upper bound"
            )
        return {
            "kind": PROFILE_KIND,
            "version": 1,
            "formula": FORMULA,
            "a_s": f.a_s,
            "b_s_per_token": f.b_s_per_token,
            "c_s_per_token2": f.c_s_per_token2,
            "stderr": {"a_s": f.stderr[0], "b_s_per_token": f.stderr[1], "c_s_per_token2": f.stderr[2]},
            "fit": {
                "n_samples": f.n_samples,
                "rmse_s": f.rmse_s,
                "r2": f.r2,
                "max_abs_residual_s": f.max_abs_residual_s,
                "attention_measurable": f.attention_measurable,
            },
            "endpoint": self.endpoint,
            "engine": self.engine,
            "model": self.model,
            "block_size": self.block_size,
            "created": self.created,
            "notes": notes,
            "samples": [[s.new, s.cached, round(s.ttft_s, 6)] for s in self.samples],
        }


_TERMS = ("a_s", "b_s_per_token", "c_s_per_token2")
SEPARABILITY_CORR = 0.995  # |correlation| of the linear and attention columns above which their split is unknown


def fit_prefill(samples: Sequence[TimingSample]) -> Fit:
    """Fit ``a + b*new + c*new*(cached + new/2)`` to ``samples`` by non-negative least squares.

    Every subset of the three terms is solved by ordinary least squares and the best solution
    whose coefficients are all >= 0 wins (exact NNLS for three unknowns).

    Raises:
        UsageError: fewer than 3 samples, or samples that cannot separate the three terms at all.
    """
    import itertools

    import numpy as np

    if len(samples) < 3:
        raise UsageError(f"need at least 3 timing samples to fit 3 coefficients, got {len(samples)}")
    new = np.array([s.new for s in samples], dtype=float)
    cached = np.array([s.cached for s in samples], dtype=float)
    y = np.array([s.ttft_s for s in samples], dtype=float)
    x = np.column_stack([np.ones_like(new), new, new * (cached + new / 2)])
    scale = np.maximum(np.abs(x).max(axis=0), 1e-12)  # conditioning; unscaled at the end
    xs = x / scale
    if np.linalg.matrix_rank(xs) < 3:
        raise UsageError(
            "timing samples do not separate the constant, linear and attention terms",
            hint="measure several prompt lengths and cached fractions",
        )
    best: tuple[float, np.ndarray] | None = None
    for k in (3, 2, 1):
        for cols in itertools.combinations(range(3), k):
            sub = xs[:, cols]
            sol, *_ = np.linalg.lstsq(sub, y, rcond=None)
            if (sol < 0).any():
                continue
            full = np.zeros(3)
            full[list(cols)] = sol
            sse = float(((y - xs @ full) ** 2).sum())
            if best is None or sse < best[0] - 1e-18:
                best = (sse, full)
    assert best is not None  # the constant alone is always feasible (y >= 0)
    coef = best[1] / scale
    resid = y - x @ coef
    n = len(y)
    dof = max(n - 3, 1)
    sigma2 = float(resid @ resid) / dof
    cov = sigma2 * np.linalg.inv(xs.T @ xs)
    stderr = np.sqrt(np.maximum(np.diag(cov), 0.0)) / scale
    ss_tot = float(((y - y.mean()) ** 2).sum())
    r2 = 1.0 - float(resid @ resid) / ss_tot if ss_tot > 0 else 1.0
    corr = np.corrcoef(x[:, 1], x[:, 2])[0, 1] if np.std(x[:, 1]) > 0 and np.std(x[:, 2]) > 0 else 1.0
    return Fit(
        a_s=float(coef[0]),
        b_s_per_token=float(coef[1]),
        c_s_per_token2=float(coef[2]),
        stderr=(float(stderr[0]), float(stderr[1]), float(stderr[2])),
        rmse_s=math.sqrt(float(resid @ resid) / n),
        r2=r2,
        max_abs_residual_s=float(np.abs(resid).max()),
        n_samples=n,
        clamped=tuple(
            name for name, value, free in zip(_TERMS, best[1], (True, True, True), strict=True) if value == 0.0 and free
        ),
        separable=bool(abs(corr) < SEPARABILITY_CORR),
    )


_POOL_TEXT = (
    "Calibration text for prefixplan: the quick brown fox jumps over the lazy dog while seven "
    "wizards quietly judge boxing matches; numbers 0 1 2 3 4 5 6 7 8 9, symbols {}[]()<>=+-*/, "
    "and words like engine, cache, prefix, token, block, latency, throughput, replica, memory."
)


def _id_pool(adapter: EngineAdapter) -> list[int]:
    ids = adapter.tokenize_text(_POOL_TEXT) or []
    pool = sorted(set(ids))
    return pool if len(pool) >= 20 else list(range(1000, 5000))


def measure(
    adapter: EngineAdapter,
    *,
    lengths: Sequence[int] = DEFAULT_LENGTHS,
    fractions: Sequence[float] = DEFAULT_FRACTIONS,
    repeats: int = 2,
    seed: int | None = None,
) -> list[TimingSample]:
    """Time streamed requests over ``lengths`` x ``fractions`` (x ``repeats``), fresh ids each.

    ``seed`` None draws new ids on every run: a second calibration of the same server must not
    hit what the first one left in its cache (its "cold" samples would be warm)."""
    info = adapter.server_info()
    block = info.block_size or 1
    limit = (info.max_model_len or 10**9) - 8
    if seed is None:
        import secrets

        seed = secrets.randbits(64)
    rng = random.Random(seed)
    pool = _id_pool(adapter)
    out: list[TimingSample] = []
    for rep in range(repeats):
        for n in lengths:
            if n > limit:
                continue
            for f in fractions:
                ids = [rng.choice(pool) for _ in range(n)]
                ids[0] = pool[(seed + rep * 7919 + n * 31 + int(f * 100)) % len(pool)]
                target = (int(n * f) // block) * block
                if target > 0:
                    adapter.complete_ids(ids[:target] + [ids[target - 1]], max_tokens=1, stream=True)
                res = adapter.complete_ids(ids, max_tokens=1, stream=True)
                cached = res.cached_tokens if res.cached_tokens is not None else target
                out.append(TimingSample(new=n - cached, cached=cached, ttft_s=res.ttft_s))
    return out


def calibrate(
    adapter: EngineAdapter,
    *,
    lengths: Sequence[int] = DEFAULT_LENGTHS,
    fractions: Sequence[float] = DEFAULT_FRACTIONS,
    repeats: int = 2,
    seed: int | None = None,
) -> Profile:
    """Measure and fit; returns the profile (not yet saved)."""
    from prefixplan.store import iso

    info = adapter.server_info()
    samples = measure(adapter, lengths=lengths, fractions=fractions, repeats=repeats, seed=seed)
    return Profile(
        fit=fit_prefill(samples),
        endpoint=adapter.endpoint.label,
        engine=info.engine,
        model=info.model,
        block_size=info.block_size,
        created=iso(time.time()),
        samples=tuple(samples),
    )


def save_profile(profile: Profile, path: str | Path) -> Path:
    """Write the profile YAML (see docs/warm.md)."""
    import yaml

    from prefixplan.core.fileio import atomic_write_text

    out = Path(path)
    text = "# prefixplan prefill-time profile (prefixplan calibrate)\n" + yaml.safe_dump(
        profile.to_dict(), sort_keys=False, default_flow_style=None
    )
    atomic_write_text(out, text)
    return out


def default_profile_name(profile: Profile) -> str:
    """``<model>@<host>-<port>`` (slugged) -- the store name when ``calibrate`` gets no ``--name``."""
    import re
    from urllib.parse import urlsplit

    endpoint = profile.endpoint or "endpoint"
    parts = urlsplit(endpoint) if "://" in endpoint else None
    where = (
        f"{parts.hostname}-{parts.port}"
        if parts is not None and parts.port
        else (parts.hostname if parts is not None and parts.hostname else endpoint)
    )
    slug = re.sub(r"[^A-Za-z0-9_.@-]+", "-", f"{profile.model or 'model'}@{where}").strip("-")
    return slug or "profile"


def store_profile(profile: Profile, name: str | None = None, db: str | None = None) -> str:
    """Save ``profile`` in the store's ``profiles`` table under ``name`` (replacing one of that
    name); returns the name, which ``--profile NAME`` then finds."""
    from prefixplan.store import open_store

    name = name or default_profile_name(profile)
    f = profile.fit
    with open_store(db) as store:
        store.save_profile(
            name,
            a_s=f.a_s,
            b_s_per_token=f.b_s_per_token,
            c_s_per_token2=f.c_s_per_token2,
            endpoint=profile.endpoint,
            model=profile.model,
            rmse_s=f.rmse_s,
            r2=f.r2,
            samples=[[s.new, s.cached, round(s.ttft_s, 6)] for s in profile.samples],
            created=profile.created,
        )
    return name


def calibrate_endpoint(
    url: str,
    *,
    engine: str = "auto",
    api_key_env: str | None = None,
    model: str | None = None,
    lengths: Sequence[int] = DEFAULT_LENGTHS,
    fractions: Sequence[float] = DEFAULT_FRACTIONS,
    repeats: int = 2,
    timeout: float = 60.0,
    out: str | Path | None = None,
    seed: int | None = None,
    name: str | None = None,
    store: bool = False,
    db: str | None = None,
    clock: Any = None,
) -> tuple[Profile, Path | None]:
    """Connect, measure, fit, and save the YAML profile (when ``out``) and the store's profile
    ``name`` (when ``store``; default name :func:`default_profile_name`)."""
    from prefixplan.engines.detect import connect
    from prefixplan.engines.endpoint import Endpoint

    if not lengths or any(n < 2 for n in lengths):
        raise UsageError("--lengths must be integers >= 2")
    if any(not 0 <= f < 1 for f in fractions):
        raise UsageError("--fractions must be in [0, 1)")
    adapter = connect(
        Endpoint(url=url, api_key_env=api_key_env), engine=engine, timeout=timeout, model=model, clock=clock
    )
    try:
        profile = calibrate(adapter, lengths=lengths, fractions=fractions, repeats=repeats, seed=seed)
    finally:
        adapter.close()
    path = save_profile(profile, out) if out else None
    if store:
        store_profile(profile, name, db)
    return profile, path
