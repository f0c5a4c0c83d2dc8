#!/usr/bin/env bash
# Unit stage: fast, offline tests (tiny in-memory tokenizers, the fetched Qwen3 tokenizer).
set -euo pipefail
python -m pytest -q -m "not live and not browser" -p no:cacheprovider
