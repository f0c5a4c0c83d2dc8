#!/usr/bin/env bash
# Unit stage: fast, offline tests (tiny in-memory tokenizers, the fetched Qwen3 tokenizer).
set -euo pipefail
bash "$(dirname "$0")/../setup_redis.sh"   # a real redis-server for the gateway's shared-state tests
python -m pytest -q -m "not live and not browser" -p no:cacheprovider $(bash "$(dirname "$0")/../pytest_workers.sh")
