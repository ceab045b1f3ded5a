#!/usr/bin/env bash
# Quick sanity benchmark: requests per second for a small 2026-07-28 tools/call sent
# straight to a built-in MCP server and through mcp-edge, alternating, in one run.
# Usage: bash bench/quick.sh [seconds-per-run] [rounds] [connections]
# Needs wrk (Debian package; installed here if missing and running as root).
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-5}; rounds=${2:-3}; conns=${3:-32}

command -v wrk >/dev/null || { [ "$(id -u)" = 0 ] && apt-get install -y -qq wrk >/dev/null; }
bash scripts/setup.sh --build-only
cargo build --release --quiet

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
log=$(mktemp)
RUST_LOG=warn target/release/mcp-edge demo --port "$port" >"$log" 2>&1 &
edge_pid=$!
trap 'kill $edge_pid 2>/dev/null || true; rm -f "$log" "$lua"' EXIT
for _ in $(seq 100); do grep -q "member-a on" "$log" && break; sleep 0.1; done
member=$(sed -n 's/.*member-a on 127.0.0.1:\([0-9]*\).*/\1/p' "$log" | head -1)
[ -n "$member" ] || { cat "$log"; exit 1; }

lua=$(mktemp --suffix=.lua)
cat >"$lua" <<'LUA'
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Accept"] = "application/json, text/event-stream"
wrk.headers["MCP-Protocol-Version"] = "2026-07-28"
wrk.headers["Mcp-Method"] = "tools/call"
wrk.headers["Mcp-Name"] = "echo"
wrk.body = '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"' .. string.rep("x", 900) .. '"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}'
LUA

run() { wrk -t1 -c"$conns" -d"${secs}s" -s "$lua" "$1" | awk '/Requests\/sec/ {print $2}'; }
direct=(); edge=()
for r in $(seq "$rounds"); do
  direct+=("$(run "http://127.0.0.1:$member/mcp")")
  edge+=("$(run "http://127.0.0.1:$port/mcp")")
  echo "round $r: direct ${direct[-1]} rps, through edge ${edge[-1]} rps"
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
d=$(median "${direct[@]}"); e=$(median "${edge[@]}")
echo "median: direct $d rps, through edge $e rps, ratio edge/direct $(python3 -c "print(round($e/$d, 3))")"
