"""Time the log reader against a bare ``json.loads`` loop (not run in CI).

Usage::

    python benchmarks/bench_logs.py            # 100k lines
    python benchmarks/bench_logs.py --lines 20000 --gzip

Generates a chat log in a temp folder (a shared ~2 KB system prompt, a tool, a short
conversation per line), then reports lines/s for ``iter_requests`` and for the baseline
``for line in f: json.loads(line)``, and their ratio.
"""

from __future__ import annotations

import argparse
import gzip
import json
import tempfile
import time
from pathlib import Path


def make_log(path: Path, lines: int, compress: bool) -> None:
    system = "You are a support agent for ACME. " * 60
    tool = {
        "type": "function",
        "function": {
            "name": "lookup_order",
            "parameters": {"type": "object", "properties": {"id": {"type": "string"}}},
        },
    }
    opener = gzip.open if compress else open
    with opener(path, "wt", encoding="utf-8") as f:
        for i in range(lines):
            row = {
                "timestamp": 1_714_564_800 + i * 0.05,
                "request": {
                    "model": "qwen3",
                    "user": f"user-{i % 500}",
                    "tools": [tool],
                    "messages": [
                        {"role": "system", "content": system},
                        {"role": "user", "content": f"Where is order {i}?"},
                        {"role": "assistant", "content": "Let me check."},
                        {"role": "user", "content": f"Thanks, also order {i + 1}."},
                    ],
                },
                "response": {
                    "usage": {
                        "prompt_tokens": 600,
                        "completion_tokens": 20,
                        "prompt_tokens_details": {"cached_tokens": 512},
                    }
                },
            }
            f.write(json.dumps(row) + "\n")


def baseline(path: Path, compress: bool) -> int:
    opener = gzip.open if compress else open
    n = 0
    with opener(path, "rb") as f:
        for line in f:
            json.loads(line)
            n += 1
    return n


def reader(path: Path) -> int:
    from prefixplan.logs import LineErrors, ReadOptions, iter_requests

    errors = LineErrors()
    n = sum(1 for _ in iter_requests([str(path)], ReadOptions(), errors))
    assert errors.count == 0, errors.summary()
    return n


def best_of(fn, repeat: int) -> tuple[float, int]:
    best, n = float("inf"), 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        n = fn()
        best = min(best, time.perf_counter() - t0)
    return best, n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=100_000)
    ap.add_argument("--gzip", action="store_true")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / ("chat.jsonl.gz" if args.gzip else "chat.jsonl")
        make_log(path, args.lines, args.gzip)
        size = path.stat().st_size
        t_base, n_base = best_of(lambda: baseline(path, args.gzip), args.repeat)
        t_read, n_read = best_of(lambda: reader(path), args.repeat)
    assert n_base == n_read == args.lines
    print(f"file: {args.lines} lines, {size / 2**20:.1f} MiB{' (gzip)' if args.gzip else ''}")
    print(f"json.loads loop : {t_base:7.3f} s  {n_base / t_base:10,.0f} lines/s")
    print(f"iter_requests   : {t_read:7.3f} s  {n_read / t_read:10,.0f} lines/s")
    print(f"ratio reader/baseline: {t_read / t_base:.2f}x")


if __name__ == "__main__":
    main()
