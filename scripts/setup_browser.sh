#!/usr/bin/env bash
# Install Debian's chromium and chromedriver for the browser test stage when they are missing.
# Exits 0 either way; without them the browser tests skip with the reason.
set -uo pipefail
if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then
  exit 0
fi
SUDO=""
if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null; then SUDO="sudo -n"; fi
if $SUDO apt-get update -qq >/dev/null && \
   DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium chromium-driver >/dev/null; then
  echo "installed chromium $(/usr/bin/chromium --version 2>/dev/null | head -1)"
else
  echo "warning: could not apt-get install chromium chromium-driver; browser tests will skip" >&2
fi
