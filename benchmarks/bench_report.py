"""Size and load time of the HTML report for an analysis record, in headless Chromium.

    python scripts/make_logs.py bench --out /tmp/bench.jsonl.gz
    prefixplan analyze /tmp/bench.jsonl.gz --no-store -q --json /tmp/bench.json
    python benchmarks/bench_report.py /tmp/bench.json [--runs 5]

Prints the render time in Python, the file size, and per run the navigation-to-load time
(``loadEventEnd``) and the time until the page's plots are in the DOM, measured by the browser.
Targets (issue 6): under 5 MB and under 3 s for the 100k-request benchmark log.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("analysis", type=Path, help="analysis record (prefixplan analyze --json)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--out", type=Path, default=None, help="where to write the HTML (default: a temp file)")
    args = ap.parse_args()

    from prefixplan.report.files import load_record
    from prefixplan.report.html import render_html

    record = load_record(args.analysis)
    t0 = time.perf_counter()
    page = render_html(record)
    render_s = time.perf_counter() - t0
    out = args.out or Path(tempfile.mkdtemp()) / "report.html"
    out.write_text(page, encoding="utf-8")
    size = out.stat().st_size
    print(f"record: {record['summary']['requests']:,} requests, {args.analysis.stat().st_size / 1e6:.1f} MB of JSON")
    print(f"render: {render_s * 1000:.0f} ms in Python; HTML {size / 1e6:.3f} MB ({size:,} bytes) -> {out}")

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
        f"--user-data-dir={tempfile.mkdtemp()}",
    ):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    drv = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
    loads, walls = [], []
    try:
        for _ in range(args.runs):
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
        n_points = drv.execute_script("return document.querySelectorAll('circle.pp-pt, rect.pp-kind, g.pp-ice').length")
    finally:
        drv.quit()
    print(
        f"load (navigation start -> load event, browser clock): median {statistics.median(loads):.3f} s, "
        f"max {max(loads):.3f} s over {args.runs} runs"
    )
    print(f"load (driver.get wall clock): median {statistics.median(walls):.3f} s")
    print(f"plotted elements: {n_points}; console errors: {len(errors)}")
    ok = size < 5e6 and max(loads) < 3.0 and not errors
    print(
        json.dumps(
            {
                "html_bytes": size,
                "load_s_median": statistics.median(loads),
                "load_s_max": max(loads),
                "render_s": render_s,
                "ok": ok,
            }
        )
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
