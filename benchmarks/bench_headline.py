"""Benchmark: the analyze headline simulation, issue 12's section beside the decade sweep it replaced.

Both replay the same synthetic stream (benchmarks/bench_simulate.py's shape: 20 system prompts of
2k-8k tokens, 5 tool sets, multi-turn, RAG chunks) at a configured capacity:

* baseline: LRU at the five decades 1e4 ... 1e8 and the record section of before
  (:func:`prefixplan.simulation.headline.headline_json` of a plain ``Simulation``);
* issue 12: the R10 sweep up to the log's footprint plus ``savings_curve``, ``timeline``, ``ttft``
  and the pinned what-if with the 20 system prompts as candidates.

Prints wall time per phase, the number of swept capacities, the section's JSON size and peak RSS.

    python benchmarks/bench_headline.py            # 100k requests
    python benchmarks/bench_headline.py --n 20000
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time

import numpy as np
from bench_simulate import synthetic

from prefixplan.analysis.record import CandidateRecord
from prefixplan.simulation.config import CacheModel, SimConfig
from prefixplan.simulation.headline import headline_json, headline_simulation
from prefixplan.simulation.simulator import Simulation


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--capacity", type=float, default=1e7, help="the configured capacity (tokens)")
    args = ap.parse_args(argv)

    t0 = time.perf_counter()
    reqs = list(synthetic(args.n))
    print(
        f"stream: {len(reqs):,} requests, {sum(len(r.tokens) for r in reqs):,} tokens ({time.perf_counter() - t0:.1f} s)"
    )
    systems: dict[bytes, np.ndarray] = {}
    for r in reqs:  # the system prompts lead every fresh conversation: the first 2,000 tokens identify one
        systems.setdefault(r.tokens[:2000].tobytes(), r.tokens[:2000])
    cands = [
        CandidateRecord(
            rank=i + 1,
            namespace="bench-model",
            label="system",
            length=2000,
            hits=2,
            reusable_tokens=0,
            marginal_tokens=0,
            tenants=10,
            token_ids=tuple(int(t) for t in toks),
        )
        for i, toks in enumerate(list(systems.values())[:20])
    ]

    rows = []
    for name in ("baseline (5 decades)", "issue 12 (R10 sweep + section)"):
        t = time.perf_counter()
        if name.startswith("baseline"):
            caps = tuple(sorted({1e4, 1e5, 1e6, 1e7, 1e8, args.capacity}))
            sim: Simulation = Simulation(
                SimConfig(cache=CacheModel(capacities=caps), headline_capacity=args.capacity, headline_unbounded=False)
            )
        else:
            sim = headline_simulation(configured_capacity=args.capacity)
        for r in reqs:
            sim.add(r)
        t_add = time.perf_counter() - t
        t = time.perf_counter()
        result = sim.result()
        t_replay = time.perf_counter() - t
        t = time.perf_counter()
        section = (
            headline_json(result, args.capacity) if name.startswith("baseline") else sim.section(args.capacity, cands)  # type: ignore[attr-defined]
        )
        t_section = time.perf_counter() - t
        size = len(json.dumps(section))
        n_caps = len(section["curves"]["lru"])
        rows.append((name, t_add, t_replay, t_section, n_caps, size))
        print(
            f"{name}: trace {t_add:.1f} s, replay {t_replay:.1f} s ({n_caps} LRU capacities), "
            f"section {t_section:.1f} s, JSON {size / 1e3:,.0f} KB"
        )
    base, new = rows
    print(
        f"issue 12 vs baseline: replay {new[2]:.1f} s vs {base[2]:.1f} s, section {new[3]:.1f} s vs {base[3]:.2f} s, "
        f"total after the trace {new[2] + new[3]:.1f} s vs {base[2] + base[3]:.1f} s"
    )
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:,.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
