#!/usr/bin/env python3
"""Benchmark: render once, reuse everywhere (the block-hash trace), in one run.

    python benchmarks/bench_trace.py [--requests 100000] [--skip-single] [--one-thread] [--pair] [--sweep 1e6,1e7,1e8,1e9]

The log is the pinned generated one (`python scripts/make_logs.py bench`, seed 7; with
`--requests N` the same generator writes N requests to benchmarks/out/bench-N.jsonl.gz); it is
created when missing. Tokenizer: the real Qwen3 (hf:), fetched by scripts/fetch_tokenizers.py.

Figures, each in its own process (peak RSS: the process's max RSS; with workers, the largest
worker's too):
  parse+hash    the parse-and-hash limit: orjson parse of every line and chained block keys
                (pp-prefix-1, the trace's own hashing) over as many uint32 values as the prompt
                has tokens (the message and tool bytes, 4 per value) -- no chat template, no
                tokenizer: what reading (prefixplan's own gzip reader) and hashing alone cost
  analyze w=1   `analyze` in one process (no documents-first what-if), writing the trace; the
                tokenizer's own thread pool still encodes a batch's new pieces on every core
  analyze 1thr  (--one-thread) the same with TOKENIZERS_PARALLELISM=false: one core
  analyze w=2   the same with --workers 2
  pair          (--pair) what this machine gives two independent processes now: `analyze` of
                the log's first 10,000 requests on one thread, alone and then two copies side by
                side; 2 x alone / side by side is the most two workers can give over one core
                (shared or hyper-threaded cores give less than 2)
  sim log       `simulate` from the log: a capacity sweep (--policies, default LRU; renders again)
  sim trace     the same sweep from the trace written by `analyze w=1` (no tokenizer)
Ratios: analyze w=1 vs parse+hash, w=2 vs w=1 (and vs 1thr), sim trace vs sim log. Not run
in CI.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path

from pinned import OUT, QWEN3, ensure_qwen3, log_slice, pinned_log, run_child, run_children


def child_parse_hash(log: Path) -> dict:
    import numpy as np
    import orjson

    from prefixplan.trace.blockhash import BlockHasher, namespace_seed

    seed = namespace_seed("bench")
    hasher = BlockHasher()
    t0 = time.perf_counter()
    n = values = 0
    from prefixplan.logs.open import iter_lines, open_log

    with open_log(str(log)) as fh:
        for raw in iter_lines(fh, 1 << 26):
            req = orjson.loads(raw.data)["request"]
            parts = [orjson.dumps(req.get("tools") or [])]
            for m in req["messages"]:
                c = m.get("content")
                parts.append(c.encode() if isinstance(c, str) else orjson.dumps(c))
            raw = b"".join(parts)
            raw += b"\0" * (-len(raw) % 4)
            ids = np.frombuffer(raw, dtype=np.uint32)
            hasher.block_keys(ids, seed, 16)
            n += 1
            values += ids.size
    return {"seconds": time.perf_counter() - t0, "requests": n, "tokens": values}


def child_analyze(log: Path, workers: int, trace: Path | None) -> dict:
    from prefixplan.analysis.options import AnalyzeOptions
    from prefixplan.api import AnalyzeOutputs, AnalyzeRequest, HeadlineOptions, run_analyze, source_options
    from prefixplan.trace.executors import Executor

    t0 = time.perf_counter()
    source = source_options(str(log), tokenizer=f"hf:{QWEN3}")
    outcome = run_analyze(
        AnalyzeRequest(
            AnalyzeOptions(source=source, executor=Executor(workers=workers), engine="vllm", rag_whatif=False),
            HeadlineOptions(),
            AnalyzeOutputs(trace_out=str(trace) if trace else None),
        )
    )
    s = outcome.analysis.record.summary
    me = f":{os.getpid()}"  # this process renders too: its entry is the parent's, not a worker's
    workers = {k: w for k, w in (outcome.analysis.workers or {}).items() if not k.endswith(me)}
    return {
        # each worker's own peak (RUSAGE_CHILDREN would also count a child forked at the
        # parent's peak, e.g. the git call that stamps the record)
        "worker_peak_rss_mb": max((w["peak_rss_mb"] for w in workers.values()), default=0.0),
        "seconds": time.perf_counter() - t0,
        "requests": s.requests,
        "tokens": s.prompt_tokens,
        "hit_rate_tokens": s.hit_rate_tokens,
        "candidates": s.candidates,
    }


def child_simulate(inputs: Path, sweep: str, policies: str) -> dict:
    from prefixplan.api import simulate, simulation_config

    t0 = time.perf_counter()
    config = simulation_config(capacity=sweep, policy=policies)
    sim = simulate(str(inputs), config, tokenizer=f"hf:{QWEN3}", workers=1)
    res = sim.result
    return {
        "seconds": time.perf_counter() - t0,
        "requests": res.n_requests,
        "tokens": res.prompt_tokens,
        "hit_rates": [round(r.hit_rate_tokens, 6) for r in res.runs],
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--sweep", default="1e6,3e6,1e7,3e7,1e8")
    ap.add_argument("--policies", default="lru", help="policies of the sweep (lru: one stack-distance pass)")
    ap.add_argument("--skip-single", action="store_true", help="skip analyze w=1 (long on 1M requests)")
    ap.add_argument("--skip-sim-log", action="store_true", help="skip simulate from the log")
    ap.add_argument("--skip-parse", action="store_true", help="skip the parse-and-hash limit")
    ap.add_argument("--one-thread", action="store_true", help="also analyze w=1 with the tokenizer on one thread")
    ap.add_argument(
        "--pair", action="store_true", help="also time two one-thread runs side by side (the box's own scaling)"
    )
    ap.add_argument("--child")
    ap.add_argument("args", nargs="*")
    args = ap.parse_args()
    if args.child:
        a = args.args
        fn = {
            "parsehash": lambda: child_parse_hash(Path(a[0])),
            "analyze": lambda: child_analyze(Path(a[0]), int(a[1]), Path(a[2]) if a[2] != "-" else None),
            "simulate": lambda: child_simulate(Path(a[0]), a[1], a[2]),
        }[args.child]
        res = fn()
        res["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(json.dumps(res))
        return 0
    ensure_qwen3()
    log = pinned_log(args.requests)
    name = log.name
    trace = OUT / (name.removesuffix(".jsonl.gz") + ".trace.parquet")
    results: dict[str, dict] = {} if args.skip_parse else {"parse+hash": run_child(__file__, "parsehash", str(log))}
    if not args.skip_single:
        results["analyze w=1"] = run_child(__file__, "analyze", str(log), "1", str(trace))
    if args.one_thread:
        os.environ["TOKENIZERS_PARALLELISM"] = "false"
        results["analyze 1thr"] = run_child(__file__, "analyze", str(log), "1", "-")
        del os.environ["TOKENIZERS_PARALLELISM"]
    results["analyze w=2"] = run_child(__file__, "analyze", str(log), "2", "-" if not args.skip_single else str(trace))
    pair: tuple[float, float] | None = None
    if args.pair:
        part = log_slice(log, 10_000)
        os.environ["TOKENIZERS_PARALLELISM"] = "false"
        alone_s = run_child(__file__, "analyze", str(part), "1", "-")["seconds"]
        side_by_side = run_children(__file__, [("analyze", str(part), "1", "-")] * 2)
        del os.environ["TOKENIZERS_PARALLELISM"]
        pair = (alone_s, max(r["seconds"] for r in side_by_side))
    if not args.skip_sim_log:
        results["sim log"] = run_child(__file__, "simulate", str(log), args.sweep, args.policies)
    results["sim trace"] = run_child(__file__, "simulate", str(trace), args.sweep, args.policies)
    print(f"log: {log}  ({log.stat().st_size / 2**20:,.0f} MiB gzip)  trace: {trace.stat().st_size / 2**20:,.0f} MiB")
    print(f"{'run':<14}{'seconds':>10}{'requests':>11}{'Mtok/s':>9}{'RSS MB':>9}{'worker RSS':>12}")
    for k, r in results.items():
        kids = f"{r['worker_peak_rss_mb']:,.0f}" if r.get("worker_peak_rss_mb") else "-"
        print(
            f"{k:<14}{r['seconds']:>10,.1f}{r['requests']:>11,}{r['tokens'] / r['seconds'] / 1e6:>9.2f}"
            f"{r['peak_rss_mb']:>9,.0f}{kids:>12}"
        )

    def ratio(a: str, b: str, what: str) -> None:
        if a in results and b in results:
            print(f"{what}: {results[b]['seconds'] / results[a]['seconds']:.2f}x")

    ratio("analyze w=2", "analyze w=1", "analyze --workers 2 vs 1 (speed-up)")
    ratio("analyze w=2", "analyze 1thr", "analyze --workers 2 vs 1 on one thread (speed-up)")
    ratio("analyze w=1", "analyze 1thr", "analyze w=1: tokenizer thread pool vs one thread (speed-up)")
    if pair is not None:
        alone, both = pair
        print(
            f"this machine, two one-thread runs (10,000 requests) side by side vs one alone: {alone:.1f} s alone, "
            f"{both:.1f} s side by side: {2 * alone / both:.2f}x the work in the same time"
        )
        if "analyze 1thr" in results:
            w2 = results["analyze 1thr"]["seconds"] / results["analyze w=2"]["seconds"]
            print(f"analyze --workers 2 vs one thread, as a share of that: {w2 / (2 * alone / both):.0%}")
    if "analyze w=1" in results and "parse+hash" in results:
        r, p = results["analyze w=1"], results["parse+hash"]
        print(
            f"analyze w=1 throughput vs parse+hash limit: {(r['tokens'] / r['seconds']) / (p['tokens'] / p['seconds']):.1%}"
        )
    ratio("sim trace", "sim log", f"simulate sweep ({args.sweep}; {args.policies}) from trace vs from log (speed-up)")
    if "sim log" in results:
        same = results["sim log"]["hit_rates"] == results["sim trace"]["hit_rates"]
        print(f"hit rates from trace equal those from log: {same}")
    a = [results[k] for k in ("analyze w=1", "analyze 1thr", "analyze w=2") if k in results]
    if a and len({r["hit_rate_tokens"] for r in a}) != 1:
        print("WARNING: analyze results differ between worker counts")
    return 0


if __name__ == "__main__":
    sys.exit(main())
