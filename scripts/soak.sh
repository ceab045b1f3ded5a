#!/usr/bin/env bash
# Soak: mixed load (2026-07-28 calls, 2025 sessions, HTTP+SSE streams) through mcp-edge while
# upstream members are killed and restarted and the config is reloaded 10 times; prints
# requests sent, succeeded and failed with every failure classified, and fails unless each
# failure is explained by evidence (a kill of the right member at that moment, the answer's
# marker or the member it names; see examples/soak.rs). Every wait has a deadline.
# Usage: bash scripts/soak.sh [seconds]   (default 600)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo run --release --quiet --example soak -- "${1:-600}"
