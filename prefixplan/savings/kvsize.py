"""KV-cache bytes per token, from a model ``config.json`` or a built-in table.

Standard attention (MHA/GQA/MQA) stores a key and a value per layer and KV head::

    bytes/token = 2 * num_hidden_layers * num_key_value_heads * head_dim * dtype_bytes

Multi-head latent attention (DeepSeek-V2/V3/R1) stores one compressed latent plus the
decoupled RoPE key per layer::

    bytes/token = num_hidden_layers * (kv_lora_rank + qk_rope_head_dim) * dtype_bytes

``head_dim`` defaults to ``hidden_size / num_attention_heads`` and ``num_key_value_heads``
to ``num_attention_heads`` when a config omits them. The KV dtype defaults to 2 bytes
(bf16/fp16, the engines' default ``--kv-cache-dtype auto`` for these models); pass
``dtype_bytes=1`` for an fp8 KV cache.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from prefixplan.errors import InputError, UsageError

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "fp8": 1, "float8_e4m3fn": 1, "int8": 1}


@dataclass(frozen=True, slots=True)
class KVShape:
    """What a model stores per token in the KV cache."""

    name: str
    layers: int
    kv_heads: int = 0
    head_dim: int = 0
    dtype_bytes: int = 2
    kv_lora_rank: int = 0  # MLA only
    qk_rope_head_dim: int = 0  # MLA only

    @property
    def mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def bytes_per_token(self) -> int:
        if self.mla:
            return self.layers * (self.kv_lora_rank + self.qk_rope_head_dim) * self.dtype_bytes
        return 2 * self.layers * self.kv_heads * self.head_dim * self.dtype_bytes

    def formula(self) -> str:
        """The arithmetic, for reports."""
        if self.mla:
            return (
                f"{self.layers} layers x ({self.kv_lora_rank} + {self.qk_rope_head_dim}) x {self.dtype_bytes} B"
                f" = {self.bytes_per_token:,} B/token (MLA latent)"
            )
        return (
            f"2 x {self.layers} layers x {self.kv_heads} kv heads x {self.head_dim} x {self.dtype_bytes} B"
            f" = {self.bytes_per_token:,} B/token"
        )


# Values from each model's published config.json (Hugging Face), KV in bf16.
BUILTIN: dict[str, KVShape] = {
    s.name: s
    for s in (
        KVShape("meta-llama/Llama-3.1-8B-Instruct", layers=32, kv_heads=8, head_dim=128),
        KVShape("meta-llama/Llama-3.1-70B-Instruct", layers=80, kv_heads=8, head_dim=128),
        KVShape("meta-llama/Llama-3.3-70B-Instruct", layers=80, kv_heads=8, head_dim=128),
        KVShape("meta-llama/Llama-3.2-3B-Instruct", layers=28, kv_heads=8, head_dim=128),
        KVShape("Qwen/Qwen2.5-7B-Instruct", layers=28, kv_heads=4, head_dim=128),
        KVShape("Qwen/Qwen2.5-32B-Instruct", layers=64, kv_heads=8, head_dim=128),
        KVShape("Qwen/Qwen2.5-72B-Instruct", layers=80, kv_heads=8, head_dim=128),
        KVShape("Qwen/Qwen3-8B", layers=36, kv_heads=8, head_dim=128),
        KVShape("Qwen/Qwen3-32B", layers=64, kv_heads=8, head_dim=128),
        KVShape("mistralai/Mistral-7B-Instruct-v0.3", layers=32, kv_heads=8, head_dim=128),
        KVShape("deepseek-ai/DeepSeek-V3", layers=61, kv_lora_rank=512, qk_rope_head_dim=64),
        KVShape("deepseek-ai/DeepSeek-R1", layers=61, kv_lora_rank=512, qk_rope_head_dim=64),
    )
}


def builtin_names() -> list[str]:
    return sorted(BUILTIN)


def lookup_builtin(model: str, dtype_bytes: int | None = None) -> KVShape:
    """Find a built-in model by full name or by its part after the ``/`` (case-insensitive)."""
    key = model.lower()
    for name, shape in BUILTIN.items():
        if key in (name.lower(), name.split("/")[-1].lower()):
            return _with_dtype(shape, dtype_bytes)
    raise UsageError(
        f"no built-in KV size for model {model!r}",
        hint="pass --model-config path/to/config.json, or one of: "
        + ", ".join(n.split("/")[-1] for n in builtin_names()),
    )


def _with_dtype(shape: KVShape, dtype_bytes: int | None) -> KVShape:
    if dtype_bytes is None:
        return shape
    return KVShape(
        shape.name,
        shape.layers,
        shape.kv_heads,
        shape.head_dim,
        dtype_bytes,
        shape.kv_lora_rank,
        shape.qk_rope_head_dim,
    )


def from_config(config: dict, name: str = "config.json", dtype_bytes: int | None = None) -> KVShape:
    """KV shape of a Hugging Face ``config.json`` dict (``text_config`` of multimodal models)."""
    cfg = config.get("text_config") or config
    try:
        layers = int(cfg.get("num_hidden_layers") or cfg.get("n_layer") or cfg["num_layers"])
        if dtype_bytes is None:
            dtype = str(cfg.get("torch_dtype") or config.get("torch_dtype") or "bfloat16")
            # The checkpoint's dtype: the CPU build of vLLM serves a float32 model in float32 (its
            # KV cache measured 4 bytes a value); a GPU server may cast it to 16 bits, which
            # --kv-dtype-bytes 2 says.
            dtype_bytes = DTYPE_BYTES.get(dtype.replace("torch.", ""), 2)
        if cfg.get("kv_lora_rank"):
            return KVShape(
                name,
                layers,
                dtype_bytes=dtype_bytes,
                kv_lora_rank=int(cfg["kv_lora_rank"]),
                qk_rope_head_dim=int(cfg.get("qk_rope_head_dim") or 0),
            )
        heads = int(cfg.get("num_attention_heads") or cfg["n_head"])
        kv_heads = int(cfg.get("num_key_value_heads") or heads)
        head_dim = cfg.get("head_dim")
        head_dim = int(head_dim) if head_dim else int(cfg["hidden_size"]) // heads
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(f"{name}: cannot read KV shape ({exc!r} missing or invalid)") from None
    return KVShape(name, layers, kv_heads, head_dim, dtype_bytes)


def load_config(path: str | Path, dtype_bytes: int | None = None) -> KVShape:
    """Read a ``config.json`` file (or a folder holding one)."""
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise InputError(f"cannot read model config {p}: {exc}") from None
    return from_config(data, name=str(p), dtype_bytes=dtype_bytes)


def prefix_memory_bytes(tokens: int, shape: KVShape) -> int:
    """KV memory to keep ``tokens`` cached tokens resident."""
    return int(tokens) * shape.bytes_per_token
