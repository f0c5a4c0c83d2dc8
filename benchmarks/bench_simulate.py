"""Benchmark: simulate on a 100k-request agent/RAG log at block size 16.

Runs the trace build, the infinite cache, in-batch sharing (generation a) and LRU at
8 capacities, and prints wall time per phase and peak RSS. Not part of CI.

    python benchmarks/bench_simulate.py            # 100k synthetic requests
    python benchmarks/bench_simulate.py --n 20000  # smaller
    # the pinned analyze benchmark log (python scripts/make_logs.py bench), read and
    # rendered exactly as `prefixplan simulate` does
    python benchmarks/bench_simulate.py --log benchmarks/out/bench.jsonl.gz \
        --tokenizer hf:.cache/tokenizers/qwen3

The synthetic stream has the shape of the analyze benchmark log: 20 system prompts of
2k-8k tokens, 5 tool sets, 30% multi-turn continuations, 40% of requests with 3 RAG
chunks, user text of 50-800 tokens. With --log the time spent reading and rendering the
log is measured apart from the simulation (the trace build consumes the stream). The
chain-compressed LFU/FIFO/priority simulator runs at one capacity (--other-capacity).
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from collections.abc import Iterator

import numpy as np

from prefixplan.trace.requests import SimRequest


def synthetic(n: int = 100_000, seed: int = 7) -> Iterator[SimRequest]:
    """Yield ``n`` requests: [system][tools][history][rag chunks][user]."""
    rng = np.random.default_rng(seed)
    vocab = 150_000

    def toks(k: int) -> np.ndarray:
        return rng.integers(0, vocab, size=int(k), dtype=np.uint32)

    systems = [toks(rng.integers(2000, 8001)) for _ in range(20)]
    toolsets = [toks(rng.integers(300, 1500)) for _ in range(5)]
    chunks = [toks(rng.integers(150, 400)) for _ in range(3000)]
    convs: list[np.ndarray] = []
    t = 0.0
    for i in range(n):
        t += float(rng.exponential(0.5))
        if convs and rng.random() < 0.3:
            j = int(rng.integers(0, len(convs)))
            prompt = np.concatenate([convs[j], toks(rng.integers(50, 300)), toks(rng.integers(50, 800))])
            if prompt.shape[0] > 24_000:
                convs.pop(j)
            else:
                convs[j] = prompt
        else:
            parts = [systems[int(rng.integers(0, 20))], toolsets[int(rng.integers(0, 5))]]
            if rng.random() < 0.4:
                parts += [chunks[int(k)] for k in rng.integers(0, len(chunks), size=3)]
            parts.append(toks(rng.integers(50, 801)))
            prompt = np.concatenate(parts)
            convs.append(prompt)
            if len(convs) > 2000:
                convs.pop(0)
        yield SimRequest(time=t, namespace="bench-model", tokens=prompt, output_len=int(rng.integers(50, 400)), index=i)


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--log", help="replay this log (read + rendered like prefixplan simulate) instead")
    ap.add_argument("--tokenizer", default=None, help="tokenizer spec for --log (default: prefixplan's)")
    ap.add_argument("--other-capacity", type=float, default=1e7, help="capacity of the LFU/FIFO/priority runs")
    ap.add_argument("--auto-promote", action="store_true", help="also time auto-promotion (block-level, slow)")
    args = ap.parse_args(argv)
    if args.log:
        return replay_log(args)

    from prefixplan.core.granularity import engine_granularity
    from prefixplan.simulation.batch import in_batch_hits, service_times
    from prefixplan.simulation.models import run_model
    from prefixplan.simulation.spec import CacheSpec
    from prefixplan.trace.blocks import build_trace
    from prefixplan.trace.nodes import build_tree

    g0 = time.perf_counter()
    prompt_tokens = sum(int(r.tokens.shape[0]) for r in synthetic(args.n))  # generation alone
    gen_s = time.perf_counter() - g0
    gen_rss = peak_rss_mb()
    t0 = time.perf_counter()
    trace = build_trace(synthetic(args.n), engine_granularity("vllm", args.block_size))  # streamed
    t1 = time.perf_counter() - gen_s  # generation time subtracted
    inf = run_model(trace, CacheSpec(policy="infinite"))
    tree = build_tree(trace)
    batch = in_batch_hits(trace, tree, service_times(trace))
    t2 = time.perf_counter() - gen_s
    caps = [1e5, 3e5, 1e6, 3e6, 1e7, 3e7, 1e8, 3e8]
    stack: dict = {}
    rates = []
    for cap in caps:
        out = run_model(trace, CacheSpec(policy="lru", capacity_tokens=cap), _stack_cache=stack)
        rates.append(float((out.hit_blocks * trace.block_tokens).sum()) / prompt_tokens)
    t3 = time.perf_counter() - gen_s
    bt = trace.block_tokens
    print(
        f"requests {trace.n_requests:,}  prompt tokens {prompt_tokens:,}  distinct blocks {trace.n_distinct_blocks:,}"
        f"  tree nodes {tree.n_nodes:,}"
    )
    print(f"input generation {gen_s:7.2f} s (not counted)")
    print(f"trace build      {t1 - t0:7.2f} s")
    print(
        f"infinite+batch   {t2 - t1:7.2f} s   infinite {float((inf.hit_blocks * bt).sum()) / prompt_tokens:.3f}"
        f"  in-batch {float((batch * bt).sum()) / prompt_tokens:.3f}"
    )
    print(
        f"LRU x{len(caps)}          {t3 - t2:7.2f} s   "
        + "  ".join(f"{c:.0e}:{r:.3f}" for c, r in zip(caps, rates, strict=False))
    )
    print(f"total            {t3 - t0:7.2f} s   peak RSS {peak_rss_mb():.0f} MB (generator alone: {gen_rss:.0f} MB)")
    return 0


class _Timed:
    """Iterator wrapper that adds up the time spent producing items."""

    def __init__(self, it, progress: int = 0) -> None:
        self.it = iter(it)
        self.progress = progress
        self.seconds = 0.0
        self.count = 0

    def __iter__(self):
        return self

    def __next__(self):
        t = time.perf_counter()
        try:
            item = next(self.it)
        finally:
            self.seconds += time.perf_counter() - t
        self.count += 1
        if self.progress and self.count % self.progress == 0:
            print(
                f"  ... {self.count:,} requests, read + render {self.seconds:.1f} s, peak RSS {peak_rss_mb():.0f} MB",
                file=sys.stderr,
                flush=True,
            )
        return item


def replay_log(args) -> int:
    """Read + render ``args.log`` and simulate: infinite, in-batch, LRU at 8 capacities."""
    from prefixplan.api import source_options
    from prefixplan.core.granularity import engine_granularity
    from prefixplan.simulation.batch import in_batch_hits, service_times
    from prefixplan.simulation.models import run_model
    from prefixplan.simulation.spec import AutoPromote, CacheSpec
    from prefixplan.trace.blocks import build_trace
    from prefixplan.trace.executors import Executor
    from prefixplan.trace.intake import Intake, IntakePlan
    from prefixplan.trace.nodes import build_tree
    from prefixplan.trace.requests import request_of_row

    source = source_options(args.log, tokenizer=args.tokenizer)
    t0 = time.perf_counter()
    intake = Intake(IntakePlan(source, Executor(workers=1), args.block_size))
    errors = intake.errors
    rendered = intake.rows()
    stream = _Timed((request_of_row(row) for row in rendered), progress=10_000)
    trace = build_trace(stream, engine_granularity("vllm", args.block_size))
    t1 = time.perf_counter()
    read_s = stream.seconds
    prompt_tokens = int(trace.prompt_tokens.sum())
    bt = trace.block_tokens
    inf = run_model(trace, CacheSpec(policy="infinite"))
    tree = build_tree(trace)
    batch = in_batch_hits(trace, tree, service_times(trace))
    t2 = time.perf_counter()
    caps = [1e5, 3e5, 1e6, 3e6, 1e7, 3e7, 1e8, 3e8]
    stack: dict = {}
    rates = []
    for cap in caps:
        out = run_model(trace, CacheSpec(policy="lru", capacity_tokens=cap), _stack_cache=stack)
        rates.append(float((out.hit_blocks * bt).sum()) / prompt_tokens)
    t3 = time.perf_counter()
    main_rss = peak_rss_mb()
    others = []
    for pol in ("lfu", "fifo", "priority"):
        s = time.perf_counter()
        out = run_model(trace, CacheSpec(policy=pol, capacity_tokens=args.other_capacity))
        others.append((pol, time.perf_counter() - s, float((out.hit_blocks * bt).sum()) / prompt_tokens))
    if args.auto_promote:
        s = time.perf_counter()
        out = run_model(trace, CacheSpec("lru", args.other_capacity, pinned_fraction=0.2, auto_promote=AutoPromote()))
        others.append(
            ("lru+auto-promote 20%", time.perf_counter() - s, float((out.hit_blocks * bt).sum()) / prompt_tokens)
        )
    touches = int(trace.n_blocks.sum())
    print(f"log {args.log}  tokenizer {args.tokenizer or 'default'}  block {args.block_size}")
    print(
        f"requests {trace.n_requests:,} (line errors {errors.count})  prompt tokens {prompt_tokens:,}  "
        f"block touches {touches:,}  distinct blocks {trace.n_distinct_blocks:,}  tree nodes {tree.n_nodes:,}"
    )
    print(f"read + render    {read_s:7.2f} s")
    print(f"trace build      {t1 - t0 - read_s:7.2f} s")
    print(
        f"infinite+batch   {t2 - t1:7.2f} s   infinite {float((inf.hit_blocks * bt).sum()) / prompt_tokens:.3f}"
        f"  in-batch {float((batch * bt).sum()) / prompt_tokens:.3f}"
    )
    print(
        f"LRU x{len(caps)}          {t3 - t2:7.2f} s   "
        + "  ".join(f"{c:.0e}:{r:.3f}" for c, r in zip(caps, rates, strict=False))
    )
    print(
        f"simulation       {t3 - t0 - read_s:7.2f} s (trace build + infinite + in-batch + LRU x{len(caps)})"
        f"   peak RSS so far {main_rss:.0f} MB"
    )
    for pol, secs, rate in others:
        print(f"{pol:<16} {secs:7.2f} s   at {args.other_capacity:.0e}: {rate:.3f}")
    print(
        f"total            {t3 - t0:7.2f} s (+ {sum(o[1] for o in others):.2f} s other policies)   "
        f"peak RSS {peak_rss_mb():.0f} MB"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
