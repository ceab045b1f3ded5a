#!/usr/bin/env bash
# Build mcp-edge and start it in front of two built-in MCP servers; prints curl commands.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --build-only
exec cargo run --release --quiet -- demo "$@"
