"""Benchmark: predicted vs measured TTFT on a live vLLM (the CPU build and the tiny Qwen3 model).

Starts a vLLM server (``scripts/vllm_server.py``; needs ``.venv-vllm`` and ``.cache/tiny-qwen3``),
calibrates a prefill profile on it (``prefixplan calibrate``'s measurement), then sends a workload at
low concurrency -- ``--requests`` token-id prompts made of one of a few shared system prefixes and a
unique tail, at Poisson arrival times (``--rate`` a second), streamed, each timed to its first token
-- and replays the same requests, at the times they were sent, through ``simulate``'s model of TTFT
under load (``--rate-scale 1``) with the calibrated profile. Prints measured and predicted TTFT
p50 / p95 and the cached tokens the server reported against the simulated hits. A figure, not a test:
CPU timings vary with what else the machine runs.

    python benchmarks/bench_ttft_live.py                     # 60 requests at 1.5 a second
    python benchmarks/bench_ttft_live.py --requests 120 --rate 3
    python benchmarks/bench_ttft_live.py --url http://127.0.0.1:8011   # a server already running
"""

from __future__ import annotations

import argparse
import random
import sys
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def workload(n: int, rate: float, seed: int, pool: list[int]) -> list[tuple[float, list[int], int]]:
    """``(arrival offset s, token ids, max_tokens)``: 4 shared prefixes of 512-1,536 ids, tails of 32-384."""
    rng = random.Random(seed)
    prefixes = [[rng.choice(pool) for _ in range(size)] for size in (512, 768, 1024, 1536)]
    out, t = [], 0.0
    for _ in range(n):
        t += rng.expovariate(rate)
        tail = [rng.choice(pool) for _ in range(rng.randint(32, 384))]
        out.append((t, rng.choice(prefixes) + tail, rng.randint(4, 24)))
    return out


def send_all(adapter, jobs: list[tuple[float, list[int], int]]) -> list[dict]:
    """Send each job at its arrival time on its own thread; return sent time, TTFT, cached, output."""
    results: list[dict] = [{} for _ in jobs]
    start = time.monotonic() + 0.5

    def one(i: int, at: float, ids: list[int], max_tokens: int) -> None:
        time.sleep(max(0.0, start + at - time.monotonic()))
        sent = time.monotonic() - start
        res = adapter.complete_ids(ids, max_tokens=max_tokens, stream=True)
        results[i] = {
            "sent": sent,
            "ttft": res.ttft_s,
            "cached": res.cached_tokens or 0,
            "output": res.completion_tokens or max_tokens,
        }

    threads = [threading.Thread(target=one, args=(i, *job)) for i, job in enumerate(jobs)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return results


def predict(jobs, results, profile, block_size: int, budget: int, seqs: int):
    """The model's TTFTs for the same requests at the times they were sent."""
    from prefixplan.simulation import CacheModel, SimConfig, SimRequest, replay_requests
    from prefixplan.simulation.config import SavingsModel
    from prefixplan.simulation.load import LoadModel

    reqs = [
        SimRequest(
            time=r["sent"], namespace="m", tokens=np.asarray(ids, dtype=np.uint32), output_len=r["output"], index=i
        )
        for i, ((_, ids, _), r) in enumerate(zip(jobs, results, strict=True))
    ]
    config = SimConfig(
        cache=CacheModel(engine="custom", block_size=block_size),
        savings=SavingsModel(profile=profile),
        load=LoadModel(rate_scale=1.0, max_num_batched_tokens=budget, max_num_seqs=seqs),
    )
    return replay_requests(reqs, config)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", default=None, help="a running server (default: start one)")
    ap.add_argument("--requests", type=int, default=60)
    ap.add_argument("--rate", type=float, default=1.5, help="requests a second")
    ap.add_argument("--seed", type=int, default=39)
    ap.add_argument("--repeats", type=int, default=4, help="calibration repeats of each (length, fraction)")
    ap.add_argument("--budget", type=int, default=2048, help="vLLM CPU's serve max_num_batched_tokens (one worker)")
    ap.add_argument("--seqs", type=int, default=128, help="vLLM CPU's serve max_num_seqs (one worker)")
    args = ap.parse_args(argv)

    from prefixplan.engines.detect import connect
    from prefixplan.engines.endpoint import Endpoint
    from prefixplan.savings.prefill import percentiles
    from prefixplan.warming.calibrate import calibrate

    proc_pid = None
    url = args.url
    if url is None:
        sys.path.insert(0, str(ROOT / "scripts"))
        import vllm_server

        info, proc = vllm_server.start()
        proc_pid, url = proc.pid, info.url
        print(f"vLLM started at {url} in {info.startup_s} s (block size {info.block_size})")
    try:
        adapter = connect(Endpoint(url=url), timeout=120.0)
        server = adapter.server_info()
        t0 = time.monotonic()
        fitted = calibrate(
            adapter, lengths=(256, 512, 1024, 2048), fractions=(0.0, 0.5, 0.9), repeats=args.repeats, seed=1
        )
        profile = fitted.prefill_profile("live-calibrated")
        f = fitted.fit
        print(
            f"calibrated in {time.monotonic() - t0:.0f} s: a={f.a_s:.4g} s, b={f.b_s_per_token:.3g} s/token, "
            f"c={f.c_s_per_token2:.3g} s/token², r² {f.r2:.3f}, {f.n_samples} samples"
        )
        text = (
            "prefix caching benchmark: engines, caches, prefixes, tokens, blocks, replicas, latency 0 1 2 3 4 5 6 7 8 9"
        )
        pool = sorted(set(adapter.tokenize_text(text * 4) or [])) or list(range(1000, 5000))
        jobs = workload(args.requests, args.rate, args.seed, pool)
        results = send_all(adapter, jobs)
        adapter.close()
    finally:
        if proc_pid is not None:
            vllm_server.stop_process(proc_pid)
    res = predict(jobs, results, profile, server.block_size or 16, args.budget, args.seqs)
    measured = percentiles(np.array([r["ttft"] for r in results]))
    assert res.load is not None
    row = res.load.rows[0]
    head = res.run(res.headline)
    print(f"{args.requests} requests at {args.rate:g}/s, {sum(len(ids) for _, ids, _ in jobs):,} prompt tokens")
    print(f"cached tokens: server {sum(r['cached'] for r in results):,}, model {head.hit_tokens:,}")
    print(f"TTFT p50 / p95 measured : {measured[0] * 1000:7.1f} / {measured[1] * 1000:7.1f} ms")
    print(
        f"TTFT p50 / p95 predicted: {row.with_cache[0] * 1000:7.1f} / {row.with_cache[1] * 1000:7.1f} ms (under load)"
    )
    assert res.savings is not None
    print(
        f"TTFT p50 / p95 prefill only: {res.savings.ttft_with[0] * 1000:7.1f} / "
        f"{res.savings.ttft_with[1] * 1000:7.1f} ms; predicted / measured p50 {row.with_cache[0] / measured[0]:.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
