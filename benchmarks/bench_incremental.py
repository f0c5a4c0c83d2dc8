#!/usr/bin/env python3
"""Benchmark: incremental encoding vs the earlier path, alternating, in one process.

    python benchmarks/bench_incremental.py [--requests 2000] [--rounds 3] [--tokenizers mistral:nemo,qwen3]
    python benchmarks/bench_incremental.py --analyze [--requests 100000] [--rounds 1] [--tokenizers qwen3]

Logs: the bundled example (examples/agent_log.jsonl.gz, 400 requests) and the first
``--requests`` requests of the pinned generated log (`python scripts/make_logs.py bench`, 100k
requests, seed 7; written when missing; its prefix is cut once into benchmarks/out/). Tokenizers:
the default ``mistral:nemo`` (shipped in mistral-common) and the real Qwen3 (``hf:``, fetched by
scripts/fetch_tokenizers.py; skipped when absent).

Per log and tokenizer, each round renders every request (chat template + tokenizer + spans,
``render_many`` in batches of 256, one thread: ``RAYON_NUM_THREADS=1``) once with the earlier
path (``incremental=False``) and once with the incremental one, each with a fresh renderer, the
order alternating between rounds. Printed: tokens per CPU second (the process's CPU time: one
core) for each (the median round), their ratio, the split of each path's time into template
(``apply_chat_template``; for mistral-common, building and validating the request and
assembling the prompt), tokenizer (encoding text) and rest (offsets, spans, the rest of the
renderer), the requests the new path encoded incrementally vs in full, whether both paths gave
the same ids, and read+parse (the same requests read and parsed from the log, no rendering) in
tokens per CPU second: how far rendering still is from only reading.

``--analyze``: the whole one-process command instead (``prefixplan.api.analyze(..., workers=1)``
with its defaults: the documents-first what-if pass and the simulation headline), old and new
alternating (``PREFIXPLAN_INCREMENTAL=0``/``1``), after one unmeasured warm-up run (imports):
prompt tokens per CPU second of the process and its children. With ``--profile``, one more
new-path run under cProfile prints where the command's time goes (shares of the profiled
time, which inflates Python-heavy parts): chat template, encoding, spans, reading and parsing,
loading the tokenizer, and the documents-first what-if pass (its own rendering included).
Not run in CI.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pinned import QWEN3, ROOT, log_slice, pinned_log

EXAMPLE = ROOT / "examples" / "agent_log.jsonl.gz"
BATCH = 256


def read_requests(log: Path) -> tuple[list[Any], float]:
    """The requests of ``log`` and the CPU seconds reading and parsing them took."""
    from prefixplan.logs import LineErrors, ReadOptions, iter_requests

    t0 = time.process_time()
    requests = list(iter_requests([str(log)], ReadOptions(), LineErrors()))
    return requests, time.process_time() - t0


def make_renderer(tokenizer: str, incremental: bool) -> Any:
    if tokenizer == "qwen3":
        from prefixplan.render.hf import HFRenderer

        return HFRenderer(QWEN3, incremental=incremental)
    from prefixplan.render.mistral import MistralRenderer

    return MistralRenderer(tokenizer.partition(":")[2] or "nemo", incremental=incremental)


class Clock:
    """CPU seconds spent inside wrapped methods (outermost calls only)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._depth = 0

    def wrap(self, owner: Any, name: str, key: str) -> None:
        inner: Callable[..., Any] = getattr(owner, name)

        def timed(*args: Any, **kwargs: Any) -> Any:
            if self._depth:
                return inner(*args, **kwargs)
            self._depth += 1
            t0 = time.process_time()
            try:
                return inner(*args, **kwargs)
            finally:
                self.seconds[key] = self.seconds.get(key, 0.0) + time.process_time() - t0
                self._depth -= 1

        setattr(owner, name, timed)


def instrument(renderer: Any, tokenizer: str) -> tuple[Clock, Clock]:
    """Clocks for the template and the tokenizer inside ``renderer`` (see the module docstring)."""
    template, encode = Clock(), Clock()
    if tokenizer == "qwen3":
        template.wrap(renderer, "_render_texts", "template")
        encode.wrap(renderer.encoder, "encode", "tokenizer")
    else:
        template.wrap(renderer.tokenizer, "encode_chat_completion", "template")
        encode.wrap(renderer.tokenizer.instruct_tokenizer.tokenizer, "encode", "tokenizer")
    return template, encode


def measure(requests: list[Any], tokenizer: str, incremental: bool) -> dict[str, Any]:
    renderer = make_renderer(tokenizer, incremental)
    template, encode = instrument(renderer, tokenizer)
    gc.collect()
    digest = hashlib.sha256()
    tokens = 0
    wall = time.perf_counter()
    t0 = time.process_time()
    for i in range(0, len(requests), BATCH):
        for prompt in renderer.render_many(requests[i : i + BATCH]):
            tokens += len(prompt.tokens)
            digest.update(prompt.tokens.tobytes())
    cpu = time.process_time() - t0
    wall = time.perf_counter() - wall
    tmpl = template.seconds.get("template", 0.0)
    tok = encode.seconds.get("tokenizer", 0.0)
    if tokenizer != "qwen3":
        tmpl -= tok  # mistral-common encodes inside its request assembly
    return {
        "cpu": cpu,
        "wall": wall,
        "tokens": tokens,
        "template": tmpl,
        "tokenizer": tok,
        "rest": cpu - tmpl - tok,
        "digest": digest.hexdigest(),
        "stats": renderer.encode_stats(),
    }


def split(run: dict[str, Any]) -> str:
    parts = (f"{k} {run[k]:.2f}s ({100 * run[k] / run['cpu']:.0f}%)" for k in ("template", "tokenizer", "rest"))
    return ", ".join(parts)


def bench(label: str, log: Path, tokenizer: str, rounds: int) -> dict[str, Any]:
    requests, parse = read_requests(log)
    runs: dict[bool, list[dict[str, Any]]] = {False: [], True: []}
    for r in range(rounds):
        for incremental in (True, False) if r % 2 else (False, True):
            runs[incremental].append(measure(requests, tokenizer, incremental))
    old = sorted(runs[False], key=lambda x: x["cpu"])[len(runs[False]) // 2]
    new = sorted(runs[True], key=lambda x: x["cpu"])[len(runs[True]) // 2]
    same = {x["digest"] for x in runs[False] + runs[True]}
    rate_old = old["tokens"] / old["cpu"] / 1e6
    rate_new = new["tokens"] / new["cpu"] / 1e6
    rate_parse = new["tokens"] / parse / 1e6
    print(f"\n{label} -- {tokenizer}: {len(requests):,} requests, {new['tokens']:,} tokens, {rounds} rounds")
    print(f"  old path   {rate_old:7.2f} M tokens/s per core   {split(old)}")
    print(f"  new path   {rate_new:7.2f} M tokens/s per core   {split(new)}")
    ratios = [o["cpu"] / n["cpu"] for o, n in zip(runs[False], runs[True], strict=True)]
    shown = ", ".join(f"{x:.2f}" for x in ratios)
    print(f"  ratio      {rate_new / rate_old:7.2f} x (median rounds; each round: {shown})")
    print(f"  new path   encode_stats {new['stats']}; ids equal to the old path: {'yes' if len(same) == 1 else 'NO'}")
    print(f"  read+parse {rate_parse:7.2f} M tokens/s per core (the new path is {rate_parse / rate_new:.1f}x slower)")
    return {"ratio": rate_new / rate_old, "same": len(same) == 1}


def cpu_seconds() -> float:
    import resource

    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def analyze_once(log: Path, tokenizer: str, incremental: bool) -> tuple[float, int, dict[str, int]]:
    """CPU seconds, prompt tokens and encode counts of one ``analyze`` of ``log``."""
    from prefixplan.api import analyze

    spec = f"hf:{QWEN3}" if tokenizer == "qwen3" else tokenizer
    os.environ["PREFIXPLAN_INCREMENTAL"] = "1" if incremental else "0"
    gc.collect()
    t0 = cpu_seconds()
    summary = analyze([str(log)], tokenizer=spec, workers=1).record.summary
    return cpu_seconds() - t0, summary.prompt_tokens, dict(summary.encoded or {})


def bench_analyze(label: str, log: Path, tokenizer: str, rounds: int) -> dict[str, Any]:
    analyze_once(EXAMPLE, tokenizer, True)  # warm-up: imports, compiled templates
    runs: dict[bool, list[float]] = {False: [], True: []}
    tokens = 0
    stats: dict[str, int] = {}
    for r in range(rounds):
        for incremental in (True, False) if r % 2 else (False, True):
            cpu, tokens, encoded = analyze_once(log, tokenizer, incremental)
            runs[incremental].append(cpu)
            stats = encoded if incremental else stats
    old = sorted(runs[False])[len(runs[False]) // 2]
    new = sorted(runs[True])[len(runs[True]) // 2]
    print(f"\nanalyze, {label} -- {tokenizer}: {tokens:,} prompt tokens, {rounds} round(s), workers=1")
    print(f"  old path   {tokens / old / 1e6:7.2f} M tokens/s per core   ({old:.1f} CPU s)")
    print(f"  new path   {tokens / new / 1e6:7.2f} M tokens/s per core   ({new:.1f} CPU s)   encoded {stats}")
    print(f"  ratio      {old / new:7.2f} x (median rounds)")
    return {"ratio": old / new, "same": True}


PROFILE_PARTS = {
    "chat template": ("hf.py", "_render_texts"),
    "encoding": ("hf_encode.py", "encode"),
    "spans": (("spans.py", "locate"), ("spans.py", "assign")),
    "read+parse": ("read.py", "parse_batch"),
    "tokenizer load": ("render/__init__.py", "load_renderer"),
    "what-if pass (all of it)": ("rag.py", "rag_whatif"),
}


def profile_analyze(log: Path, tokenizer: str) -> None:
    """Shares of one profiled new-path analyze of ``log`` (module docstring)."""
    import cProfile
    import pstats

    profiler = cProfile.Profile()
    profiler.runcall(analyze_once, log, tokenizer, True)
    stats: dict[Any, Any] = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    total = max(ct for *_, ct, _ in stats.values())
    print(f"  profile (new path, {total:.1f} s profiled):")
    for label, where in PROFILE_PARTS.items():
        pairs = where if isinstance(where[0], tuple) else (where,)
        seconds = sum(
            v[3] for (path, _, name), v in stats.items() for file, func in pairs if path.endswith(file) and name == func
        )
        print(f"    {label:26s} {seconds:6.2f} s ({100 * seconds / total:4.1f}%)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=2000, help="requests taken from the pinned 100k log")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tokenizers", default="mistral:nemo,qwen3")
    ap.add_argument("--analyze", action="store_true", help="time the whole one-process analyze command")
    ap.add_argument("--profile", action="store_true", help="with --analyze: where a new-path run's time goes")
    args = ap.parse_args()
    os.environ["RAYON_NUM_THREADS"] = "1"  # one core: set before the tokenizers library loads
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    tokenizers = [t for t in args.tokenizers.split(",") if t]
    if "qwen3" in tokenizers and not (QWEN3 / "tokenizer.json").is_file():
        print(f"qwen3: {QWEN3} not found (python scripts/fetch_tokenizers.py qwen3): skipped")
        tokenizers.remove("qwen3")
    full = pinned_log(100_000)
    bench_log = full if args.requests >= 100_000 else log_slice(full, args.requests)
    results = []
    run = bench_analyze if args.analyze else bench
    for label, log in (("bundled example", EXAMPLE), (f"pinned bench log, first {args.requests:,}", bench_log)):
        for tokenizer in tokenizers:
            results.append(run(label, log, tokenizer, args.rounds))
            if args.analyze and args.profile:
                profile_analyze(log, tokenizer)
    print(f"\ntarget >= 2x per core: {'met' if all(r['ratio'] >= 2 for r in results) else 'not met'} on every pair")
    return 0 if all(r["same"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
