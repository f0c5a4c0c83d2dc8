"""Decompression of a gzip log: the standard library vs prefixplan's reader (not run in CI).

Usage::

    python benchmarks/bench_gunzip.py                 # the pinned 100k log (made by bench_trace.py)
    python benchmarks/bench_gunzip.py --file X.gz --mb 500

Reads the first ``--mb`` MB of decompressed lines three ways, in one run: ``gzip.open``
(the baseline), :class:`prefixplan.logs.gunzip.GzipReader` on ``zlib`` and on ISA-L
(``isal``), each through :func:`prefixplan.logs.open.iter_lines`, and prints MB/s and the
ratio to the baseline.
"""

from __future__ import annotations

import argparse
import gzip
import sys
import time
import zlib
from pathlib import Path

from pinned import OUT

from prefixplan.logs.gunzip import GzipReader, fast_engine
from prefixplan.logs.open import iter_lines


def run(make, path: Path, limit: int) -> tuple[float, int, int]:
    t0 = time.perf_counter()
    lines = size = 0
    with open(path, "rb") as raw:
        stream = make(raw)
        for line in iter_lines(stream, 1 << 26):
            lines += 1
            size += line.size + 1
            if size >= limit:
                break
    return time.perf_counter() - t0, lines, size


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--file", type=Path, default=OUT / "bench.jsonl.gz")
    ap.add_argument("--mb", type=int, default=1000, help="decompressed MB to read")
    args = ap.parse_args()
    if not args.file.is_file():
        print(f"{args.file} not found: run benchmarks/bench_trace.py first, or pass --file", file=sys.stderr)
        return 2
    limit = args.mb * 10**6
    ways = [
        ("gzip.open (baseline)", lambda raw: gzip.GzipFile(fileobj=raw, mode="rb")),
        ("GzipReader, zlib", lambda raw: GzipReader(raw, engine=zlib)),
    ]
    if fast_engine() is not zlib:
        ways.append(("GzipReader, isal", lambda raw: GzipReader(raw)))
    else:
        print("isal is not installed: its row is left out")
    base = None
    print(f"{args.file.name}: first {args.mb} MB of lines")
    print(f"{'reader':24} {'s':>7} {'MB/s':>8} {'x baseline':>10}")
    for name, make in ways:
        seconds, lines, size = run(make, args.file, limit)
        rate = size / seconds / 1e6
        base = base or rate
        print(f"{name:24} {seconds:7.2f} {rate:8.1f} {rate / base:10.2f}   ({lines:,} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
