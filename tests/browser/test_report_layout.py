"""The HTML report's layout in headless Chromium: next steps come first, every plot has a legend
and labelled axes, no text is clipped (element boxes against the viewport, their containers and
the SVG view boxes) at a desktop and a narrow width, and plot text contrasts with the page in
light and dark mode. Saves a screenshot of the top of the page to test-artifacts/report-top.png."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from prefixplan.cli.app import main
from prefixplan.report.actions import next_steps

pytestmark = pytest.mark.browser
ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "agent_log.jsonl.gz"
PLOTS = ("pp-capacity", "pp-savings", "pp-timeline", "pp-ttft", "pp-kinds", "pp-top", "pp-icicle")


@pytest.fixture(scope="module")
def pages(tmp_path_factory) -> dict:
    d = tmp_path_factory.mktemp("layout")
    rec = d / "analysis.json"
    argv = ["analyze", str(EXAMPLE), "--no-store", "-q", "--capacity", "100000", "--json", str(rec)]
    assert main(argv) == 0
    tokens, gb = d / "tokens.html", d / "gb.html"
    assert main(["report", str(rec), "--html", str(tokens)]) == 0
    assert main(["report", str(rec), "--html", str(gb), "--model", "Qwen3-32B"]) == 0
    return {"record": json.loads(rec.read_text()), "pages": (tokens, gb)}


def test_next_steps_come_first(pages, open_page, driver, artifacts):
    record = pages["record"]
    page = pages["pages"][0]
    open_page(page)
    js = driver.execute_script
    driver.set_window_size(1280, 1000)
    first = js("return document.querySelector('body > section').id")
    assert first == "next-steps"
    tops = js(
        "return ['next-steps', 'summary', 'capacity', 'prefixes', 'breakers'].map("
        "id => document.getElementById(id).getBoundingClientRect().top)"
    )
    assert tops == sorted(tops)
    assert tops[0] < js("return window.innerHeight"), "the next steps start in the first screen"
    items = js("""return Array.from(document.querySelectorAll('#next-steps li.pp-action')).map(li => ({
        kind: li.dataset.kind, title: li.querySelector('.a-title').textContent,
        figures: JSON.parse(li.dataset.figures)}));""")
    expected = next_steps(record)
    assert [i["title"] for i in items] == [a.title for a in expected]
    breaker = next(b for b in record["breakers"] if b["kind"] == "dynamic-system")
    assert items[0]["kind"] == "move-dynamic" and items[0]["figures"]["tokens"] == breaker["cost_tokens"]
    driver.execute_script("window.scrollTo(0, 0)")
    shot = artifacts / "report-top.png"
    assert driver.save_screenshot(str(shot)) and shot.stat().st_size > 10_000


def test_every_plot_has_a_legend_and_axis_labels(pages, open_page, driver):
    for page in pages["pages"]:
        open_page(page)
        plots = driver.execute_script("""return Array.from(document.querySelectorAll('svg.plot')).map(s => ({
            id: s.id, axes: s.dataset.axes,
            legend: Array.from(s.querySelectorAll('g.pp-legend g.pp-legend-item text')).map(t => t.textContent.trim()),
            x: Array.from(s.querySelectorAll('text.axis[data-axis=x]')).map(t => t.textContent.trim()),
            y: Array.from(s.querySelectorAll('text.axis[data-axis=y]')).map(t => t.textContent.trim())}));""")
        assert {p["id"] for p in plots} == set(PLOTS), page.name
        for p in plots:
            assert p["legend"] and all(p["legend"]), (page.name, p["id"])
            assert len(p["x"]) == 1 and p["x"][0], (page.name, p["id"])
            if "y" in p["axes"]:
                assert len(p["y"]) == 1 and p["y"][0], (page.name, p["id"])
        cap = next(p for p in plots if p["id"] == "pp-capacity")
        if page == pages["pages"][1]:
            assert "GB" in cap["x"][0]  # --model: the capacity axis is KV memory
        assert any("90% of unbounded" in t for t in cap["legend"]) and any("configured" in t for t in cap["legend"])


CLIPPED = """
var out = [];
var vw = document.documentElement.clientWidth;
function r(e) { return e.getBoundingClientRect(); }
function visible(e) { var b = r(e); return b.width > 0 && b.height > 0 && e.getClientRects().length > 0; }
if (document.documentElement.scrollWidth > vw + 1) { out.push('page scrolls sideways: ' + document.documentElement.scrollWidth + ' > ' + vw); }
// HTML text: its box holds its content, and sits inside its section and the viewport
document.querySelectorAll('h1, h2, h3, p, li, td, th, .card .t, .card .v, .card .s, .a-title, .a-effect, summary').forEach(function (e) {
  if (!visible(e)) { return; }
  if (e.scrollWidth > e.clientWidth + 1 && getComputedStyle(e).display !== 'inline') {
    out.push('overflows its box: ' + e.tagName + ' ' + e.textContent.slice(0, 60));
  }
  var b = r(e);
  if (b.left < -1 || b.right > vw + 1) { out.push('outside the viewport: ' + e.tagName + ' ' + e.textContent.slice(0, 60)); }
  var sec = e.closest('section');
  if (sec) { var s = r(sec); if (b.left < s.left - 1 || b.right > s.right + 1) { out.push('outside its section: ' + e.textContent.slice(0, 60)); } }
});
// SVG text: inside its plot, and an icicle label inside its box
document.querySelectorAll('svg.plot').forEach(function (svg) {
  var sb = r(svg);
  svg.querySelectorAll('text').forEach(function (t) {
    if (!t.textContent.trim()) { return; }
    var b = r(t);
    if (b.left < sb.left - 1 || b.right > sb.right + 1 || b.top < sb.top - 1 || b.bottom > sb.bottom + 1) {
      out.push('clipped by its plot ' + svg.id + ': ' + t.textContent.slice(0, 60));
    }
  });
});
document.querySelectorAll('#pp-icicle g.pp-ice').forEach(function (g) {
  var t = g.querySelector('text'), rect = g.querySelector('rect');
  if (!t.textContent) { return; }
  var b = r(t), c = r(rect);
  if (b.left < c.left - 0.5 || b.right > c.right + 0.5) { out.push('icicle label wider than its box: ' + t.textContent); }
});
return out;
"""


@pytest.mark.parametrize("width", [1280, 820])
def test_no_text_is_clipped(pages, open_page, driver, width):
    try:
        driver.set_window_size(width, 1000)
        for page in pages["pages"]:
            open_page(page)
            problems = driver.execute_script(CLIPPED)
            assert problems == [], (page.name, width, problems[:10])
            labels = driver.execute_script(
                "return Array.from(document.querySelectorAll('#pp-icicle g.pp-ice text')).map(t => t.textContent)"
            )
            assert any(lab.startswith("#1 ") for lab in labels)  # wide boxes keep their full label
    finally:
        driver.set_window_size(1280, 1000)


def _luminance(rgb: str) -> float:
    parts = [float(x) for x in rgb[rgb.index("(") + 1 : rgb.index(")")].split(",")[:3]]
    lin = [(c / 255) / 12.92 if c / 255 <= 0.03928 else ((c / 255 + 0.055) / 1.055) ** 2.4 for c in parts]
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_plot_text_is_readable_in_light_and_dark_mode(pages, open_page, driver, scheme, artifacts):
    driver.execute_cdp_cmd(
        "Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": scheme}]}
    )
    try:
        open_page(pages["pages"][0])
        bg = driver.execute_script("return getComputedStyle(document.body).backgroundColor")
        fills = driver.execute_script("""return Array.from(new Set(Array.from(document.querySelectorAll(
            'svg.plot text.axis, svg.plot text.legend, svg.plot text.tick')).map(t => getComputedStyle(t).fill)))""")
        assert fills
        lb = _luminance(bg)
        for fill in fills:
            lf = _luminance(fill)
            ratio = (max(lb, lf) + 0.05) / (min(lb, lf) + 0.05)
            assert ratio >= 4.5, (scheme, bg, fill, ratio)
        assert (lb < 0.2) == (scheme == "dark")
        driver.execute_script("document.getElementById('capacity').scrollIntoView()")
        driver.save_screenshot(str(artifacts / f"report-plots-{scheme}.png"))
    finally:
        driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})
