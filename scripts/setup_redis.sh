#!/usr/bin/env bash
# Install Debian's redis-server when it is missing (the gateway's shared-state tests start their own
# server on a free port; nothing is left running). Without root/apt the tests skip with the reason,
# unless PREFIXPLAN_REQUIRE_LIVE=1 (CI), where they fail.
set -uo pipefail
if command -v redis-server >/dev/null 2>&1; then
  exit 0
fi
SUDO=""
if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null; then SUDO="sudo -n"; fi
if $SUDO apt-get update -qq >/dev/null 2>&1 && \
   DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends redis-server >/dev/null 2>&1; then
  # The package may start a system service; the tests start their own server, so stop it.
  (command -v service >/dev/null && $SUDO service redis-server stop >/dev/null 2>&1) || true
  echo "installed $(redis-server --version | head -1)"
else
  echo "warning: could not apt-get install redis-server; gateway shared-state tests will skip" >&2
fi
