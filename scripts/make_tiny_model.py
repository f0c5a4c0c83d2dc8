#!/usr/bin/env python3
"""Build a tiny random-weight Qwen3 model whose tokenizer and chat template are the real Qwen3 ones.

Used only by the live tests: vLLM serves it on the CPU in seconds, and its ``/tokenize`` and KV
cache behave exactly as for a real Qwen3 model (same ids, same template); its outputs are noise.

    .venv-vllm/bin/python scripts/make_tiny_model.py [--tokenizer .cache/tokenizers/qwen3] [--out .cache/tiny-qwen3]

Needs torch + transformers (the ``.venv-vllm`` environment has both). Deterministic: the same
seed gives the same weights. Idempotent: an existing complete model folder is kept.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SEED = 20240917
MARKER = "prefixplan-tiny.json"


def build(tokenizer_dir: Path, out: Path, seed: int = SEED) -> Path:
    """Write the model to ``out`` (via a staging folder) and return ``out``."""
    import torch
    from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM

    if not (tokenizer_dir / "tokenizer.json").is_file():
        raise SystemExit(
            f"make_tiny_model: no tokenizer.json in {tokenizer_dir}; run python scripts/fetch_tokenizers.py"
        )
    tok = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    torch.manual_seed(seed)
    cfg = Qwen3Config(
        vocab_size=len(tok),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=32,
        tie_word_embeddings=True,
        max_position_embeddings=32768,
        torch_dtype="float32",
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tok.pad_token_id,
    )
    model = Qwen3ForCausalLM(cfg)
    staging = out.with_name(out.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    model.save_pretrained(str(staging))
    tok.save_pretrained(str(staging))
    (staging / MARKER).write_text(json.dumps({"seed": seed, "tokenizer": str(tokenizer_dir)}) + "\n")
    shutil.rmtree(out, ignore_errors=True)
    staging.rename(out)
    return out


def is_complete(out: Path) -> bool:
    return (out / MARKER).is_file() and (out / "config.json").is_file() and (out / "tokenizer.json").is_file()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokenizer", type=Path, default=ROOT / ".cache" / "tokenizers" / "qwen3")
    parser.add_argument("--out", type=Path, default=ROOT / ".cache" / "tiny-qwen3")
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--force", action="store_true", help="rebuild even when the folder is complete")
    args = parser.parse_args(argv)
    if args.force or not is_complete(args.out):
        build(args.tokenizer, args.out, args.seed)
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
