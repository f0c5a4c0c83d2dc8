#!/usr/bin/env bash
# Lint stage: ruff (lint + format) and mypy over the package, at zero findings.
set -euo pipefail
cd "$(dirname "$0")/../.."
ruff check prefixplan tests benchmarks scripts
ruff format --check prefixplan tests benchmarks scripts
mypy
