#!/usr/bin/env bash
# Browser stage: open the HTML report in headless Chromium (Debian's chromium + chromedriver,
# driven by selenium). Installs them when missing; when they are present afterwards the tests
# must run (PREFIXPLAN_REQUIRE_BROWSER=1), otherwise they skip with the reason.
set -euo pipefail
if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then
  SUDO=""
  if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null; then SUDO="sudo -n"; fi
  if $SUDO apt-get update -qq >/dev/null && \
     DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium chromium-driver >/dev/null; then
    echo "installed chromium $(/usr/bin/chromium --version 2>/dev/null | head -1)"
  else
    echo "warning: could not apt-get install chromium chromium-driver; browser tests will skip" >&2
  fi
fi
if ! python -c "import selenium" 2>/dev/null; then
  python -m pip install -q -e ".[browser]"
fi
if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then
  export PREFIXPLAN_REQUIRE_BROWSER=${PREFIXPLAN_REQUIRE_BROWSER:-1}
fi
python -m pytest -q -m browser -p no:cacheprovider tests/browser
