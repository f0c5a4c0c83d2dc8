#!/usr/bin/env bash
# Browser stage: open the HTML report in headless Chromium (Debian's chromium + chromedriver,
# driven by selenium). Installs them when missing; when they are present afterwards the tests
# must run (PREFIXPLAN_REQUIRE_BROWSER=1), otherwise they skip with the reason.
set -euo pipefail
bash "$(dirname "$0")/../setup_browser.sh"
if ! python -c "import selenium" 2>/dev/null; then
  python -m pip install -q -e ".[browser]"
fi
if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then
  export PREFIXPLAN_REQUIRE_BROWSER=${PREFIXPLAN_REQUIRE_BROWSER:-1}
fi
python -m pytest -q -m browser -p no:cacheprovider tests/browser
