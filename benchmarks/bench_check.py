"""``prefixplan check`` on recipes with one large chunked document (not run in CI).

Usage::

    python benchmarks/bench_check.py                 # 4, 8, 16 MiB
    python benchmarks/bench_check.py --sizes 4 8 16 64

Writes a recipe whose only part is a generated Markdown manual of N MiB (paragraphs, headings,
a date every few KB so the lint has findings), chunked at blank lines, locks it, then times
``run_check`` (recipe load, chunking, lint with positions and costs, lock comparison). The
baseline is the smallest size: a linear check shows time ratios equal to the size ratios.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from prefixplan.gate.check import run_check  # noqa: E402
from prefixplan.gate.lock import lock_recipes  # noqa: E402


def write_manual(path: Path, mib: int, seed: int = 1) -> None:
    rng = random.Random(seed)
    words = [
        "valve",
        "pump",
        "seal",
        "filter",
        "gasket",
        "torque",
        "sensor",
        "firmware",
        "reset",
        "cable",
        "bracket",
        "housing",
    ]
    target = mib * 2**20
    size = 0
    with open(path, "w", encoding="utf-8") as f:
        section = 0
        while size < target:
            section += 1
            block = [f"## Section {section}\n\n"]
            for _ in range(rng.randrange(3, 8)):
                sentence = " ".join(rng.choice(words) for _ in range(rng.randrange(8, 20)))
                block.append(sentence.capitalize() + ".\n")
            if section % 7 == 0:
                block.append(f"Last reviewed on 2025-0{1 + section % 9}-1{section % 10}.\n")
            block.append("\n")
            text = "".join(block)
            f.write(text)
            size += len(text.encode())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[4, 8, 16], help="document sizes in MiB")
    args = ap.parse_args()
    base: tuple[int, float] | None = None
    print(f"{'doc MiB':>8}{'chunks':>8}{'findings':>10}{'check s':>9}{'s/MiB':>7}{'size x':>8}{'time x':>8}")
    for mib in args.sizes:
        with tempfile.TemporaryDirectory() as tmp:
            d = Path(tmp)
            (d / "recipes" / "parts").mkdir(parents=True)
            write_manual(d / "recipes" / "parts" / "manual.md", mib)
            (d / "recipes" / "manual.yaml").write_text(
                "prefixes:\n  - name: manual\n    version: 1\n"
                "    documents: [{file: parts/manual.md, chunk: blank-lines, max_chars: 4000}]\n"
            )
            lock_recipes(d / "recipes", d / "prefixplan.lock")
            t0 = time.perf_counter()
            res = run_check(d / "recipes", d / "prefixplan.lock", diff_ref=None)
            dt = time.perf_counter() - t0
            chunks = sum(1 for _ in (d / "prefixplan.lock").read_text().splitlines() if "#chunk" in _)
        base = base or (mib, dt)
        print(
            f"{mib:>8}{chunks:>8}{len(res.findings):>10}{dt:>9.2f}{dt / mib:>7.2f}"
            f"{mib / base[0]:>7.1f}x{dt / base[1]:>7.1f}x"
        )


if __name__ == "__main__":
    main()
