"""Fuzz at scale: analyze and simulate on large logs full of malformed lines (not run in CI).

Usage::

    python benchmarks/fuzz_logs.py                    # 100,000 lines per log kind, seed 1
    python benchmarks/fuzz_logs.py --lines 20000 --seed 3

For each log kind (OpenAI chat, Mooncake trace) it writes a log of ``--lines`` lines of which
~35% are planted malformed lines of every shape in tests/fuzzlog.py, plus a clean baseline log
holding only the same good lines. It runs ``prefixplan analyze`` and ``prefixplan simulate``
on both as subprocesses and prints, per run: exit code (70 = crash), bad lines reported vs
planted, requests, wall time and peak RSS, and the fuzzed/clean time ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.fuzzlog import write_fuzz_log  # noqa: E402


def _run(args: list[str]) -> tuple[int, float, float, str]:
    """Exit code, wall seconds, peak RSS (MiB) of one prefixplan subprocess, and its stderr."""
    with tempfile.TemporaryFile("w+") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "prefixplan", *args], stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        return proc.returncode, wall, usage.ru_maxrss / 1024, err.read()


def _clean_copy(src: Path, planted: set[int], dst: Path) -> int:
    kept = 0
    with open(src, "rb") as f, open(dst, "wb") as out:
        for n, line in enumerate(f, 1):
            if n not in planted:
                out.write(line)
                kept += 1
    return kept


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    crashes = 0
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        print(
            f"{'run':<28}{'exit':>5}{'reported':>10}{'planted':>9}{'requests':>10}{'time s':>9}{'RSS MiB':>9}{'vs clean':>9}"
        )
        for kind in ("chat", "mooncake"):
            t0 = time.perf_counter()
            log = write_fuzz_log(d / f"{kind}.jsonl", args.lines, seed=args.seed, kind=kind)
            clean = d / f"{kind}-clean.jsonl"
            good = _clean_copy(log.path, set(log.planted), clean)
            print(
                f"# {kind}: wrote {log.lines:,} lines ({len(log.planted):,} planted bad) in {time.perf_counter() - t0:.1f}s"
            )
            for command in ("analyze", "simulate"):
                times = {}
                for which, path in (("clean", clean), ("fuzzed", log.path)):
                    out = d / f"{kind}-{command}-{which}.json"
                    extra = ["--no-store"] if command == "analyze" else []
                    code, wall, rss, err = _run([command, str(path), *extra, "--json", str(out), "-q"])
                    crashes += code == 70
                    times[which] = wall
                    doc = json.loads(out.read_text()) if out.is_file() else {}
                    if command == "analyze":
                        reported = doc.get("summary", {}).get("malformed_lines")
                        requests = doc.get("summary", {}).get("requests")
                    else:
                        reported, requests = doc.get("line_errors"), doc.get("requests")
                    planted = len(log.planted) if which == "fuzzed" else 0
                    ratio = f"{wall / times['clean']:.2f}x" if which == "fuzzed" else ""
                    print(
                        f"{kind + ' ' + command + ' ' + which:<28}{code:>5}{reported!s:>10}{planted:>9}"
                        f"{requests!s:>10}{wall:>9.1f}{rss:>9.0f}{ratio:>9}"
                    )
                    if code == 70 or (which == "fuzzed" and reported != planted) or requests != good:
                        print(err[-2000:], file=sys.stderr)
    print(f"crashes (exit 70): {crashes}")
    sys.exit(1 if crashes else 0)


if __name__ == "__main__":
    main()
