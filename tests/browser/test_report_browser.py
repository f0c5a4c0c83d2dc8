"""The HTML report of the bundled example, opened in headless Chromium.

Asserts no console errors, no network requests (only the file:// document itself), and
that the plotted data read back from the DOM equal the analysis record. Saves a screenshot
to test-artifacts/report.png.
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest

from prefixplan.cli.app import main

pytestmark = pytest.mark.browser
ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "agent_log.jsonl.gz"

CAPACITY = 100_000  # the configured capacity: the marker on the curve


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> dict:
    """Analyze the bundled example once, writing the record and the HTML report; render it again
    with ``prefixplan report`` from the record."""
    d = tmp_path_factory.mktemp("report")
    rec_path, page = d / "analysis.json", d / "report.html"
    assert (
        main(
            [
                "analyze",
                str(EXAMPLE),
                "--no-store",
                "-q",
                "--capacity",
                str(CAPACITY),
                "--json",
                str(rec_path),
                "--html",
                str(page),
            ]
        )
        == 0
    )
    again = d / "again.html"
    assert main(["report", str(rec_path), "--html", str(again)]) == 0
    with_kv = d / "kv.html"  # KV memory in GB on the capacity axes
    assert main(["report", str(rec_path), "--html", str(with_kv), "--model", "Llama-3.1-8B-Instruct"]) == 0
    record = json.loads(rec_path.read_text())
    assert record["simulation"]["curves"], "analyze records the simulation headline and its capacity curve"
    return {"record": record, "from_report": again, "from_analyze": page, "with_kv": with_kv}


def _assert_offline_and_clean(load, page: Path) -> None:
    errors = [e for e in load.console if e["level"] in ("SEVERE", "WARNING")]
    assert errors == [], f"console errors: {errors}"
    assert load.requests == [page.resolve().as_uri()], f"network requests besides the document: {load.requests}"


def test_report_opens_offline_without_errors(reports, open_page, driver, artifacts):
    for page in (reports["from_report"], reports["from_analyze"]):
        load = open_page(page)
        _assert_offline_and_clean(load, page)
        assert load.load_ms < 3000, f"{page.name} took {load.load_ms:.0f} ms to load"
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(1280, min(int(height) + 40, 8000))
    shot = artifacts / "report.png"
    assert driver.save_screenshot(str(shot)) and shot.stat().st_size > 10_000


def test_plotted_data_equal_the_record(reports, open_page, driver):
    record = reports["record"]
    _assert_offline_and_clean(open_page(reports["from_analyze"]), reports["from_analyze"])
    js = driver.execute_script
    # capacity curve: points from the DOM, positions inverted through the SVG's own scale
    pts = js("""return Array.from(document.querySelectorAll('#pp-capacity circle.pp-pt')).map(c => ({
        policy: c.dataset.policy, capacity: +c.dataset.capacity, rate: +c.dataset.hitRate,
        cx: +c.getAttribute('cx'), cy: +c.getAttribute('cy')}));""")
    box = js(
        "var s = document.getElementById('pp-capacity').dataset; return {lo: +s.xMin, hi: +s.xMax, "
        "left: +s.left, top: +s.top, w: +s.width, h: +s.height, scale: s.xScale};"
    )
    curves = record["simulation"]["curves"]
    expected = {(p, pt["capacity_tokens"], pt["hit_rate_tokens"]) for p, pts in curves.items() for pt in pts}
    assert {(p["policy"], p["capacity"], p["rate"]) for p in pts} == expected
    for p in pts:
        u = (p["cx"] - box["left"]) / box["w"]
        cap = 10 ** (math.log10(box["lo"]) + u * (math.log10(box["hi"]) - math.log10(box["lo"])))
        assert cap == pytest.approx(p["capacity"], rel=0.01)
        assert 1 - (p["cy"] - box["top"]) / box["h"] == pytest.approx(p["rate"], abs=0.005)
    marker = js("return +document.querySelector('#pp-capacity .pp-cap-marker').dataset.capacity")
    assert marker == CAPACITY
    head = next(r for r in record["simulation"]["runs"] if r["label"] == record["simulation"]["headline"])
    assert head["capacity_tokens"] == CAPACITY
    # the stacked bar: one segment per kind, widths to scale
    segs = js("""return Array.from(document.querySelectorAll('#pp-kinds rect.pp-kind')).map(r => ({
        kind: r.dataset.kind, tokens: +r.dataset.tokens, reused: +r.dataset.reused, w: r.getBBox().width}));""")
    assert {s["kind"]: (s["tokens"], s["reused"]) for s in segs} == {
        k: (x["tokens"], x["reused"]) for k, x in record["kinds"].items()
    }
    total = sum(s["tokens"] for s in segs)
    assert total == record["summary"]["prompt_tokens"]
    bar_w = js("return +document.getElementById('pp-kinds').dataset.width")
    for s in segs:
        assert s["w"] == pytest.approx(s["tokens"] / total * bar_w, abs=0.05)
    # summary cards and the prefix table
    cards = js(
        "return Object.fromEntries(Array.from(document.querySelectorAll('.card[data-value]')).map(c => [c.dataset.metric, +c.dataset.value]))"
    )
    assert cards["requests"] == record["summary"]["requests"]
    assert cards["prompt_tokens"] == record["summary"]["prompt_tokens"]
    runs = {r["label"]: r for r in record["simulation"]["runs"]}
    assert cards["in_batch"] == runs[record["simulation"]["in_batch"]]["hit_rate_tokens"]
    assert cards["persistent"] == runs[record["simulation"]["persistent"]]["hit_rate_tokens"]
    assert cards["headline"] == head["hit_rate_tokens"]
    rows = js("""return Array.from(document.querySelectorAll('#prefixes tbody tr[data-rank]')).map(r => ({
        rank: +r.dataset.rank, length: +r.dataset.length, hits: +r.dataset.hits, withheld: r.dataset.withheld === 'true',
        cells: Array.from(r.cells).map(c => c.textContent)}));""")
    shared = [c for c in record["candidates"] if not c["withheld"]]
    assert [(r["rank"], r["length"], r["hits"], r["withheld"]) for r in rows] == [
        (c["rank"], c["length"], c["hits"], False) for c in shared
    ]
    for r, c in zip(rows, shared, strict=True):
        assert r["cells"][2] == f"{c['length']:,}" and r["cells"][5] == f"{c['reusable_tokens']:,}"
    # the embedded JSON is what was drawn
    data = js("return JSON.parse(document.getElementById('pp-data').textContent)")
    assert [k["tokens"] for k in data["kinds"]] == [s["tokens"] for s in segs]
    malformed = js("return +document.getElementById('pp-malformed').dataset.count")
    assert malformed == record["errors"]["count"]


def test_icicle_hover_and_zoom(reports, open_page, driver):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    record = reports["record"]
    open_page(reports["from_analyze"])
    nodes = driver.find_elements(By.CSS_SELECTOR, "#pp-icicle g.pp-ice")
    ranks = {n.get_attribute("data-rank") for n in nodes} - {""}
    assert ranks and ranks <= {str(c["rank"]) for c in record["candidates"]}
    top = next(c for c in record["candidates"] if str(c["rank"]) in ranks and c["parent"] is None)
    node = next(n for n in nodes if n.get_attribute("data-rank") == str(top["rank"]))
    ActionChains(driver).move_to_element(node.find_element(By.TAG_NAME, "rect")).perform()
    tip = driver.find_element(By.ID, "pp-tip")
    assert tip.is_displayed()
    assert f"{top['length']:,} tokens" in tip.text and f"{top['hits']:,} hits" in tip.text
    node.find_element(By.TAG_NAME, "rect").click()
    width = float(node.find_element(By.TAG_NAME, "rect").get_attribute("width"))
    assert width == pytest.approx(float(driver.find_element(By.ID, "pp-icicle").get_attribute("data-width")), abs=0.01)
    assert driver.find_elements(By.CSS_SELECTOR, "#pp-icicle")[0].get_attribute("data-zoom")
    assert driver.get_log("browser") == []


def test_withheld_prefixes_show_no_text(reports, open_page, driver):
    record = copy.deepcopy(reports["record"])
    withheld = [c for c in record["candidates"] if c["withheld"]]
    assert withheld, "the example has single-user template prefixes"
    open_page(reports["from_analyze"])
    text = driver.find_element("tag name", "body").text
    assert f"min_tenants = {record['privacy']['min_tenants']}" in text
    # the withheld prefixes are one grouped row: how many and their tokens, no text of theirs
    rows = driver.execute_script("""return Array.from(document.querySelectorAll('#prefixes tbody tr[data-withheld=true]'))
        .map(r => ({count: +r.dataset.withheldCount, reusable: +r.dataset.reusable, text: r.textContent}))""")
    assert len(rows) == 1
    assert rows[0]["count"] == len(withheld) and rows[0]["reusable"] == sum(c["reusable_tokens"] for c in withheld)
    assert f"{len(withheld)} single-user prefixes withheld" in rows[0]["text"]
