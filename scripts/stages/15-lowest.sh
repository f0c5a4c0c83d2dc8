#!/usr/bin/env bash
# Lowest-versions stage: every lower bound in pyproject.toml is one the unit tests pass on.
# Installs the lowest allowed version of each direct dependency (uv --resolution lowest-direct)
# into .venv-lowest and runs the unit tests there, less the slow end-to-end ones (marked heavy: they
# exercise the same dependency code as faster tests; the unit stage runs them on current versions).
set -euo pipefail
cd "$(dirname "$0")/../.."
bash scripts/setup_lowest.sh
.venv-lowest/bin/python - <<'PY'
from importlib.metadata import version
print("lowest:", ", ".join(f"{p} {version(p)}" for p in (
    "typer", "rich", "tiktoken", "transformers", "tokenizers", "openai", "pyyaml", "sqlite-utils",
    "numpy", "isal", "httpx", "pytest", "pytest-xdist", "mistral-common", "starlette", "uvicorn", "pyarrow", "fsspec", "s3fs", "moto", "ray")))
PY
bash scripts/setup_redis.sh
.venv-lowest/bin/python -m pytest -q -m "not live and not browser and not heavy" -p no:cacheprovider $(bash scripts/pytest_workers.sh)
