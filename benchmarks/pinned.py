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
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    out = subprocess.run([sys.executable, script, "--child", *args], capture_output=True, text=True, env=env)
    if out.returncode:
        sys.stderr.write(out.stderr[-4000:])
        raise SystemExit(f"child {args} failed ({out.returncode})")
    return json.loads(out.stdout.strip().splitlines()[-1])
