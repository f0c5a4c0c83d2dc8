"""Prefill time derived from the model's shape and the GPU's peak figures (a roofline).

One prefill forward pass over ``new`` tokens after ``cached`` reused tokens does::

    FLOPs = 2 * P * new                                   linear layers (P = non-embedding parameters)
          + 2 * vocab * hidden                            LM head, for the last token only
          + 4 * layers * heads * head_dim * pairs         attention: QK^T and AV
    pairs = new * cached + new * (new + 1) / 2            causal: each new token attends to the
                                                          cached prefix, its predecessors and itself
    bytes = (P + vocab * hidden) * weight_bytes           every weight read once (LM head included;
                                                          the embedding lookup reads only its rows)
          + cached * kv_bytes_per_token                   the cached prefix's K and V

and takes, on ``tp`` GPUs (tensor parallelism splits both the work and the weights)::

    t = overhead + max(FLOPs / (peak * efficiency * tp), bytes / (bandwidth * tp))     seconds

``peak`` is the GPU's dense (no sparsity) bf16 or fp8 Tensor Core peak and ``bandwidth`` its
memory bandwidth, from ``prefixplan/data/gpus.yaml`` (:mod:`prefixplan.savings.gpus`). The
model's shape comes from its ``config.json`` (layers, KV heads and head_dim through
:func:`prefixplan.savings.kvsize.from_config`; attention heads, hidden and MLP sizes and the
vocabulary read here), or from an explicit total parameter count. Tensor-parallel all-reduces,
elementwise kernels (norms, RoPE, activations) and the memory traffic of activations are not
modelled: they are what ``efficiency`` and ``overhead`` stand for.

Defaults, chosen from public figures, not fitted to any measurement:

* ``DEFAULT_EFFICIENCY = 0.5`` -- the fraction of the dense peak a prefill forward reaches.
  Public model-FLOP utilisation of dense transformer forward/backward work spans about 0.4 to
  0.75: Llama 3 training reports 38-43% BF16 MFU on H100 (Llama 3 paper, 2024); Megatron-LM
  reports 52% of A100 peak for GPT-scale training (Narayanan et al., 2021); PaLM inference reports
  76% MFU for large-batch prefill on TPU v4 (Pope et al., 2022); FlashAttention-2 reaches about
  35% and FlashAttention-3 about 75% of H100 BF16 peak in the attention kernel alone. A single
  request's prefill has smaller matrix products (M = the new tokens) and unfused elementwise
  kernels, so it sits in the lower half of that range: 0.5, a round middle value.
* ``DEFAULT_OVERHEAD_S = 0.005`` -- fixed seconds per forward pass: launching the kernels of a
  ~30-80-layer model (10-15 kernels a layer at roughly 5-10 us each: 2-5 ms) plus the engine's
  scheduling and the first token's sampling (about 1 ms). An eager (no CUDA graphs) Python
  forward pays more; an engine with CUDA graphs less.

:func:`fit_coefficients` fits the ``a + b*new + c*new*(cached + new/2)`` form of a prefill profile
to the roofline over a grid of (new, cached) (:func:`prefixplan.savings.prefill.derived_profile`
makes the :class:`~prefixplan.savings.prefill.PrefillProfile` of it; the built-in profiles are
made so); :meth:`Roofline.seconds` gives the roofline time itself. :attr:`Roofline.source` says
where the figures came from, beginning ``derived from <model>, <GPU>, efficiency E``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from prefixplan.errors import InputError, UsageError
from prefixplan.savings.gpus import GPU, lookup_gpu
from prefixplan.savings.kvsize import from_config

DEFAULT_EFFICIENCY = 0.5
DEFAULT_OVERHEAD_S = 0.005
WEIGHT_BYTES = {"bf16": 2, "fp8": 1}
# Model types whose MLP has two matrices (up, down) rather than three (gate, up, down).
_UNGATED_MLP = frozenset({"gpt_neox", "gptj", "opt", "falcon", "bloom", "phi", "starcoder2"})
_MOE_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_intermediate_size")
_FIT_NEW = tuple(2**k for k in range(6, 16))  # 64 .. 32,768 new tokens
_FIT_CACHED = (0, 1024, 4096, 16384, 65536)

# Shapes from each model's published config.json (Hugging Face), for the built-in profiles.
BUILTIN_CONFIGS: dict[str, dict[str, Any]] = {
    "meta-llama/Llama-3.1-8B-Instruct": {
        "model_type": "llama",
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "vocab_size": 128256,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    },
    "meta-llama/Llama-3.1-70B-Instruct": {
        "model_type": "llama",
        "hidden_size": 8192,
        "intermediate_size": 28672,
        "num_hidden_layers": 80,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "vocab_size": 128256,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    },
    "Qwen/Qwen2.5-7B-Instruct": {
        "model_type": "qwen2",
        "hidden_size": 3584,
        "intermediate_size": 18944,
        "num_hidden_layers": 28,
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
        "vocab_size": 152064,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    },
    "Qwen/Qwen3-8B": {
        "model_type": "qwen3",
        "hidden_size": 4096,
        "intermediate_size": 12288,
        "num_hidden_layers": 36,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "vocab_size": 151936,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    },
    "Qwen/Qwen3-32B": {
        "model_type": "qwen3",
        "hidden_size": 5120,
        "intermediate_size": 25600,
        "num_hidden_layers": 64,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "vocab_size": 151936,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    },
}


@dataclass(frozen=True, slots=True)
class ModelShape:
    """What the roofline needs of a dense transformer."""

    name: str
    layers: int
    heads: int
    head_dim: int
    hidden: int
    vocab: int
    params: int  # total parameters, embeddings included (as model cards state them)
    kv_bytes_per_token: int
    tied_embeddings: bool = False

    @property
    def embedding_params(self) -> int:
        return self.vocab * self.hidden

    @property
    def non_embedding_params(self) -> int:
        """Parameters of the per-token linear layers (and norms): all but embedding and LM head."""
        untied_head = 0 if self.tied_embeddings else self.embedding_params
        return self.params - self.embedding_params - untied_head

    @property
    def weights_read(self) -> int:
        """Parameters read once per forward pass: the layers plus the LM head."""
        return self.non_embedding_params + self.embedding_params


def _int(cfg: Mapping[str, Any], *keys: str) -> int:
    for key in keys:
        if cfg.get(key):
            return int(cfg[key])
    raise KeyError(keys[0])


def _dense_params(cfg: Mapping[str, Any], layers: int, kv_heads: int, head_dim: int) -> int:
    """Total parameters of a dense decoder from its config (biases left out: they are negligible)."""
    hidden = _int(cfg, "hidden_size", "n_embd")
    heads = _int(cfg, "num_attention_heads", "n_head")
    mlp = _int(cfg, "intermediate_size", "n_inner", "ffn_dim")
    vocab = _int(cfg, "vocab_size")
    attention = 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim  # q, o; k, v
    matrices = 2 if str(cfg.get("model_type", "")) in _UNGATED_MLP else 3
    per_layer = attention + matrices * hidden * mlp + 2 * hidden  # two norms a layer
    heads_out = 1 if cfg.get("tie_word_embeddings") else 2  # embedding, and an untied LM head
    return layers * per_layer + hidden + heads_out * vocab * hidden  # + the final norm


def shape_from_config(
    config: Mapping[str, Any],
    name: str = "config.json",
    *,
    params: int | None = None,
    kv_dtype_bytes: int | None = None,
) -> ModelShape:
    """The roofline shape of a Hugging Face ``config.json`` dict (``text_config`` of multimodal ones).

    ``params`` (total parameters, embeddings included) overrides the count derived from the
    config; it is required for mixture-of-experts configs, whose active parameters the config
    alone does not give.

    Raises:
        InputError: a size the roofline needs is missing or invalid.
        UsageError: an MLA (DeepSeek) config, or an MoE config without ``params``.
    """
    kv = from_config(dict(config), name=name, dtype_bytes=kv_dtype_bytes)
    if kv.mla:
        raise UsageError(f"{name}: multi-head latent attention (MLA) is not covered by the roofline model")
    cfg = config.get("text_config") or config
    if params is None and any(cfg.get(key) for key in _MOE_KEYS):
        raise UsageError(f"{name}: a mixture-of-experts config", hint="pass the parameter count (params=)")
    try:
        hidden = _int(cfg, "hidden_size", "n_embd")
        total = int(params) if params is not None else _dense_params(cfg, kv.layers, kv.kv_heads, kv.head_dim)
        shape = ModelShape(
            name=name,
            layers=kv.layers,
            heads=_int(cfg, "num_attention_heads", "n_head"),
            head_dim=kv.head_dim,
            hidden=hidden,
            vocab=_int(cfg, "vocab_size"),
            params=total,
            kv_bytes_per_token=kv.bytes_per_token,
            tied_embeddings=bool(cfg.get("tie_word_embeddings")),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(f"{name}: cannot read model size ({exc!r} missing or invalid)") from None
    if shape.non_embedding_params <= 0:
        raise UsageError(f"{name}: {total:,} parameters is fewer than the embeddings alone")
    return shape


def load_model_shape(path: str | Path, *, params: int | None = None, kv_dtype_bytes: int | None = None) -> ModelShape:
    """Read a ``config.json`` file (or a folder holding one) into a :class:`ModelShape`.

    Raises:
        InputError: the file is missing, not JSON, or lacks a size.
    """
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"cannot read model config {p}: {exc}") from None
    if not isinstance(data, dict):
        raise InputError(f"{p}: a model config must be a JSON object")
    return shape_from_config(data, str(p), params=params, kv_dtype_bytes=kv_dtype_bytes)


def builtin_shape(model: str, *, kv_dtype_bytes: int | None = None) -> ModelShape:
    """A built-in model by full name or the part after ``/`` (case-insensitive, ``-Instruct`` optional).

    Raises:
        UsageError: no built-in model has that name.
    """
    key = model.strip().lower().removesuffix("-instruct")
    for name, config in BUILTIN_CONFIGS.items():
        short = name.split("/")[-1].lower()
        if key in (name.lower().removesuffix("-instruct"), short.removesuffix("-instruct")):
            return shape_from_config(config, name, kv_dtype_bytes=kv_dtype_bytes)
    raise UsageError(
        f"no built-in model shape for {model!r}",
        hint="pass a config.json, or one of: " + ", ".join(n.split("/")[-1] for n in BUILTIN_CONFIGS),
    )


def attention_pairs(new: Any, cached: Any = 0) -> Any:
    """(new token, context token) pairs of a causal prefill: ``new*cached + new*(new+1)/2``."""
    return new * cached + new * (new + 1) / 2


def linear_flops(shape: ModelShape, new: Any) -> Any:
    """FLOPs of the linear layers for ``new`` tokens, plus the LM head for the last token."""
    return 2.0 * shape.non_embedding_params * new + 2.0 * shape.embedding_params * (new > 0)


def attention_flops(shape: ModelShape, new: Any, cached: Any = 0) -> Any:
    """FLOPs of QK^T and AV: ``4 * layers * heads * head_dim`` per (new, context) pair."""
    return 4.0 * shape.layers * shape.heads * shape.head_dim * attention_pairs(new, cached)


def forward_flops(shape: ModelShape, new: Any, cached: Any = 0) -> Any:
    """All FLOPs of one prefill forward pass (see the module docstring)."""
    return linear_flops(shape, new) + attention_flops(shape, new, cached)


def forward_bytes(shape: ModelShape, cached: Any = 0, weight_bytes: int = 2) -> Any:
    """Bytes one forward pass reads from memory: every weight once, plus the cached K and V."""
    return float(shape.weights_read * weight_bytes) + cached * float(shape.kv_bytes_per_token)


@dataclass(frozen=True, slots=True)
class Roofline:
    """Prefill time of a model on ``tp`` GPUs of one kind (build it with :func:`roofline`)."""

    model: ModelShape
    gpu: GPU
    tp: int = 1
    precision: str = "bf16"
    efficiency: float = DEFAULT_EFFICIENCY
    overhead_s: float = DEFAULT_OVERHEAD_S

    @property
    def name(self) -> str:
        """A short label, e.g. ``Llama-3.1-8B-Instruct@H200``."""
        tp = f"x{self.tp}" if self.tp > 1 else ""
        return f"{self.model.name.split('/')[-1]}@{self.gpu.name}{tp}"

    @property
    def gpus(self) -> int:
        """GPUs per replica (GPU-seconds = seconds x gpus), as :class:`PrefillProfile` has it."""
        return self.tp

    @property
    def gpu_label(self) -> str:
        """The GPUs of one replica, e.g. ``H200`` or ``4x H100-SXM (TP4)``."""
        return self.gpu.name if self.tp == 1 else f"{self.tp}x {self.gpu.name} (TP{self.tp})"

    @property
    def provenance(self) -> str:
        """``derived from <model>, <GPU>, efficiency E``: what every derived figure is printed with."""
        return f"derived from {self.model.name}, {self.gpu_label}, efficiency {self.efficiency:g}"

    @property
    def source(self) -> str:
        """Where every figure came from: :attr:`provenance`, then the rest of the model's inputs."""
        return (
            f"{self.provenance}; {self.precision}, overhead {self.overhead_s * 1000:g} ms a forward pass; "
            f"GPU figures: {self.gpu.citation}"
        )

    def compute_seconds(self, new: Any, cached: Any = 0) -> Any:
        """FLOPs over the reachable peak (the compute roof), without overhead."""
        peak = self.gpu.peak_flops(self.precision) * self.efficiency * self.tp
        return forward_flops(self.model, new, cached) / peak

    def memory_seconds(self, new: Any, cached: Any = 0) -> Any:
        """Bytes read over the memory bandwidth (the memory roof), without overhead."""
        del new  # the bytes read do not depend on the new tokens (their activations are not counted)
        weight_bytes = WEIGHT_BYTES[self.precision]
        return forward_bytes(self.model, cached, weight_bytes) / (self.gpu.bandwidth * self.tp)

    def seconds(self, new: Any, cached: Any = 0) -> Any:
        """Prefill seconds for arrays (or scalars) of new and cached tokens, like
        :meth:`PrefillProfile.seconds`."""
        n = np.asarray(new, dtype=np.float64)
        c = np.asarray(cached, dtype=np.float64)
        t = self.overhead_s + np.maximum(self.compute_seconds(n, c), self.memory_seconds(n, c))
        return t if t.ndim else float(t)

    def bound(self, new: float, cached: float = 0) -> str:
        """``"compute"`` or ``"memory"``: which roof sets the time of this forward pass."""
        return "compute" if self.compute_seconds(new, cached) >= self.memory_seconds(new, cached) else "memory"

    def weight_bytes_per_gpu(self) -> float:
        """Bytes of weights each GPU holds (embedding table included)."""
        total = self.model.params * WEIGHT_BYTES[self.precision]
        return total / self.tp

    def fits(self, context_tokens: int = 0) -> bool:
        """Whether the weights plus ``context_tokens`` of KV fit in the GPUs' memory (0 = unknown: True)."""
        if not self.gpu.memory_gb:
            return True
        kv = context_tokens * self.model.kv_bytes_per_token / self.tp
        return self.weight_bytes_per_gpu() + kv <= self.gpu.memory_gb * 1e9


def _resolve_model(model: ModelShape | str | Path, params: int | None) -> ModelShape:
    if isinstance(model, ModelShape):
        return model
    text = str(model)
    path = Path(text)
    if path.suffix.lower() == ".json" or path.is_dir() or path.is_file():
        return load_model_shape(path, params=params)
    shape = builtin_shape(text)
    if params is None:
        return shape
    return shape_from_config(BUILTIN_CONFIGS[shape.name], shape.name, params=params)


def roofline(
    model: ModelShape | str | Path,
    gpu: GPU | str,
    *,
    tp: int = 1,
    precision: str = "bf16",
    efficiency: float = DEFAULT_EFFICIENCY,
    overhead_s: float = DEFAULT_OVERHEAD_S,
    params: int | None = None,
) -> Roofline:
    """The roofline of ``model`` (a :class:`ModelShape`, a built-in name or a config.json path) on
    ``tp`` GPUs named ``gpu`` (or described by a :class:`GPU`).

    Raises:
        UsageError: an unknown model, GPU or precision; tp < 1; efficiency outside (0, 1];
            a negative overhead.
        InputError: a config.json that cannot be read.
    """
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise UsageError(f"tp must be a whole number of GPUs >= 1, not {tp!r}")
    if not 0 < efficiency <= 1:
        raise UsageError(f"efficiency must be in (0, 1], not {efficiency!r}", hint="a fraction of the peak")
    if overhead_s < 0:
        raise UsageError(f"overhead must be >= 0 seconds, not {overhead_s!r}")
    if precision not in WEIGHT_BYTES:
        raise UsageError(f"unknown precision {precision!r}", hint="one of: " + ", ".join(WEIGHT_BYTES))
    chip = gpu if isinstance(gpu, GPU) else lookup_gpu(gpu)
    chip.peak_flops(precision)  # fp8 on a GPU without fp8 is refused here, not at the first use
    return Roofline(_resolve_model(model, params), chip, tp, precision, float(efficiency), float(overhead_s))


def default_grid(new: Iterable[int] = _FIT_NEW, cached: Iterable[int] = _FIT_CACHED) -> tuple[np.ndarray, np.ndarray]:
    """The (new, cached) points a profile is fitted on: every combination of the two lists."""
    n, c = np.meshgrid(np.asarray(list(new), dtype=np.float64), np.asarray(list(cached), dtype=np.float64))
    return n.ravel(), c.ravel()


def _nonnegative_lstsq(design: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Least squares with every coefficient >= 0: a column whose coefficient comes out negative is
    dropped (held at 0) and the rest refitted."""
    keep = np.ones(design.shape[1], dtype=bool)
    coef = np.zeros(design.shape[1])
    while keep.any():
        sub, *_ = np.linalg.lstsq(design[:, keep], target, rcond=None)
        coef[:] = 0.0
        coef[keep] = sub
        if (sub >= 0).all():
            break
        keep[np.flatnonzero(keep)[sub < 0]] = False
    return coef


def fit_coefficients(roof: Roofline, new: np.ndarray, cached: np.ndarray) -> tuple[float, float, float]:
    """Least-squares ``(a, b, c)`` (each >= 0) of ``a + b*new + c*new*(cached + new/2)`` to the
    roofline times, each point weighted by 1/time (so the fit minimises relative error)."""
    t = np.asarray(roof.seconds(new, cached), dtype=np.float64)
    design = np.column_stack([np.ones_like(new), new, new * (cached + new / 2.0)])
    a, b, c = (float(x) for x in _nonnegative_lstsq(design / t[:, None], np.ones_like(t)))
    return a, b, c
