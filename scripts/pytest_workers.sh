#!/usr/bin/env bash
# pytest-xdist options for the test stages: one worker per core, at most 4 (tests start render
# workers, Ray and servers of their own); PYTEST_WORKERS=N overrides; 0 or 1 runs in one process.
n=${PYTEST_WORKERS:-$(python -c 'import os; print(max(1, min(4, os.cpu_count() or 1)))')}
if [ "$n" -le 1 ]; then
  echo ""
else
  echo "-n $n --dist worksteal"
fi
