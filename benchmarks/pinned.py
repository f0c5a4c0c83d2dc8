"""What the trace and scale benchmarks share: the pinned generated log, the real Qwen3 tokenizer,
and running one figure in a child process (its own peak RSS)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "out"
QWEN3 = Path(os.environ.get("PREFIXPLAN_QWEN3_DIR", ROOT / ".cache" / "tokenizers" / "qwen3"))


def ensure_qwen3() -> None:
    """Fetch the Qwen3 tokenizer (scripts/fetch_tokenizers.py) when it is not there."""
    if not (QWEN3 / "tokenizer.json").is_file():
        subprocess.run([sys.executable, str(ROOT / "scripts" / "fetch_tokenizers.py"), "qwen3"], check=True)


def pinned_log(requests: int) -> Path:
    """The pinned benchmark log of ``requests`` requests (`scripts/make_logs.py bench`, seed 7),
    written when missing."""
    name = "bench.jsonl.gz" if requests == 100_000 else f"bench-{requests}.jsonl.gz"
    log = OUT / name
    if not log.is_file():
        cmd = [sys.executable, str(ROOT / "scripts" / "make_logs.py"), "bench", "--out", str(log)]
        subprocess.run(cmd + ["--requests", str(requests)], check=True)
    return log


def run_child(script: str, *args: str) -> dict:
    """Run ``script --child ARGS`` and return the JSON object its last output line holds. The
    child keeps compiled bytecode even where PYTHONDONTWRITEBYTECODE is set (else each process,
    and each render worker, compiles transformers from source again: seconds per process)."""
    return run_children(script, [args])[0]


def run_children(script: str, arg_sets: list[tuple[str, ...]]) -> list[dict]:
    """:func:`run_child` for each of ``arg_sets``, all at once (side by side); their results in
    that order."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    procs = [
        subprocess.Popen(
            [sys.executable, script, "--child", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for args in arg_sets
    ]
    results = []
    for args, proc in zip(arg_sets, procs, strict=True):
        stdout, stderr = proc.communicate()
        if proc.returncode:
            sys.stderr.write(stderr[-4000:])
            raise SystemExit(f"child {args} failed ({proc.returncode})")
        results.append(json.loads(stdout.strip().splitlines()[-1]))
    return results


def log_slice(log: Path, lines: int) -> Path:
    """The first ``lines`` lines of ``log``, written next to it once (gzip)."""
    out = log.with_name(f"{log.name.removesuffix('.jsonl.gz')}-first{lines}.jsonl.gz")
    if not out.is_file():
        import gzip
        import itertools

        tmp = out.with_suffix(".tmp")
        with gzip.open(log, "rb") as src, gzip.open(tmp, "wb", compresslevel=6) as dst:
            dst.writelines(itertools.islice(src, lines))
        tmp.replace(out)
    return out
