#!/usr/bin/env bash
# Live stage: a real vLLM (CPU build) in .venv-vllm, a tiny random-weight model with the real Qwen3
# tokenizer, and the live tests against one server for the session (tests/live/conftest.py).
# Without PREFIXPLAN_REQUIRE_LIVE=1 a failed install makes the live tests skip with the reason.
set -uo pipefail
cd "$(dirname "$0")/../.."
ready=1
if ! bash scripts/setup_vllm.sh; then
  echo "live: vLLM could not be installed (see above)"
  ready=0
fi
if [ "$ready" = 1 ]; then
  python scripts/fetch_tokenizers.py qwen3 >/dev/null || { echo "live: Qwen3 tokenizer fetch failed"; ready=0; }
fi
if [ "$ready" = 1 ]; then
  .venv-vllm/bin/python scripts/make_tiny_model.py >/dev/null || { echo "live: tiny model build failed"; ready=0; }
fi
if [ "$ready" = 0 ] && [ "${PREFIXPLAN_REQUIRE_LIVE:-0}" = 1 ]; then
  echo "live: PREFIXPLAN_REQUIRE_LIVE=1 and the live environment is not available"
  exit 1
fi
bash scripts/setup_redis.sh   # the gateway's shared-state test starts a real redis-server
rm -f test-artifacts/live-summary.json
python -m pytest -q -m live -p no:cacheprovider tests/live
status=$?
if [ -f test-artifacts/live-summary.json ]; then
  echo "live figures (test-artifacts/live-summary.json):"
  cat test-artifacts/live-summary.json
fi
exit $status
