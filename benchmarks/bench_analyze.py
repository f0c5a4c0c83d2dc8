#!/usr/bin/env python3
"""Benchmark: end-to-end `analyze` vs per-request chat-template tokenization, in one run.

    python benchmarks/bench_analyze.py [--log benchmarks/out/bench.jsonl.gz] [--sample 2000]

The log is the pinned generated one (`python scripts/make_logs.py bench`: 100k requests, 20
system prompts of 2k-8k tokens, 5 tool sets, 30% multi-turn, 40% with 3 RAG chunks, user text
50-800 tokens); it is created when missing. Tokenizer: the real Qwen3 (hf:), fetched by
scripts/fetch_tokenizers.py.

Figures, each in its own process (peak RSS = that process's max RSS):
  analyze      prefixplan's analyze over the whole log (block 16), with and without the RAG
               what-if second pass
  naive        per request, sequentially: json parse + apply_chat_template(messages,
               tools=tools, add_generation_prompt=True, tokenize=True)  [measured on the first
               --sample requests, extrapolated linearly to the whole log: labelled]
  batch        render every prompt with the template, then the HF fast tokenizer's batch
               encoding (tokenizer(texts) in batches of 256, all cores) [same sampling]
Not run in CI.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
QWEN3 = Path(os.environ.get("PREFIXPLAN_QWEN3_DIR", ROOT / ".cache" / "tokenizers" / "qwen3"))


def _lines(log: Path, n: int | None):
    with gzip.open(log, "rt", encoding="utf-8") as fh:
        for i, line in enumerate(fh):
            if n is not None and i >= n:
                return
            yield line


def child_naive(log: Path, n: int) -> dict:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(QWEN3))
    t0 = time.perf_counter()
    count = tokens = 0
    for line in _lines(log, n):
        req = json.loads(line)["request"]
        ids = tok.apply_chat_template(
            req["messages"], tools=req.get("tools"), add_generation_prompt=True, tokenize=True, return_dict=False
        )
        tokens += len(ids)
        count += 1
    return {"seconds": time.perf_counter() - t0, "requests": count, "tokens": tokens}


def child_batch(log: Path, n: int) -> dict:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(QWEN3))
    t0 = time.perf_counter()
    count = tokens = 0
    texts: list[str] = []

    def flush() -> int:
        enc = tok(texts, add_special_tokens=False)["input_ids"]
        texts.clear()
        return sum(len(e) for e in enc)

    for line in _lines(log, n):
        req = json.loads(line)["request"]
        texts.append(
            tok.apply_chat_template(req["messages"], tools=req.get("tools"), add_generation_prompt=True, tokenize=False)
        )
        count += 1
        if len(texts) == 256:
            tokens += flush()
    if texts:
        tokens += flush()
    return {"seconds": time.perf_counter() - t0, "requests": count, "tokens": tokens}


def child_analyze(log: Path, whatif: bool, record: Path | None) -> dict:
    from prefixplan.api import analyze

    t0 = time.perf_counter()
    result = analyze(str(log), tokenizer=f"hf:{QWEN3}", engine="vllm", rag_whatif=whatif, simulate=False, workers=1)
    doc = result.record.to_json()
    if record is not None:
        record.write_text(json.dumps(doc))
    s = doc["summary"]
    return {
        "seconds": time.perf_counter() - t0,
        "requests": s["requests"],
        "tokens": s["prompt_tokens"],
        "hit_rate_tokens": s["hit_rate_tokens"],
        "candidates": s["candidates"],
    }


def run_child(kind: str, log: Path, arg: str, record: Path | None = None) -> dict:
    cmd = [sys.executable, __file__, "--child", kind, "--log", str(log), "--arg", arg]
    if record is not None:
        cmd += ["--record", str(record)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--log", type=Path, default=ROOT / "benchmarks" / "out" / "bench.jsonl.gz")
    ap.add_argument("--sample", type=int, default=2000)
    ap.add_argument("--child")
    ap.add_argument("--arg", default="")
    ap.add_argument("--record", type=Path, help="also write the plain analysis record here (for bench_report.py)")
    args = ap.parse_args()
    if args.child:
        fn = {
            "naive": lambda: child_naive(args.log, int(args.arg)),
            "batch": lambda: child_batch(args.log, int(args.arg)),
            "analyze": lambda: child_analyze(args.log, args.arg == "whatif", args.record),
        }[args.child]
        res = fn()
        res["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(json.dumps(res))
        return 0
    if not (QWEN3 / "tokenizer.json").is_file():
        subprocess.run([sys.executable, str(ROOT / "scripts" / "fetch_tokenizers.py"), "qwen3"], check=True)
    if not args.log.is_file():
        subprocess.run(
            [sys.executable, str(ROOT / "scripts" / "make_logs.py"), "bench", "--out", str(args.log)], check=True
        )
    results = {
        "analyze": run_child("analyze", args.log, "plain", args.record),
        "analyze+whatif": run_child("analyze", args.log, "whatif"),
        "naive (sampled)": run_child("naive", args.log, str(args.sample)),
        "batch (sampled)": run_child("batch", args.log, str(args.sample)),
    }
    total = results["analyze"]["requests"]
    base = results["analyze"]["seconds"]
    print(f"log: {args.log}  requests: {total:,}  prompt tokens: {results['analyze']['tokens']:,}")
    print(f"{'run':<18}{'seconds (100k)':>16}{'req/s':>10}{'Mtok/s':>9}{'peak RSS MB':>13}{'vs analyze':>12}")
    for name, r in results.items():
        secs = r["seconds"] * (total / r["requests"]) if "sampled" in name else r["seconds"]
        label = f"{secs:,.1f}" + ("*" if "sampled" in name else "")
        print(
            f"{name:<18}{label:>16}{r['requests'] / r['seconds']:>10,.0f}{r['tokens'] / r['seconds'] / 1e6:>9.2f}"
            f"{r['peak_rss_mb']:>13,.0f}{secs / base:>11.1f}x"
        )
    print(f"* measured on the first {args.sample:,} requests and extrapolated linearly to {total:,}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
