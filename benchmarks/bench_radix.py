"""Benchmark the token radix tree on synthetic traffic.

Traffic: ``--n`` prompts, each one of 20 shared prefixes (5 system prompts x 4 tool sets,
2k-8k tokens in all) followed by a unique random tail of 50-800 tokens. Prints insert time,
nodes, arena size and peak RSS, then the same for a naive per-token trie (dict of dicts,
one dict per token) on a ``--baseline-n`` subset, extrapolated linearly to ``--n`` (time and
memory both grow linearly with the number of unique tails). Each phase runs in its own
Python process so the peak RSS figures do not mix.

Usage::

    python benchmarks/bench_radix.py                  # 100k prompts, 5k baseline
    python benchmarks/bench_radix.py --n 20000 --baseline-n 2000
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import time
from collections.abc import Iterator

import numpy as np

from prefixplan.analysis.candidates import find_candidates
from prefixplan.analysis.radix import RadixTree

VOCAB = 151_000


def peak_rss_mib() -> float:
    """Peak resident set size of this process in MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def shared_prefixes(rng: np.random.Generator) -> list[np.ndarray]:
    systems = [rng.integers(0, VOCAB, int(rng.integers(1000, 4001)), dtype=np.uint32) for _ in range(5)]
    out = []
    for s in systems:
        for _ in range(4):
            tools = rng.integers(0, VOCAB, int(rng.integers(1000, 4001)), dtype=np.uint32)
            out.append(np.concatenate([s, tools]))
    return out


def prompts(n: int, seed: int) -> Iterator[np.ndarray]:
    rng = np.random.default_rng(seed)
    prefixes = shared_prefixes(rng)
    for _ in range(n):
        p = prefixes[int(rng.integers(0, len(prefixes)))]
        tail = rng.integers(0, VOCAB, int(rng.integers(50, 801)), dtype=np.uint32)
        yield np.concatenate([p, tail])


def bench_tree(n: int, seed: int) -> float:
    tree = RadixTree()
    total_tokens = 0
    reused = 0
    gen_time = 0.0
    t0 = time.perf_counter()
    it = prompts(n, seed)
    for i in range(n):
        g = time.perf_counter()
        seq = next(it)
        gen_time += time.perf_counter() - g
        total_tokens += seq.shape[0]
        reused += tree.insert(seq, "m", request_index=i, tenant=f"t{i % 50}", time=float(i))
    elapsed = time.perf_counter() - t0 - gen_time
    t1 = time.perf_counter()
    cands = find_candidates(tree, block_size=16)
    cand_time = time.perf_counter() - t1
    print(f"radix tree: {n} prompts, {total_tokens / 1e6:.1f}M tokens")
    print(f"  insert time      {elapsed:.2f} s ({elapsed / n * 1e6:.1f} us/prompt; traffic generation excluded)")
    print(f"  nodes            {tree.n_nodes}")
    allocated = tree.arena_bytes
    peak_build = peak_rss_mib()
    tree.trim()
    print(
        f"  arena            {tree.arena_tokens / 1e6:.2f}M tokens used, {allocated / 2**20:.0f} MiB allocated"
        f" ({tree.arena_bytes / 2**20:.0f} MiB after trim())"
    )
    print(f"  prefix reuse     {reused / total_tokens:.1%} of tokens (infinite cache, token granularity)")
    print(f"  candidates       {len(cands)} at block 16 in {cand_time:.2f} s")
    print(
        f"  peak RSS         {peak_build:.0f} MiB after inserts, {peak_rss_mib():.0f} MiB incl. trim copy"
        " (whole process)"
    )
    return elapsed


def bench_naive(n_sub: int, n: int, seed: int) -> float:
    """Per-token trie: a dict per token position (the layout the tree avoids)."""
    rss0 = peak_rss_mib()
    root: dict = {}
    gen_time = 0.0
    t0 = time.perf_counter()
    it = prompts(n_sub, seed)
    for _ in range(n_sub):
        g = time.perf_counter()
        seq = next(it).tolist()
        gen_time += time.perf_counter() - g
        node = root
        for tok in seq:
            child = node.get(tok)
            if child is None:
                child = node[tok] = {}
            node = child
    elapsed = time.perf_counter() - t0 - gen_time
    est = elapsed * n / n_sub
    print(f"naive dict-of-dicts trie: {n_sub} prompts (subset)")
    print(f"  insert time      {elapsed:.2f} s measured; EXTRAPOLATED to {n}: {est:.1f} s")
    grew = peak_rss_mib() - rss0
    print(
        f"  peak RSS         {peak_rss_mib():.0f} MiB (trie: {grew:.0f} MiB on the subset; "
        f"EXTRAPOLATED to {n}: ~{grew * n / n_sub / 1024:.1f} GiB)"
    )
    return est


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--baseline-n", type=int, default=5_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--phase", choices=["tree", "naive"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.phase == "tree":
        print(f"RESULT {bench_tree(args.n, args.seed)}")
        return
    if args.phase == "naive":
        print(f"RESULT {bench_naive(min(args.baseline_n, args.n), args.n, args.seed)}")
        return
    results = {}
    for phase in ("tree", "naive"):
        cmd = [
            sys.executable,
            __file__,
            "--phase",
            phase,
            "--n",
            str(args.n),
            "--baseline-n",
            str(args.baseline_n),
            "--seed",
            str(args.seed),
        ]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        for line in out.splitlines():
            if line.startswith("RESULT "):
                results[phase] = float(line.split()[1])
            else:
                print(line)
    print(f"speed ratio (naive extrapolated / radix tree): {results['naive'] / results['tree']:.1f}x")


if __name__ == "__main__":
    main()
