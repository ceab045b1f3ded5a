#!/usr/bin/env bash
# The side-by-side benchmark: direct to the upstream, through mcp-edge, through nginx and
# HAProxy as plain reverse proxies, in one run on one machine (and TLS: mcp-edge against nginx
# with the same certificate, bench/tls.py). Installs nginx, HAProxy, wrk and openssl
# from Debian when missing, builds in release mode, then runs bench/bench.py.
# Usage: bash bench/run.sh [--quick]      (--quick: a few seconds, checks the harness works)
#        bash bench/run.sh --identity     (only token validation and list filtering, bench/identity.py)
#        bash bench/run.sh --tracing      (only tracing off, on at 100 %, collector down, bench/tracing.py)
#        bash bench/run.sh --rate-limits  (only a rate limit in the edge against one in Redis, bench/ratelimit.py)
#        bash bench/run.sh --stdio        (only a stdio pool against the same server over HTTP, bench/stdio.py)
#        bash bench/run.sh --handoff      (only a request handed to the replica holding its state against one served there, bench/handoff.py)
#        bash bench/run.sh --balance      (only mcp-edge's balancing beside HAProxy's over three TS SDK servers, bench/balance.py; about 8 minutes)
#        bash bench/run.sh --instructions (only instructions per request under callgrind, bench/instructions.py)
#        bash bench/run.sh --peers        (only P1/P2 through every proxy at 1/16/64 connections and the TS SDK server rows, 5 s rounds, bench/peers.py)
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
tools=(nginx haproxy wrk openssl redis-server)
# callgrind (bench/instructions.py): every run but the quick one.
[ "${1:-}" = "--quick" ] || tools+=(valgrind)
# The balancing part alone needs HAProxy and the TS SDK server only (its own load generator).
[ "${1:-}" = "--balance" ] && tools=(haproxy)
for tool in "${tools[@]}"; do
  command -v "$tool" >/dev/null 2>&1 || [ -x "/usr/sbin/$tool" ] || need+=("$tool")
done
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then echo "bench: install ${need[*]} (Debian packages)" >&2; exit 1; fi
  apt-get update -qq
  # Do not let the packages start their system services on port 80 (a policy-rc.d of our own,
  # removed however the install ends; one that was already there is left alone).
  own_policy=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
    own_policy=1
    trap 'rm -f /usr/sbin/policy-rc.d' EXIT
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  if [ "$own_policy" = 1 ]; then rm -f /usr/sbin/policy-rc.d; trap - EXIT; fi
  for tool in "${need[@]}"; do
    command -v "$tool" >/dev/null 2>&1 || [ -x "/usr/sbin/$tool" ] || { echo "bench: $tool still missing after the install" >&2; exit 1; }
  done
fi
bash scripts/setup.sh --build-only
if [ "${1:-}" = "--balance" ]; then
  cargo build --release --quiet --bin mcp-edge
else
  cargo build --release --quiet --bin mcp-edge --example bench_upstream --example sse_hold --example plain_pingora --example bench_token
fi
# mcp-proxy 0.6.0 (crates.io), the MCP gateway the edge is measured beside: built once, with the
# features its 2026-07-28 support needs, and kept outside the tree (a fresh clone reuses it).
MCP_PROXY_ROOT="$HOME/.cache/mcp-edge-bench/mcp-proxy-0.6.0"
if [ "${1:-}" != "--balance" ] && [ ! -x "$MCP_PROXY_ROOT/bin/mcp-proxy" ]; then
  echo "bench: building mcp-proxy 0.6.0 once (about 5 minutes; cached in $MCP_PROXY_ROOT)"
  cargo install --quiet mcp-proxy --version 0.6.0 --locked --no-default-features \
    --features protocol-2026-07-28 --root "$MCP_PROXY_ROOT"
fi
# The priced build for bench/instructions.py (every stage's instructions by name): the
# feature `price-tags` and v0 symbol names, in a target directory of its own so neither build
# undoes the other (the first one compiles every dependency again: a few minutes, once).
if [ -z "${1:-}" ] || [ "${1:-}" = "--instructions" ]; then
  RUSTFLAGS="-C symbol-mangling-version=v0" cargo build --release --quiet --features price-tags \
    --bin mcp-edge --target-dir target/price-tags
fi
# The micro-benchmarks' output goes into bench/results/latest.md too (bench.py adds it).
mkdir -p bench/results
rm -f bench/results/micro.txt
if [ "${1:-}" != "--quick" ] && [ "${1:-}" != "--identity" ] && [ "${1:-}" != "--tracing" ] && [ "${1:-}" != "--rate-limits" ] && [ "${1:-}" != "--stdio" ] && [ "${1:-}" != "--handoff" ] && [ "${1:-}" != "--balance" ] && [ "${1:-}" != "--instructions" ] && [ "${1:-}" != "--peers" ]; then
  cargo bench --quiet --bench tokens | tee -a bench/results/micro.txt
  cargo bench --quiet --bench inspect | tee -a bench/results/micro.txt
fi
# As many descriptors as allowed (P4's 3,000 idle streams need about 6,000 in a proxy).
ulimit -n 200000 2>/dev/null || ulimit -n "$(ulimit -Hn)"
PATH="$PATH:/usr/sbin" exec python3 bench/bench.py "$@"
