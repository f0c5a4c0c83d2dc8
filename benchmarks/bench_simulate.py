"""Benchmark: simulate on a 100k-request agent/RAG log at block size 16.

Runs the trace build, the infinite cache, in-batch sharing (generation a) and LRU at
8 capacities, and prints wall time per phase and peak RSS. Not part of CI.

    python benchmarks/bench_simulate.py            # 100k synthetic requests
    python benchmarks/bench_simulate.py --n 20000  # smaller

The synthetic stream has the shape of the analyze benchmark log: 20 system prompts of
2k-8k tokens, 5 tool sets, 30% multi-turn continuations, 40% of requests with 3 RAG
chunks, user text of 50-800 tokens. When the analyze pipeline can read a pinned log,
pass it with --log to replay the real token ids instead.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from collections.abc import Iterator

import numpy as np

from prefixplan.simulate.trace import SimRequest


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
    args = ap.parse_args(argv)

    from prefixplan.simulate.batch import in_batch_hits, service_times
    from prefixplan.simulate.granularity import engine_granularity
    from prefixplan.simulate.models import CacheSpec, run_model
    from prefixplan.simulate.trace import build_trace
    from prefixplan.simulate.tree import build_tree

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
    print(f"requests {trace.n_requests:,}  prompt tokens {prompt_tokens:,}  distinct blocks {trace.n_distinct_blocks:,}"
          f"  tree nodes {tree.n_nodes:,}")
    print(f"input generation {gen_s:7.2f} s (not counted)")
    print(f"trace build      {t1 - t0:7.2f} s")
    print(f"infinite+batch   {t2 - t1:7.2f} s   infinite {float((inf.hit_blocks * bt).sum()) / prompt_tokens:.3f}"
          f"  in-batch {float((batch * bt).sum()) / prompt_tokens:.3f}")
    print(f"LRU x{len(caps)}          {t3 - t2:7.2f} s   " + "  ".join(f"{c:.0e}:{r:.3f}" for c, r in zip(caps, rates)))
    print(f"total            {t3 - t0:7.2f} s   peak RSS {peak_rss_mb():.0f} MB (generator alone: {gen_rss:.0f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
