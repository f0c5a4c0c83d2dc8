"""Size and load time of the HTML report for analysis records, in headless Chromium, side by side.

    python scripts/make_logs.py bench --out /tmp/bench.jsonl.gz
    prefixplan analyze /tmp/bench.jsonl.gz --no-store -q --capacity 1e7 --json /tmp/bench.json
    prefixplan analyze examples/agent_log.jsonl.gz --no-store -q --capacity 1e5 --json /tmp/example.json
    python benchmarks/bench_report.py /tmp/example.json /tmp/bench.json [--runs 5]

The first record is the baseline the others are printed beside (the bundled example by
convention). For each record: the render time in Python (next steps included), the file size,
and per run the navigation-to-load time (``loadEventEnd``, the browser's clock) and the
``driver.get`` wall time; plotted SVG elements and next steps on the page. Targets (issue 6,
kept by issue 12): under 5 MB and under 3 s for the 100k-request benchmark record.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def _driver() -> Any:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    for a in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--disable-quic",
        "--window-size=1280,1000",
        f"--user-data-dir={tempfile.mkdtemp()}",
    ):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)


def measure(path: Path, runs: int, drv: Any, out_dir: Path) -> dict[str, Any]:
    from prefixplan.analysis.record_io import load_record
    from prefixplan.report.html import render_html

    record = load_record(path).to_json()
    t0 = time.perf_counter()
    page = render_html(record)
    render_s = time.perf_counter() - t0
    out = out_dir / f"{path.stem}.html"
    out.write_text(page, encoding="utf-8")
    loads, walls = [], []
    for _ in range(runs):
        drv.get("about:blank")
        t = time.perf_counter()
        drv.get(out.resolve().as_uri())  # returns after the load event
        walls.append(time.perf_counter() - t)
        loads.append(
            drv.execute_script(
                "var n = performance.getEntriesByType('navigation')[0]; return n.loadEventEnd - n.startTime;"
            )
            / 1000
        )
    errors = [e for e in drv.get_log("browser") if e["level"] == "SEVERE"]
    counts = drv.execute_script(
        "return {plots: document.querySelectorAll('svg.plot').length, "
        "elements: document.querySelectorAll('svg.plot *').length, "
        "steps: document.querySelectorAll('#next-steps li.pp-action').length}"
    )
    return {
        "record": str(path),
        "requests": record["summary"]["requests"],
        "candidates": len(record.get("candidates") or []),
        "record_mb": path.stat().st_size / 1e6,
        "html_bytes": out.stat().st_size,
        "render_s": render_s,
        "load_s_median": statistics.median(loads),
        "load_s_max": max(loads),
        "wall_s_median": statistics.median(walls),
        "plots": counts["plots"],
        "svg_elements": counts["elements"],
        "next_steps": counts["steps"],
        "console_errors": len(errors),
        "html": str(out),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("analyses", type=Path, nargs="+", help="analysis records; the first is the baseline")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--out", type=Path, default=None, help="folder for the HTML pages (default: a temp folder)")
    args = ap.parse_args()
    out_dir = args.out or Path(tempfile.mkdtemp())
    out_dir.mkdir(parents=True, exist_ok=True)
    drv = _driver()
    try:
        rows = [measure(p, args.runs, drv, out_dir) for p in args.analyses]
    finally:
        drv.quit()
    cols = [
        ("requests", "{:,}"),
        ("candidates", "{:,}"),
        ("record_mb", "{:.1f} MB"),
        ("html_bytes", "{:,} B"),
        ("render_s", "{:.3f} s"),
        ("load_s_median", "{:.3f} s"),
        ("load_s_max", "{:.3f} s"),
        ("wall_s_median", "{:.3f} s"),
        ("plots", "{}"),
        ("svg_elements", "{:,}"),
        ("next_steps", "{}"),
        ("console_errors", "{}"),
    ]
    names = ["baseline: " + rows[0]["record"]] + [r["record"] for r in rows[1:]]
    width = max(len(n) for n in names) + 2
    print(f"{'':<18}" + "".join(f"{n:>{width}}" for n in names))
    for key, fmt in cols:
        print(f"{key:<18}" + "".join(f"{fmt.format(r[key]):>{width}}" for r in rows))
    ok = all(r["html_bytes"] < 5e6 and r["load_s_max"] < 3.0 and not r["console_errors"] for r in rows)
    print(json.dumps({"runs": args.runs, "ok": ok, "reports": rows}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
