#!/usr/bin/env bash
# Run every test: unit tests, integration tests against official MCP SDK peers and mock
# upstreams, and the config examples. Installs what is missing first.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cargo test --all-targets -- --test-threads="${TEST_THREADS:-4}"
