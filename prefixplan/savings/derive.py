"""The prefill profile of the model being simulated, derived from its shape and a GPU.

``prefixplan simulate`` takes the model from the same ``--model`` / ``--model-config`` that gives
the KV bytes per token, the GPU from ``--gpu`` (a name of ``prefixplan/data/gpus.yaml``; default
the default profile's, :data:`DEFAULT_GPU`), tensor parallelism from ``--tensor-parallel`` and the
efficiency from ``--efficiency``, and fits a :class:`~prefixplan.savings.prefill.PrefillProfile`
to their roofline (:func:`~prefixplan.savings.prefill.derived_profile`). A profile given with
``--profile`` (measured by ``prefixplan calibrate``, or a built-in) is used instead.

A model whose shape is unknown (not built in, MLA, mixture of experts without a parameter count)
cannot be derived: without ``--gpu`` and the like the default profile is used and a note says
why; with them it is an error.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from prefixplan.errors import UsageError
from prefixplan.savings.prefill import BUILTIN_PROFILES, DEFAULT_PROFILE, PrefillProfile, derived_profile

DEFAULT_GPU = BUILTIN_PROFILES[DEFAULT_PROFILE].gpu
DEFAULT_MODEL = BUILTIN_PROFILES[DEFAULT_PROFILE].model


@dataclass(frozen=True, slots=True)
class ProfileChoice:
    """What :func:`model_profile` decided: the derived profile (None: use the default) and notes."""

    profile: PrefillProfile | None
    notes: tuple[str, ...] = ()


def gpu_hour_price(gpu: str) -> float | None:
    """The GPU-hour price (USD) a built-in profile on that GPU assumes, or None."""
    for spec in BUILTIN_PROFILES.values():
        if spec.gpu == gpu and spec.gpu_hour_price is not None:
            return spec.gpu_hour_price
    return None


def model_profile(
    *,
    model: str | None = None,
    model_config: str | Path | None = None,
    gpu: str | None = None,
    tp: int | None = None,
    efficiency: float | None = None,
    kv_dtype_bytes: int | None = None,
) -> ProfileChoice:
    """The profile derived for ``model_config`` (else the built-in shape of ``model``) on ``tp``
    GPUs named ``gpu``, or no profile (use the default) when nothing names a model or a GPU.

    Raises:
        UsageError: ``gpu``, ``tp`` or ``efficiency`` was given and the model has no roofline
            shape, or a value is invalid.
        InputError: ``model_config`` cannot be read.
    """
    from prefixplan.savings.roofline import DEFAULT_EFFICIENCY, builtin_shape, load_model_shape, roofline

    explicit = gpu is not None or tp is not None or efficiency is not None
    if model_config is None and model is None and not explicit:
        return ProfileChoice(None)
    label = str(model_config or model or DEFAULT_MODEL)
    try:
        if model_config is not None:
            shape = load_model_shape(model_config, kv_dtype_bytes=kv_dtype_bytes)
        else:
            shape = builtin_shape(model or DEFAULT_MODEL, kv_dtype_bytes=kv_dtype_bytes)
    except UsageError as exc:
        if explicit:
            raise UsageError(
                f"cannot derive a prefill profile for {label}: {exc}",
                hint="pass --model-config config.json of a dense model, or a measured --profile",
            ) from None
        return ProfileChoice(
            None,
            (f"no roofline shape for {label} ({exc}): the default prefill profile {DEFAULT_PROFILE} is used",),
        )
    roof = roofline(
        shape,
        gpu or DEFAULT_GPU,
        tp=1 if tp is None else tp,
        efficiency=DEFAULT_EFFICIENCY if efficiency is None else efficiency,
    )
    profile = derived_profile(roof, gpu_hour_price=gpu_hour_price(roof.gpu.name))
    notes: list[str] = []
    if not roof.fits():
        need = roof.weight_bytes_per_gpu() / 1e9
        notes.append(
            f"{shape.name}'s weights ({need:,.0f} GB a GPU) do not fit in {roof.gpu_label}'s "
            f"{roof.gpu.memory_gb:g} GB: raise --tensor-parallel"
        )
    return ProfileChoice(profile, tuple(notes))


def refuse_with_profile(profile: str | None, *, gpu: str | None, tp: int | None, efficiency: float | None) -> None:
    """``--profile`` and the derivation flags both choose the prefill profile: refuse both at once.

    Raises:
        UsageError: naming the flags.
    """
    named = [f for f, v in (("--gpu", gpu), ("--tensor-parallel", tp), ("--efficiency", efficiency)) if v is not None]
    if profile is not None and named:
        raise UsageError(
            f"--profile and {', '.join(named)} both choose the prefill profile",
            hint="a measured or built-in --profile is used as it is; drop it to derive one from the model and GPU",
        )
