#!/usr/bin/env python3
"""Benchmark: the pinned 100k-request log split into 32 files, analyzed by each executor, in one run.

    python benchmarks/bench_scale.py [--requests 100000] [--files 32] [--runs local1,local2,ray1,ray2]

The log is the pinned generated one (`python scripts/make_logs.py bench`, seed 7), created when
missing, and cut into ``--files`` gzip files (consecutive lines, input order kept) under
benchmarks/out/. Tokenizer: the real Qwen3 (hf:), fetched by scripts/fetch_tokenizers.py.

Runs, each in its own process (the documents-first what-if is off, as in bench_trace.py):
  local1   analyze --workers 1: one process reads, parses and renders everything
  local2   analyze --workers 2: two local processes, each reading and rendering whole files
  ray1     analyze --executor ray --workers 1: a local Ray cluster (2 CPUs), one actor
  ray2     the same with two actors
Peak RSS: the driver's own; per worker, the largest a worker process reported (local processes
and Ray actors report it with each file). Ratios: each run vs local1, and ray2 vs ray1 (what one
more node's worth of actors gives). Every run's record must be the same (checked). Not run in CI.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import sys
import time
from pathlib import Path

from pinned import OUT, QWEN3, ensure_qwen3, pinned_log, run_child

RUNS = {"local1": ("local", 1), "local2": ("local", 2), "ray1": ("ray", 1), "ray2": ("ray", 2)}


def split(log: Path, files: int, folder: Path) -> list[Path]:
    """Cut ``log`` into ``files`` gzip files of consecutive lines (kept when already there)."""
    names = [folder / f"part-{i:03d}.jsonl.gz" for i in range(files)]
    done = folder / ".done"  # hidden: not read as a log
    if done.is_file():
        return names
    folder.mkdir(parents=True, exist_ok=True)
    with gzip.open(log, "rb") as fh:
        total = sum(1 for _ in fh)
    per = -(-total // files)
    with gzip.open(log, "rb") as fh:
        for name in names:
            with gzip.open(name, "wb", compresslevel=6) as out:
                for _ in range(per):
                    line = fh.readline()
                    if not line:
                        break
                    out.write(line)
    done.write_text(f"{total} lines in {files} files\n")
    return names


def child_analyze(folder: Path, executor: str, workers: int) -> dict:
    from prefixplan.analysis.options import AnalyzeOptions
    from prefixplan.api import AnalyzeOutputs, AnalyzeRequest, HeadlineOptions, run_analyze, source_options

    if executor == "ray":
        import ray

        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    t0 = time.perf_counter()
    source = source_options(str(folder), tokenizer=f"hf:{QWEN3}", workers=workers, executor=executor)
    outcome = run_analyze(
        AnalyzeRequest(
            AnalyzeOptions(source=source, engine="vllm", rag_whatif=False), HeadlineOptions(), AnalyzeOutputs()
        )
    )
    seconds = time.perf_counter() - t0
    analysis = outcome.analysis
    record = analysis.record.to_json()
    record.pop("created", None)
    record["summary"].pop("elapsed_s", None)
    s = analysis.record.summary
    return {
        "seconds": seconds,
        "requests": s.requests,
        "tokens": s.prompt_tokens,
        "record": record,
        "workers": analysis.workers,
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--files", type=int, default=32)
    ap.add_argument("--runs", default="local1,local2,ray1,ray2")
    ap.add_argument("--child", nargs=3)
    args = ap.parse_args()
    if args.child:
        folder, executor, workers = args.child
        res = child_analyze(Path(folder), executor, int(workers))
        res["driver_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(json.dumps(res))
        return 0
    ensure_qwen3()
    log = pinned_log(args.requests)
    name = log.name
    folder = OUT / f"{name.removesuffix('.jsonl.gz')}-split{args.files}"
    files = split(log, args.files, folder)
    size = sum(f.stat().st_size for f in files)
    results = {}
    for run in args.runs.split(","):
        executor, workers = RUNS[run]
        results[run] = run_child(__file__, str(folder), executor, str(workers))
        print(f"{run}: {results[run]['seconds']:.1f} s", file=sys.stderr)
    print(f"log: {folder} ({len(files)} gzip files, {size / 2**20:,.0f} MiB); cores: {os.cpu_count()}")
    print(
        f"{'run':<8}{'seconds':>9}{'requests':>10}{'Mtok/s':>8}{'driver RSS MB':>15}{'worker RSS MB':>15}"
        f"{'workers':>9}{'busy s':>8}"
    )
    for run, r in results.items():
        ws = list(r["workers"].values())
        worker_rss = f"{max(w['peak_rss_mb'] for w in ws):,.0f}" if ws else "-"
        busy = f"{sum(w['seconds'] for w in ws):,.0f}" if ws else "-"
        print(
            f"{run:<8}{r['seconds']:>9,.1f}{r['requests']:>10,}{r['tokens'] / r['seconds'] / 1e6:>8.2f}"
            f"{r['driver_rss_mb']:>15,.0f}{worker_rss:>15}{len(ws) or 1:>9}{busy:>8}"
        )
    print("busy s: seconds the workers spent reading and rendering files (summed over workers)")
    base = results.get("local1")
    for run, r in results.items():
        if base is not None and run != "local1":
            print(f"{run} vs local1 (speed-up): {base['seconds'] / r['seconds']:.2f}x")
    if "ray1" in results and "ray2" in results:
        print(
            f"ray2 vs ray1 (speed-up per added actor): {results['ray1']['seconds'] / results['ray2']['seconds']:.2f}x"
        )
    records = [json.dumps(r["record"], sort_keys=True) for r in results.values()]
    print(f"records identical across runs: {len(set(records)) == 1}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
