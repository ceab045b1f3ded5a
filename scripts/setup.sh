#!/usr/bin/env bash
# Install everything mcp-edge's build and tests need on a fresh Debian machine:
# cmake (Pingora's zlib-ng build), chromium (headless browser for the CORS tests), redis-server
# (the fleet-wide rate limit tests), haproxy (the balancer in front of the hand-off tests), the
# official
# MCP SDK peers (npm ci from the committed lockfile) and the Python SDK peer (a venv from pinned
# requirements).
set -euo pipefail
cd "$(dirname "$0")/.."

# install_missing COMMAND PACKAGE: the Debian package when the command is missing (as root),
# else a clear message and failure.
install_missing() {
  command -v "$1" >/dev/null 2>&1 && return 0
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >/dev/null
  else
    echo "scripts/setup.sh: $1 is missing; install it (sudo apt-get install $2)" >&2
    exit 1
  fi
}

install_missing cmake cmake
# Headless Chromium for the browser tests (tests/browser.rs); Debian's redis-server for the
# fleet-wide rate limits (tests/rate_limits.rs starts its own, never a system service).
if [ "${1:-}" != "--build-only" ]; then
  install_missing chromium chromium
  install_missing redis-server redis-server
  # Debian's HAProxy as the per-request balancer in front of three replicas (tests/handoff.rs
  # starts its own; the package's service, if it started, listens on nothing).
  install_missing haproxy haproxy
fi

if [ "${1:-}" != "--build-only" ]; then
  bash tests/peers/setup.sh
fi
