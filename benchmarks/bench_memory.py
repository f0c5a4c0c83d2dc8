#!/usr/bin/env python3
"""Benchmark: peak memory of `analyze` as the log grows, in one run (100k vs 1M requests).

    python benchmarks/bench_memory.py [--requests 100000,1000000]

Each figure is `prefixplan analyze TRACE` (the simulation headline included, no tokenizer) in
its own process, on the trace that `benchmarks/bench_trace.py --requests N` writes for the pinned
log of N requests (benchmarks/out/bench[-N].trace.parquet; a missing one is reported, not made:
rendering a million requests takes about half an hour on two cores). Peak RSS is the process's
max RSS. The first size is the baseline: the table gives each size's requests, distinct blocks and
peak RSS, and the ratios to the baseline (RSS flat as requests grow is the aim). Not run in CI.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

from pinned import OUT, run_child


def trace_of(requests: int) -> Path:
    return OUT / ("bench.trace.parquet" if requests == 100_000 else f"bench-{requests}.trace.parquet")


def child_analyze(trace: Path) -> dict:
    from prefixplan.analysis.options import AnalyzeOptions
    from prefixplan.api import AnalyzeRequest, HeadlineOptions, run_analyze, source_options
    from prefixplan.core.memory import map_large_allocations

    map_large_allocations()  # as the command line does
    t0 = time.perf_counter()
    outcome = run_analyze(
        AnalyzeRequest(AnalyzeOptions(source=source_options(str(trace)), engine="vllm"), HeadlineOptions())
    )
    s = outcome.analysis.record.summary
    return {
        "seconds": time.perf_counter() - t0,
        "requests": s.requests,
        "tokens": s.prompt_tokens,
        "blocks": s.tree_nodes,
        "candidates": s.candidates,
        "hit_rate_tokens": s.hit_rate_tokens,
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", default="100000,1000000")
    ap.add_argument("--child")
    args = ap.parse_args()
    if args.child:
        res = child_analyze(Path(args.child))
        res["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(json.dumps(res))
        return 0
    sizes = [int(x) for x in args.requests.split(",")]
    results: dict[int, dict] = {}
    for n in sizes:
        trace = trace_of(n)
        if not trace.is_file():
            print(f"missing {trace}: python benchmarks/bench_trace.py --requests {n} writes it", file=sys.stderr)
            continue
        results[n] = run_child(__file__, str(trace))
    if not results:
        return 1
    base = results[min(results)]
    print(f"{'requests':>10}{'blocks':>13}{'seconds':>9}{'peak RSS MB':>13}{'x requests':>12}{'x RSS':>8}")
    for _n, r in sorted(results.items()):
        print(
            f"{r['requests']:>10,}{r['blocks']:>13,}{r['seconds']:>9.1f}{r['peak_rss_mb']:>13,.0f}"
            f"{r['requests'] / base['requests']:>12.1f}{r['peak_rss_mb'] / base['peak_rss_mb']:>8.2f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
