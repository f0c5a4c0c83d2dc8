"""GPU peak figures for the roofline prefill model.

The table ships as ``prefixplan/data/gpus.yaml``: per GPU the dense (no 2:4 sparsity) bf16 and
fp8 Tensor Core peaks in TFLOP/s, the memory bandwidth in TB/s, the memory size in GB and a
``source`` naming the vendor datasheet each figure comes from. It is read on first use and kept
(nothing is read at import time). Names match case-insensitively, by name or alias::

    lookup_gpu("h100")          # -> GPU("H100-SXM", ...)
    lookup_gpu("A100-80GB")     # -> GPU("A100-SXM-80GB", ...)

A GPU that is not in the table can be described directly with :class:`GPU`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

from prefixplan.core import yamlsafe
from prefixplan.errors import InputError, UsageError

TERA = 1e12
PRECISIONS = ("bf16", "fp8")
_TABLE = "data/gpus.yaml"


@dataclass(frozen=True, slots=True)
class GPU:
    """Peak figures of one GPU (dense Tensor Core FLOP/s, memory bandwidth) and where they come from."""

    name: str
    bf16_tflops: float
    bandwidth_tbs: float
    fp8_tflops: float | None = None
    memory_gb: float = 0.0
    vendor: str = ""
    memory_type: str = ""
    source: str = "user-supplied"
    note: str = ""
    aliases: tuple[str, ...] = ()

    @property
    def citation(self) -> str:
        """The source without its URL, short enough to print with every figure."""
        return self.source.split(" http", 1)[0].rstrip(" ,;")

    @property
    def bandwidth(self) -> float:
        """Peak memory bandwidth in bytes per second."""
        return self.bandwidth_tbs * TERA

    def peak_flops(self, precision: str = "bf16") -> float:
        """Dense peak FLOP/s for ``precision`` (``bf16`` or ``fp8``).

        Raises:
            UsageError: an unknown precision, or fp8 on a GPU without fp8 Tensor Cores.
        """
        if precision == "bf16":
            return self.bf16_tflops * TERA
        if precision == "fp8":
            if self.fp8_tflops is None:
                raise UsageError(f"{self.name} has no fp8 Tensor Cores", hint="use precision bf16")
            return self.fp8_tflops * TERA
        raise UsageError(f"unknown precision {precision!r}", hint="one of: " + ", ".join(PRECISIONS))


def _number(entry: Mapping[str, Any], key: str, where: str) -> float | None:
    """The positive number under ``key``, or None when the key is absent or null."""
    raw = entry.get(key)
    if raw is None:
        return None
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise InputError(f"{where}: {key}: not a number") from None
    if not math.isfinite(value) or value <= 0:
        raise InputError(f"{where}: {key}: must be a positive number")
    return value


def _required(entry: Mapping[str, Any], key: str, where: str) -> float:
    value = _number(entry, key, where)
    if value is None:
        raise InputError(f"{where}: {key}: missing")
    return value


def gpu_from_mapping(name: str, entry: Mapping[str, Any], where: str = _TABLE) -> GPU:
    """One GPU from its table entry (the layout of ``prefixplan/data/gpus.yaml``).

    Raises:
        InputError: a figure is missing, not a positive number, or the entry names no source.
    """
    at = f"{where}: {name}"
    if not isinstance(entry, Mapping):
        raise InputError(f"{at}: a GPU entry must be a mapping")
    source = str(entry.get("source") or "").strip()
    if not source:
        raise InputError(f"{at}: source: every GPU entry must say where its figures come from")
    return GPU(
        name=name,
        bf16_tflops=_required(entry, "bf16_tflops", at),
        bandwidth_tbs=_required(entry, "bandwidth_tbs", at),
        fp8_tflops=_number(entry, "fp8_tflops", at),
        memory_gb=_number(entry, "memory_gb", at) or 0.0,
        vendor=str(entry.get("vendor") or ""),
        memory_type=str(entry.get("memory_type") or ""),
        source=source,
        note=str(entry.get("note") or ""),
        aliases=tuple(str(a) for a in entry.get("aliases") or ()),
    )


def gpus_from_mapping(data: Mapping[str, Any], where: str = _TABLE) -> dict[str, GPU]:
    """All GPUs of a table mapping (``gpus:`` of the shipped file), by name.

    Raises:
        InputError: the mapping has no ``gpus`` mapping or an entry is invalid.
    """
    entries = data.get("gpus") if isinstance(data, Mapping) else None
    if not isinstance(entries, Mapping) or not entries:
        raise InputError(f"{where}: needs a non-empty 'gpus' mapping")
    return {str(name): gpu_from_mapping(str(name), entry, where) for name, entry in entries.items()}


@functools.cache
def gpu_table() -> dict[str, GPU]:
    """The shipped GPU table (read once, on first use)."""
    text = resources.files("prefixplan").joinpath(_TABLE).read_text(encoding="utf-8")
    return gpus_from_mapping(yamlsafe.load(text) or {})


def gpu_names() -> list[str]:
    """Names of the GPUs in the shipped table."""
    return sorted(gpu_table())


def lookup_gpu(name: str) -> GPU:
    """A GPU of the shipped table by name or alias (case-insensitive).

    Raises:
        UsageError: no GPU has that name or alias (the hint lists the names).
    """
    key = name.strip().lower()
    for gpu in gpu_table().values():
        if key == gpu.name.lower() or key in (a.lower() for a in gpu.aliases):
            return gpu
    raise UsageError(f"no GPU figures for {name!r}", hint="use one of: " + ", ".join(gpu_names()))
