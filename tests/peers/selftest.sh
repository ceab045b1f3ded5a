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

for mode in modern dual legacy-session; do
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
