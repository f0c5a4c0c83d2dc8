#!/usr/bin/env bash
# Create .venv-lowest with the lowest allowed version of each direct dependency
# (uv --resolution lowest-direct) for the lowest-versions test stage. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install -q "uv>=0.5"
uv venv -q --allow-existing --python "$(command -v python)" .venv-lowest
uv pip install -q --python .venv-lowest/bin/python --resolution lowest-direct -e ".[test]"
