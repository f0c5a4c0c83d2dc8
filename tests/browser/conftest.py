"""Headless Chromium for the report's browser tests (Debian's chromium + chromedriver, selenium).

The tests skip with the reason when the browser, the driver or selenium is missing, unless
``PREFIXPLAN_REQUIRE_BROWSER=1`` (set by scripts/stages/30-browser.sh after installing them),
where a missing browser is a failure.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

CHROMIUM = os.environ.get("PREFIXPLAN_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("PREFIXPLAN_CHROMEDRIVER", "/usr/bin/chromedriver")
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


def _missing() -> str | None:
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[browser]')"
    for path, what in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromedriver")):
        if not (Path(path).is_file() or shutil.which(path)):
            return f"{what} not found at {path} (apt-get install chromium chromium-driver)"
    return None


@pytest.fixture(scope="session")
def driver(tmp_path_factory):
    """One headless Chromium for the session: no GPU, no background or component networking,
    console and performance (network) logs enabled."""
    reason = _missing()
    if reason:
        if os.environ.get("PREFIXPLAN_REQUIRE_BROWSER") == "1":
            pytest.fail(f"PREFIXPLAN_REQUIRE_BROWSER=1 but {reason}")
        pytest.skip(reason)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--disable-quic",
        "--disable-extensions",
        "--disable-default-apps",
        "--window-size=1280,1000",
        f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}",
    ):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    drv = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    drv.set_page_load_timeout(30)
    try:
        yield drv
    finally:
        drv.quit()


class PageLoad:
    """What happened while one page loaded: console entries, network requests, timings."""

    def __init__(self, console: list[dict], requests: list[str], load_ms: float) -> None:
        self.console = console
        self.requests = requests
        self.load_ms = load_ms


@pytest.fixture
def open_page(driver):
    """``open_page(path) -> PageLoad``: navigate to a local file and collect its logs."""

    def _open(path: Path) -> PageLoad:
        driver.get("about:blank")
        driver.get_log("browser")
        driver.get_log("performance")  # drain what the browser did before this page
        driver.get(path.resolve().as_uri())
        driver.execute_script("return document.readyState")
        load_ms = driver.execute_script(
            "var n = performance.getEntriesByType('navigation')[0]; return n.loadEventEnd - n.startTime;"
        )
        requests = []
        for entry in driver.get_log("performance"):
            msg = json.loads(entry["message"])["message"]
            if msg["method"] in ("Network.requestWillBeSent", "Network.webSocketCreated"):
                requests.append(msg["params"].get("request", {}).get("url") or msg["params"].get("url"))
        return PageLoad(driver.get_log("browser"), requests, float(load_ms))

    return _open


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS
