#!/usr/bin/env bash
# Offline checks of the operations files: alert rules and their unit tests (promtool), the
# Grafana dashboard (JSON, and every panel query parsed as PromQL), every Kubernetes manifest
# under deploy/ against the Kubernetes schemas (kubernetes-validate --strict), the kustomize
# builds (which also validate every kustomization file: kustomize rejects unknown fields), no
# Secret in any rendered build, and the ConfigMap's embedded mcp-edge.toml with `mcp-edge --check`.
#
#   bash scripts/check-ops.sh
#
# Installs what it needs when missing, and only then uses the network: promtool (Debian package
# `prometheus`, when run as root), a venv at deploy/.venv-validate from the pinned
# deploy/requirements-validate.txt, and the pinned kustomize (scripts/setup-ops.sh). Everything
# after that runs offline (kubernetes-validate ships its schemas). A failed install fails the
# script. The ConfigMap check uses target/{debug,release}/mcp-edge when one is built (the newer
# of the two); without one it is skipped, and a skip fails the script under CI (CI set and not
# false or 0). This script never runs cargo. Exit status: 0 only when every check passed.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=deploy/.venv-validate
REQ=deploy/requirements-validate.txt
passed=0
failed=0
skipped=0

section() { printf '\n== %s\n' "$1"; }
pass() { printf 'ok: %s\n' "$1"; passed=$((passed + 1)); }
fail() { printf 'FAIL: %s\n' "$1"; failed=$((failed + 1)); }
is_root() { [ "$(id -u)" -eq 0 ]; }
case "${CI:-}" in "" | 0 | false | False | FALSE) in_ci=0 ;; *) in_ci=1 ;; esac
# Under CI a check that could not run is a failure: a green run must mean it ran.
skip() {
    if [ "$in_ci" = 1 ]; then
        fail "$1 (not run, and CI=$CI)"
    else
        printf 'skip: %s\n' "$1"
        skipped=$((skipped + 1))
    fi
}

WORK=$(mktemp -d)
POLICY_RC_ADDED=0
cleanup() {
    rm -rf "$WORK"
    if [ "$POLICY_RC_ADDED" = 1 ]; then rm -f /usr/sbin/policy-rc.d; fi
}
trap cleanup EXIT

# ---- installs ------------------------------------------------------------------------------

# pgrep exits 1 when no process matches: that is an empty list, not an error.
prometheus_pids() {
    local rc=0
    pgrep -x prometheus || rc=$?
    [ "$rc" -le 1 ]
}

install_promtool() {
    if command -v promtool >/dev/null 2>&1; then
        return
    fi
    if ! is_root; then
        echo "check-ops: promtool is missing; run as root to install it, or: apt-get install prometheus" >&2
        exit 1
    fi
    section "installing promtool (Debian package prometheus)"
    local before pid
    before=" $(prometheus_pids | tr '\n' ' ') "
    # The package's maintainer scripts start the Prometheus server (listening on :9090, a port
    # the edge and its tests use). A policy-rc.d answering 101 tells invoke-rc.d not to.
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\n# check-ops.sh: no service starts during its apt-get install\nexit 101\n' \
            >/usr/sbin/policy-rc.d
        chmod 755 /usr/sbin/policy-rc.d
        POLICY_RC_ADDED=1
    fi
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null
    if [ "$POLICY_RC_ADDED" = 1 ]; then
        rm -f /usr/sbin/policy-rc.d
        POLICY_RC_ADDED=0
    fi
    # Whatever the init system did anyway: stop it, and end any prometheus process that was
    # not running before the install (by pid, nothing else). Cleanup only: `|| true` ignores
    # a missing systemd and a process that has already gone.
    systemctl stop prometheus 2>/dev/null || true
    systemctl disable prometheus 2>/dev/null || true
    for pid in $(prometheus_pids); do
        case "$before" in *" $pid "*) continue ;; esac
        echo "stopping prometheus pid $pid, started by the package install"
        kill "$pid" 2>/dev/null || true
        for _ in 1 2 3 4 5 6 7 8 9 10; do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.5
        done
        kill -9 "$pid" 2>/dev/null || true
    done
    command -v promtool >/dev/null 2>&1 || { echo "check-ops: promtool still missing after the install" >&2; exit 1; }
}

ensure_venv() {
    if [ -x "$VENV/bin/kubernetes-validate" ] && cmp -s "$REQ" "$VENV/.requirements-installed"; then
        return
    fi
    section "creating $VENV from $REQ"
    if ! command -v python3 >/dev/null 2>&1 || ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
        if is_root; then
            apt-get update -qq
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3 python3-venv >/dev/null
        else
            echo "check-ops: python3 with the venv module is needed (apt-get install python3-venv)" >&2
            exit 1
        fi
    fi
    rm -rf "$VENV"
    python3 -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-input -r "$REQ"
    cp "$REQ" "$VENV/.requirements-installed"
}

install_promtool
ensure_venv
PY="$VENV/bin/python"
KV="$VENV/bin/kubernetes-validate"
KUBECTL=$(bash scripts/setup-ops.sh)
echo "promtool: $(promtool --version 2>&1 | head -n1)"
echo "kubernetes-validate: $("$KV" --version 2>&1 | tail -n1)"
echo "kustomize: $("$KUBECTL" version --client | tr '\n' ' ')($KUBECTL)"

# ---- alert rules ---------------------------------------------------------------------------

section "alert rules"
if promtool check rules dashboards/alerts.yml; then
    pass "promtool check rules dashboards/alerts.yml"
else
    fail "promtool check rules dashboards/alerts.yml"
fi
if promtool test rules dashboards/alerts_test.yml; then
    pass "promtool test rules dashboards/alerts_test.yml"
else
    fail "promtool test rules dashboards/alerts_test.yml"
fi

# ---- dashboards ----------------------------------------------------------------------------

section "dashboards"
for f in dashboards/*.json; do
    # Parse, check the layout (unique panel ids), and write every panel query, with Grafana's
    # variables replaced, as a recording rule so promtool parses it as PromQL.
    if "$PY" - "$f" "$WORK/panel-queries.yml" <<'EOF'
import json, sys
path, out = sys.argv[1], sys.argv[2]
with open(path) as fh:
    d = json.load(fh)
panels = []
def walk(ps):
    for p in ps:
        panels.append(p)
        walk(p.get("panels", []))
walk(d.get("panels", []))
ids = [p.get("id") for p in panels]
dupes = sorted({i for i in ids if ids.count(i) > 1})
if dupes:
    sys.exit(f"{path}: duplicate panel ids {dupes}")
subst = {"$__rate_interval": "5m", "$__range": "1h", "$__interval": "1m",
         "$job": ".*", "$instance": ".*"}
rules = []
for p in panels:
    for t in p.get("targets", []):
        expr = t.get("expr")
        if not expr:
            continue
        for k, v in subst.items():
            expr = expr.replace(k, v)
        rules.append({"record": "panel_%s_%s" % (p.get("id"), t.get("refId", "A")), "expr": expr})
with open(out, "w") as fh:
    json.dump({"groups": [{"name": "dashboard-queries", "rules": rules}]}, fh)
print(f"{path}: valid JSON, {len(panels)} panels, {len(rules)} queries")
EOF
    then
        pass "$f parses"
        if promtool check rules "$WORK/panel-queries.yml" >"$WORK/promtool.out" 2>&1; then
            pass "$f: every panel query is valid PromQL"
        else
            cat "$WORK/promtool.out"
            fail "$f: panel queries"
        fi
    else
        fail "$f parses"
    fi
done

# ---- Kubernetes manifests ------------------------------------------------------------------

section "Kubernetes manifests (kubernetes-validate --strict, offline schemas)"
# Custom resources have no schema offline; they are only parsed as YAML and checked below.
# Kustomization files are not Kubernetes objects: the kustomize builds below validate them.
is_crd() {
    "$PY" - "$1" <<'EOF'
import sys, yaml
with open(sys.argv[1]) as fh:
    docs = [d for d in yaml.safe_load_all(fh) if d]
sys.exit(0 if any(str(d.get("apiVersion", "")).startswith("monitoring.coreos.com/") for d in docs) else 1)
EOF
}
validate() {
    # kubernetes-validate exits 0 on a resource it has no schema for (a typo in apiVersion or
    # kind): count that warning as a failure.
    local f=$1 out rc=0
    out=$("$KV" --strict "$f" 2>&1) || rc=$?
    printf '%s\n' "$out"
    [ "$rc" -eq 0 ] && ! grep -q "Couldn't find schema" <<<"$out"
}
mapfile -t manifests < <(find deploy -path "$VENV" -prune -o -type f \( -name '*.yaml' -o -name '*.yml' \) \
    ! -name kustomization.yaml ! -name kustomization.yml -print | sort)
[ "${#manifests[@]}" -gt 0 ] || fail "no Kubernetes manifest found under deploy/"
for f in "${manifests[@]}"; do
    if is_crd "$f"; then
        if "$PY" - "$f" <<'EOF'
import os, sys, yaml
path = sys.argv[1]
with open(path) as fh:
    docs = [d for d in yaml.safe_load_all(fh) if d]
# The ServiceMonitor must select a Service of the same kustomization and name one of its ports.
services = []
here = os.path.dirname(path)
for name in sorted(os.listdir(here)):
    if name.endswith((".yaml", ".yml")):
        with open(os.path.join(here, name)) as fh:
            services += [d for d in yaml.safe_load_all(fh) if d and d.get("kind") == "Service"]
for d in docs:
    if d.get("kind") != "ServiceMonitor":
        continue
    spec = d["spec"]
    want = spec["selector"]["matchLabels"]
    matched = [s for s in services
               if all(s["metadata"].get("labels", {}).get(k) == v for k, v in want.items())]
    if not matched:
        sys.exit(f"{path}: no Service in {here} has the labels {want}")
    ports = {p.get("name") for s in matched for p in s["spec"]["ports"]}
    for e in spec["endpoints"]:
        if e.get("port") not in ports:
            sys.exit(f"{path}: endpoint port {e.get('port')!r} is not a port name of the Service ({sorted(ports)})")
    print(f"{path}: ServiceMonitor/{d['metadata']['name']} selects Service/{matched[0]['metadata']['name']}, port(s) {[e['port'] for e in spec['endpoints']]}")
EOF
        then
            pass "$f: valid YAML (ServiceMonitor is a CRD: no schema offline, YAML and selector/port only)"
        else
            fail "$f"
        fi
    elif validate "$f"; then
        pass "$f"
    else
        fail "$f"
    fi
done

section "kustomize builds (the kustomization files validated, no Secret rendered)"
# The pinned kustomize (scripts/setup-ops.sh), never whatever kustomize is on PATH.
KUSTOMIZE=("$KUBECTL" kustomize)
mapfile -t kdirs < <(find deploy -path "$VENV" -prune -o -type f \
    \( -name kustomization.yaml -o -name kustomization.yml -o -name Kustomization \) -printf '%h\n' | sort)
[ "${#kdirs[@]}" -gt 0 ] || fail "no kustomization under deploy/"
for dir in "${kdirs[@]}"; do
    out="$WORK/$(echo "$dir" | tr / _).yaml"
    if ! "${KUSTOMIZE[@]}" "$dir" >"$out"; then
        fail "${KUSTOMIZE[*]} $dir"
        continue
    fi
    # Validate the rendered objects (custom resources left out) and make sure no Secret is
    # rendered: key material is never applied from the repository.
    if "$PY" - "$out" "$out.core.yaml" <<'EOF'
import sys, yaml
with open(sys.argv[1]) as fh:
    docs = [d for d in yaml.safe_load_all(fh) if d]
secrets = [d["metadata"]["name"] for d in docs if d.get("kind") == "Secret"]
if secrets:
    sys.exit(f"{sys.argv[1]}: renders Secret(s) {secrets}; create key Secrets by hand")
core = [d for d in docs if not str(d.get("apiVersion", "")).startswith("monitoring.coreos.com/")]
with open(sys.argv[2], "w") as fh:
    yaml.safe_dump_all(core, fh, sort_keys=False)
print("rendered: " + ", ".join(f"{d['kind']}/{d['metadata']['name']}" for d in docs))
EOF
    then
        if validate "$out.core.yaml" >"$WORK/kv.out" 2>&1; then
            pass "${KUSTOMIZE[*]} $dir: renders, every built-in object validates, no Secret"
        else
            cat "$WORK/kv.out"
            fail "${KUSTOMIZE[*]} $dir: rendered objects"
        fi
    else
        fail "${KUSTOMIZE[*]} $dir"
    fi
done

# ---- the ConfigMap's mcp-edge.toml ---------------------------------------------------------

section "ConfigMap configuration (mcp-edge --check)"
BIN=""
for candidate in target/debug/mcp-edge target/release/mcp-edge; do
    if [ -x "$candidate" ] && { [ -z "$BIN" ] || [ "$candidate" -nt "$BIN" ]; }; then
        BIN=$candidate
    fi
done
if [ -z "$BIN" ]; then
    skip "no target/debug/mcp-edge or target/release/mcp-edge: build one (cargo build) to --check the ConfigMap"
else
    echo "using $BIN (the newer build)"
    # Every *.toml key of every ConfigMap under deploy/. The key ring path and variable point at
    # a throwaway test ring (the real one is the hand-made Secret).
    if "$PY" - "$BIN" "$WORK" "${manifests[@]}" <<'EOF'
import os, re, subprocess, sys, yaml
binary, work, files = sys.argv[1], sys.argv[2], sys.argv[3:]
test_ring = "1:MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="
keys = os.path.join(work, "session-keys")
with open(keys, "w") as fh:
    fh.write(test_ring + "\n")
checked, bad = 0, 0
for path in files:
    with open(path) as fh:
        docs = [d for d in yaml.safe_load_all(fh) if d]
    for d in docs:
        if d.get("kind") != "ConfigMap":
            continue
        for key, text in (d.get("data") or {}).items():
            if not key.endswith(".toml"):
                continue
            env = dict(os.environ)
            for var in re.findall(r'(?m)^\s*keys_env\s*=\s*"([^"]+)"', text):
                env[var] = test_ring
            text = re.sub(r'(?m)^(\s*keys_file\s*=\s*).*$', lambda m: m.group(1) + '"%s"' % keys, text)
            out = os.path.join(work, "%s-%s" % (d["metadata"]["name"], key))
            with open(out, "w") as fh:
                fh.write(text)
            r = subprocess.run([binary, "--check", out], env=env, capture_output=True, text=True)
            label = f"{path}: ConfigMap/{d['metadata']['name']} {key}"
            checked += 1
            if r.returncode == 0:
                print(f"{label}: ok")
            else:
                bad += 1
                print(f"{label}: REJECTED\n{r.stdout}{r.stderr}")
if checked == 0:
    sys.exit("no ConfigMap with a .toml key under deploy/")
sys.exit(1 if bad else 0)
EOF
    then
        pass "ConfigMap TOML passes $BIN --check"
    else
        fail "ConfigMap TOML with $BIN --check"
    fi
fi

printf '\ncheck-ops: %d passed, %d failed, %d skipped\n' "$passed" "$failed" "$skipped"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
