#!/usr/bin/env bash
# Installs the MCP SDK test peers: node_modules/ (npm ci) and .venv/ (Python mcp SDK).
# Idempotent; needs only the npm registry and PyPI. Usage: bash tests/peers/setup.sh
set -euo pipefail
cd "$(dirname "$0")"

if [ ! -f node_modules/.package-lock.json ] || ! cmp -s package-lock.json node_modules/.peers-lock-stamp; then
    npm ci --no-audit --no-fund
    cp package-lock.json node_modules/.peers-lock-stamp
fi

PY="${PYTHON:-$(command -v python3.11 || command -v python3)}"
if ! "$PY" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)'; then
    echo "setup.sh: need Python >= 3.10 (set PYTHON=...)" >&2
    exit 1
fi
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
if ! cmp -s requirements.txt .venv/.peers-req-stamp; then
    .venv/bin/python -m pip install --disable-pip-version-check -q -r requirements.txt
    cp requirements.txt .venv/.peers-req-stamp
fi
echo "peers ready: $(node --version) node, $(.venv/bin/python --version)"
