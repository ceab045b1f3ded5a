#!/usr/bin/env bash
# Install everything mcp-edge's build and tests need on a fresh Debian machine:
# cmake (Pingora's zlib-ng build), the official MCP SDK peers (npm ci from the committed
# lockfile) and the Python SDK peer (a venv from pinned requirements).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v cmake >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq cmake >/dev/null
  else
    echo "scripts/setup.sh: cmake is missing; install it (sudo apt-get install cmake)" >&2
    exit 1
  fi
fi

if [ "${1:-}" != "--build-only" ]; then
  bash tests/peers/setup.sh
fi
