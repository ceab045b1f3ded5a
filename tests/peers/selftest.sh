#!/usr/bin/env bash
# Peers without the edge: start every server on port 0, run the client matrix against it directly,
# and check the JSON lines plus `hang` cancellation. Run after setup.sh. Prints "N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")"
PY=.venv/bin/python
TMP=$(mktemp -d)
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done; wait; rm -rf "$TMP"' EXIT
pass=0 fail=0
# Sessionful 2025 Streamable HTTP, raw: initialize mints mcp-session-id, GET stream 200 SSE with the
# header, unknown id 404 -32001, DELETE 200 then 404. Prints {"ok":true} or {"ok":false,...}.
SESSION_PROBE='try {
const u = process.argv[1], H = { "content-type": "application/json", accept: "application/json, text/event-stream" };
const init = { jsonrpc: "2.0", id: 1, method: "initialize",
  params: { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "probe", version: "0" } } };
const bad = [];
const r1 = await fetch(u, { method: "POST", headers: H, body: JSON.stringify(init) }); await r1.text();
const sid = r1.headers.get("mcp-session-id");
if (r1.status !== 200 || !sid) bad.push(`init ${r1.status} sid=${sid}`);
const S = { "mcp-session-id": sid, "mcp-protocol-version": "2025-11-25" };
const ac = new AbortController();
const g = await fetch(u, { headers: { ...S, accept: "text/event-stream" }, signal: ac.signal });
if (g.status !== 200 || !g.headers.get("content-type")?.startsWith("text/event-stream") || g.headers.get("mcp-session-id") !== sid)
  bad.push(`get ${g.status} ${g.headers.get("content-type")} ${g.headers.get("mcp-session-id")}`);
ac.abort();
const r404 = await fetch(u, { method: "POST", headers: { ...H, "mcp-session-id": "no-such-session" },
  body: JSON.stringify({ jsonrpc: "2.0", id: 2, method: "tools/list" }) });
const e404 = await r404.text().then(t => { try { return JSON.parse(t); } catch { return t; } });
if (r404.status !== 404 || e404.error?.code !== -32001) bad.push(`unknown ${r404.status} ${JSON.stringify(e404).slice(0, 120)}`);
const d = await fetch(u, { method: "DELETE", headers: S }); await d.text();
const after = await fetch(u, { method: "POST", headers: { ...H, ...S }, body: JSON.stringify({ jsonrpc: "2.0", id: 3, method: "tools/list" }) });
await after.text();
if (d.status !== 200 || after.status !== 404) bad.push(`delete ${d.status} then ${after.status}`);
console.log(JSON.stringify(bad.length ? { ok: false, error: bad.join("; ") } : { ok: true }));
} catch (e) { console.log(JSON.stringify({ ok: false, error: String(e) })); }'

start() { # start NAME CMD... -> sets PORT
    local name=$1; shift
    "$@" >"$TMP/$name.out" 2>"$TMP/$name.err" &
    PIDS+=($!)
    for _ in $(seq 100); do grep -q '^LISTENING ' "$TMP/$name.out" && break; sleep 0.1; done
    PORT=$(awk '/^LISTENING /{print $2}' "$TMP/$name.out")
}
check() { # check LABEL EXPECT(ok|fail) CMD...
    local label=$1 want=$2; shift 2
    local out; out=$("$@" 2>/dev/null | tail -1)
    local got=fail; [[ $out == '{"ok":true'* || $out == '{"ok": true'* ]] && got=ok
    if [[ $got == "$want" ]]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL $label: $out"; fi
}
check_hang() { # check_hang LABEL SERVER CMD...
    local label=$1 name=$2; shift 2
    local before; before=$(grep -c '^ABORTED hang' "$TMP/$name.err")
    check "$label" ok "$@" --hang-ms 300
    sleep 0.3
    if (( $(grep -c '^ABORTED hang' "$TMP/$name.err") > before )); then pass=$((pass + 1));
    else fail=$((fail + 1)); echo "FAIL $label: no 'ABORTED hang' on $name"; fi
}

for mode in modern dual v2-session legacy-session; do
    start "ts-$mode" node ts-server.mjs --mode "$mode" --instance "$mode" --port 0
    u=http://127.0.0.1:$PORT/mcp
    legacy_ok=ok modern_ok=ok
    [[ $mode == modern ]] && legacy_ok=fail
    [[ $mode == legacy-session ]] && modern_ok=fail
    check "ts-$mode ts auto" ok node ts-client.mjs --url "$u" --mode auto
    check "ts-$mode ts pin" "$modern_ok" node ts-client.mjs --url "$u" --mode pin
    check "ts-$mode ts legacy" "$legacy_ok" node ts-client.mjs --url "$u" --mode legacy
    check "ts-$mode ts v1" "$legacy_ok" node ts-client.mjs --url "$u" --sdk v1
    check "ts-$mode py auto" ok "$PY" py-client.py --url "$u"
    check "ts-$mode py pin" "$modern_ok" "$PY" py-client.py --url "$u" --mode 2026-07-28
    check_hang "ts-$mode ts hang" "ts-$mode" node ts-client.mjs --url "$u" --mode auto
    check_hang "ts-$mode py hang" "ts-$mode" "$PY" py-client.py --url "$u"
    [[ $mode == v2-session ]] || continue
    # the sessionful 2025 leg: py legacy, legacy cancellation, and the session HTTP contract
    check "ts-$mode py legacy" ok "$PY" py-client.py --url "$u" --mode legacy
    check_hang "ts-$mode ts legacy hang" "ts-$mode" node ts-client.mjs --url "$u" --mode legacy
    check "ts-$mode session http" ok node --input-type=module -e "$SESSION_PROBE" "$u"
done
start ts-sse node ts-server.mjs --mode legacy-sse --instance sse --port 0
u=http://127.0.0.1:$PORT/sse
check "ts-sse ts" ok node ts-client.mjs --url "$u" --transport sse --mode legacy
check "ts-sse ts v1" ok node ts-client.mjs --url "$u" --transport sse --sdk v1
check "ts-sse py" ok "$PY" py-client.py --url "$u" --transport sse
check_hang "ts-sse ts hang" ts-sse node ts-client.mjs --url "$u" --transport sse --mode legacy

for flag in "" --stateless; do
    name=py-http$flag
    start "$name" "$PY" py-server.py --transport streamable-http $flag --instance "$name" --port 0
    u=http://127.0.0.1:$PORT/mcp
    check "$name ts auto" ok node ts-client.mjs --url "$u" --mode auto
    check "$name ts pin" ok node ts-client.mjs --url "$u" --mode pin
    check "$name ts legacy" ok node ts-client.mjs --url "$u" --mode legacy
    check "$name py auto" ok "$PY" py-client.py --url "$u"
    check "$name py pin" ok "$PY" py-client.py --url "$u" --mode 2026-07-28
    check "$name py legacy" ok "$PY" py-client.py --url "$u" --mode legacy
    check_hang "$name py hang" "$name" "$PY" py-client.py --url "$u"
    check_hang "$name ts hang" "$name" node ts-client.mjs --url "$u" --mode legacy
done
start py-sse "$PY" py-server.py --transport sse --instance py-sse --port 0
u=http://127.0.0.1:$PORT/sse
check "py-sse ts" ok node ts-client.mjs --url "$u" --transport sse --mode legacy
check "py-sse py" ok "$PY" py-client.py --url "$u" --transport sse
check_hang "py-sse py hang" py-sse "$PY" py-client.py --url "$u" --transport sse

echo "$pass passed, $fail failed"
(( fail == 0 ))
