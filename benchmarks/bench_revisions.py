#!/usr/bin/env python3
"""Benchmark: the whole one-process `analyze` of this checkout against an earlier revision of the
code, alternating, in one run.

    python benchmarks/bench_revisions.py REV [--requests 20000] [--rounds 2] [--example]

REV is any git revision (e.g. the commit before a change). Its code is checked out once into
``benchmarks/out/rev-<sha>`` (``git worktree``; reused). Each round runs, in a child process
each, `prefixplan analyze LOG --workers 1 --no-store -q --json OUT -t hf:QWEN3` with this
checkout's code and with REV's (same interpreter and packages, the order alternating between
rounds). Log: the first ``--requests`` requests of the pinned generated log
(`scripts/make_logs.py bench`, seed 7), or the bundled example with ``--example``. Printed: per
code, the CPU seconds of the child (its own and its threads', from getrusage) and prompt
tokens per CPU second (median round), and their ratio; whether the prompt tokens, the
candidates' token ids and the documents-first what-if of both records agree. Not run in CI.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from pinned import OUT, QWEN3, ROOT, ensure_qwen3, log_slice, pinned_log

EXAMPLE = ROOT / "examples" / "agent_log.jsonl.gz"
RUN = "import sys; from prefixplan.cli.app import main; sys.exit(main(sys.argv[1:]))"


def worktree(rev: str) -> Path:
    """REV's code in a worktree of its own (made once)."""
    sha = subprocess.run(["git", "rev-parse", rev], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    folder = OUT / f"rev-{sha[:12]}"
    if not (folder / "prefixplan").is_dir():
        subprocess.run(["git", "worktree", "add", "--detach", str(folder), sha], cwd=ROOT, check=True)
    return folder


def analyze(code: Path, log: Path) -> tuple[float, dict]:
    """CPU seconds of one `analyze` with the package from ``code``, and its record."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = str(code)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "r.json"
        args = ["analyze", str(log), "--workers", "1", "--no-store", "-q", "--json", str(out), "-t", f"hf:{QWEN3}"]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([sys.executable, "-c", RUN, *args], cwd=tmp, env=env, check=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        record = json.loads(out.read_text())
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, record


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("rev")
    ap.add_argument("--requests", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--example", action="store_true", help="the bundled example log instead")
    args = ap.parse_args()
    ensure_qwen3()
    log = EXAMPLE if args.example else log_slice(pinned_log(100_000), args.requests)
    codes = {"this checkout": ROOT, args.rev: worktree(args.rev)}
    cpu: dict[str, list[float]] = {name: [] for name in codes}
    records: dict[str, dict] = {}
    analyze(ROOT, EXAMPLE)  # warm-up: compiled bytecode, page cache
    for r in range(args.rounds):
        order = list(codes) if r % 2 == 0 else list(reversed(codes))
        for name in order:
            seconds, records[name] = analyze(codes[name], log)
            cpu[name].append(seconds)
            print(f"round {r + 1}: {name}: {seconds:.1f} CPU s", file=sys.stderr)
    tokens = {name: rec["summary"]["prompt_tokens"] for name, rec in records.items()}
    same = (
        len(set(tokens.values())) == 1
        and len({json.dumps([c.get("token_ids") for c in rec["candidates"]]) for rec in records.values()}) == 1
        and len({json.dumps(rec["rag"].get("whatif"), sort_keys=True) for rec in records.values()}) == 1
    )
    print(f"log: {log.name}, {next(iter(tokens.values())):,} prompt tokens; {args.rounds} round(s), alternating")
    rates = {}
    for name in codes:
        median = statistics.median(cpu[name])
        rates[name] = tokens[name] / median
        print(
            f"  {name:<16} {rates[name] / 1e6:6.2f} M tokens per CPU s  (CPU s {' / '.join(f'{s:.1f}' for s in cpu[name])})"
        )
    print(
        f"  ratio            {rates['this checkout'] / rates[args.rev]:.2f} x; same tokens, candidates, what-if: {same}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
