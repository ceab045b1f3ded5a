#!/usr/bin/env bash
# Offline checks of the operations files: alert rules and their unit tests (promtool), the
# Grafana dashboard (JSON, and every panel query parsed as PromQL), every Kubernetes manifest
# under deploy/ against the Kubernetes schemas (kubernetes-validate --strict), the kustomize
# builds (which also validate every kustomization file: kustomize rejects unknown fields), no
# Secret in any rendered build, the TLS example's Certificate against the Secret volume, ports and
# listener it must match, and the ConfigMaps' embedded mcp-edge.toml (as files and as rendered by
# each build) with `mcp-edge --check`; TLS listeners are checked against a throwaway certificate
# made with openssl. Then the Helm chart deploy/helm/mcp-edge, with Helm itself (helm-python-sdk:
# Helm 4's Go SDK, no helm binary; scripts/check-helm.py): helm lint, a render for the default
# values and every examples/*.yaml, each validated like the kustomize builds and its
# mcp-edge.toml --checked, the default render equal to deploy/base (the cert-manager and Redis
# examples to deploy/examples/tls and redis), the README's values table against values.yaml,
# the schema against docs/configuration.md, checks that must fail (a broken template, values
# the schema refuses, a config the edge refuses), and `helm package` into target/helm/ (the CI
# artifact) with appVersion = the crate's version.
#
#   bash scripts/check-ops.sh
#
# Installs what it needs when missing, and only then uses the network: promtool (Debian package
# `prometheus`, when run as root), a venv at deploy/.venv-validate from the pinned
# deploy/requirements-validate.txt, and the pinned kustomize (scripts/setup-ops.sh). Everything
# after that runs offline (kubernetes-validate ships its schemas). A failed install fails the
# script. The ConfigMap check uses target/{debug,release}/mcp-edge when one is built (the newer
# of the two); without one it is skipped, as are TLS listeners without openssl (installed when
# run as root), and a skip fails the script under CI (CI set and not false or 0). This script
# never runs cargo. Exit status: 0 only when every check passed.
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

# openssl makes the throwaway certificate the TLS listeners are --checked with.
ensure_openssl() {
    if command -v openssl >/dev/null 2>&1 || ! is_root; then
        return
    fi
    section "installing openssl"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends openssl >/dev/null
}

install_promtool
ensure_venv
ensure_openssl
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
# Custom resources (these API groups: ServiceMonitor, cert-manager's Certificate) have no schema
# offline; they are only parsed as YAML and checked below and in the builds.
# Kustomization files are not Kubernetes objects: the kustomize builds below validate them.
export CRD_GROUPS="monitoring.coreos.com/ cert-manager.io/"
is_crd() {
    "$PY" - "$1" <<'EOF'
import os, sys, yaml
groups = tuple(os.environ["CRD_GROUPS"].split())
with open(sys.argv[1]) as fh:
    docs = [d for d in yaml.safe_load_all(fh) if d]
sys.exit(0 if any(str(d.get("apiVersion", "")).startswith(groups) for d in docs) else 1)
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
# Patch files named by a kustomization are partial objects (or JSON patches): not validated on
# their own, but through the rendered build of that kustomization below.
mapfile -t patchfiles < <("$PY" - <<'EOF'
import os, subprocess, yaml
found = subprocess.run(["find", "deploy", "-path", "deploy/.venv-validate", "-prune", "-o", "-type", "f",
                        "(", "-name", "kustomization.yaml", "-o", "-name", "kustomization.yml", ")", "-print"],
                       capture_output=True, text=True, check=True).stdout.split()
for k in sorted(found):
    with open(k) as fh:
        doc = yaml.safe_load(fh) or {}
    entries = [p.get("path") for p in (doc.get("patches") or []) + (doc.get("patchesJson6902") or [])]
    entries += list(doc.get("patchesStrategicMerge") or [])
    for e in entries:
        if e and not e.lstrip().startswith(("apiVersion", "-", "{", "[")):
            print(os.path.normpath(os.path.join(os.path.dirname(k), e)))
EOF
)
# The Helm chart's files are templates and values, not manifests: its renders are validated in
# the Helm section below.
mapfile -t manifests < <(find deploy \( -path "$VENV" -o -path deploy/helm \) -prune -o -type f \( -name '*.yaml' -o -name '*.yml' \) \
    ! -name kustomization.yaml ! -name kustomization.yml -print | sort \
    | grep -vxF -f <(printf '%s\n' "${patchfiles[@]}" "/nonexistent"))
[ "${#manifests[@]}" -gt 0 ] || fail "no Kubernetes manifest found under deploy/"
for f in "${patchfiles[@]}"; do
    if [ -f "$f" ]; then
        echo "patch: $f (validated in its kustomization's rendered build)"
    else
        fail "$f: named as a patch by a kustomization, missing"
    fi
done
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
            services += [d for d in yaml.safe_load_all(fh) if isinstance(d, dict) and d.get("kind") == "Service"]
for d in docs:
    if d.get("kind") == "Certificate":
        # The Secret a Deployment mounts is checked against the rendered build below.
        spec = d.get("spec") or {}
        missing = [k for k in ("secretName", "dnsNames", "issuerRef") if not spec.get(k)]
        missing += ["issuerRef." + k for k in ("name", "kind") if not (spec.get("issuerRef") or {}).get(k)]
        if missing or str(d.get("apiVersion")) != "cert-manager.io/v1":
            sys.exit(f"{path}: Certificate/{d['metadata']['name']}: needs apiVersion cert-manager.io/v1, missing {missing}")
        print(f"{path}: Certificate/{d['metadata']['name']} → Secret {spec['secretName']}, {len(spec['dnsNames'])} DNS names, issuer {spec['issuerRef']['kind']}/{spec['issuerRef']['name']}")
        continue
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
            pass "$f: valid YAML (a custom resource: no schema offline; ServiceMonitor selector/port, Certificate fields)"
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
import os, sys, yaml
groups = tuple(os.environ["CRD_GROUPS"].split())
with open(sys.argv[1]) as fh:
    docs = [d for d in yaml.safe_load_all(fh) if d]
secrets = [d["metadata"]["name"] for d in docs if d.get("kind") == "Secret"]
if secrets:
    sys.exit(f"{sys.argv[1]}: renders Secret(s) {secrets}; create key Secrets by hand")
core = [d for d in docs if not str(d.get("apiVersion", "")).startswith(groups)]
with open(sys.argv[2], "w") as fh:
    yaml.safe_dump_all(core, fh, sort_keys=False)
print("rendered: " + ", ".join(f"{d['kind']}/{d['metadata']['name']}" for d in docs))
EOF
    then
        if validate "$out.core.yaml" >"$WORK/kv.out" 2>&1; then
            pass "${KUSTOMIZE[*]} $dir: renders, every built-in object validates (custom resources excepted), no Secret"
        else
            cat "$WORK/kv.out"
            fail "${KUSTOMIZE[*]} $dir: rendered objects"
        fi
    else
        fail "${KUSTOMIZE[*]} $dir"
    fi
done

# ---- the TLS example ----------------------------------------------------------------------

section "TLS example (deploy/examples/tls: Certificate, Secret volume, listener, ports)"
# The pieces the overlay spreads over five files must agree: the Certificate's Secret is the one
# the Deployment mounts (read-only, 0440, tls.crt and tls.key), the [listeners.tls] files are in
# that mount, the TLS listener's port is a container port the Service targets and the
# NetworkPolicy admits, and the overlay's mcp-edge.toml equals the base's apart from
# [[listeners]] and [forwarding] (it is a full copy: this catches the two drifting apart).
TLS_DIR=deploy/examples/tls
TLS_OUT="$WORK/$(echo "$TLS_DIR" | tr / _).yaml"
BASE_OUT="$WORK/deploy_base.yaml"
if [ ! -s "$TLS_OUT" ] || [ ! -s "$BASE_OUT" ]; then
    fail "$TLS_DIR: no rendered build of it and deploy/base to check (see the kustomize builds above)"
elif "$PY" - "$TLS_OUT" "$BASE_OUT" <<'EOF'
import sys, tomllib, yaml
tls_out, base_out = sys.argv[1], sys.argv[2]
def load(path):
    with open(path) as fh:
        return [d for d in yaml.safe_load_all(fh) if d]
def one(docs, kind):
    found = [d for d in docs if d.get("kind") == kind]
    if len(found) != 1:
        sys.exit(f"expected one {kind}, the build renders {len(found)}")
    return found[0]
def toml_of(docs):
    data = one(docs, "ConfigMap").get("data") or {}
    return tomllib.loads(data["mcp-edge.toml"])
docs = load(tls_out)
cert = one(docs, "Certificate")
secret = cert["spec"]["secretName"]
dep = one(docs, "Deployment")
pod = dep["spec"]["template"]["spec"]
container = next(c for c in pod["containers"] if c["name"] == "mcp-edge")
vols = [v for v in pod.get("volumes", []) if (v.get("secret") or {}).get("secretName") == secret]
if len(vols) != 1:
    sys.exit(f"Certificate/{cert['metadata']['name']} writes Secret {secret}, which the Deployment does not mount as one volume ({len(vols)})")
vol = vols[0]
mounts = [m for m in container.get("volumeMounts", []) if m["name"] == vol["name"]]
if len(mounts) != 1 or not mounts[0].get("readOnly") or mounts[0].get("subPath"):
    sys.exit(f"volume {vol['name']} (Secret {secret}): needs exactly one readOnly mount without subPath, has {mounts}")
mount = mounts[0]["mountPath"].rstrip("/")
if vol["secret"].get("defaultMode") != 0o440:
    sys.exit(f"volume {vol['name']}: defaultMode must be 0440 (readable by fsGroup 10001 only), is {vol['secret'].get('defaultMode')}")
items = {i["path"] for i in vol["secret"].get("items", [])}
if items and items != {"tls.crt", "tls.key"}:
    sys.exit(f"volume {vol['name']}: items {sorted(items)}, want tls.crt and tls.key")
config = toml_of(docs)
tls_listeners = [l for l in config.get("listeners", []) if "tls" in l]
if not tls_listeners:
    sys.exit("the rendered mcp-edge.toml has no [listeners.tls]")
ports = {p["containerPort"]: p.get("name") for p in container.get("ports", [])}
# The MCP Service (mcp-edge-peers, the replicas' headless one, serves only the admin port).
svc = next((d for d in docs if d.get("kind") == "Service" and d["metadata"]["name"] == "mcp-edge"), None)
if svc is None:
    sys.exit("the build renders no Service mcp-edge")
netpol = one(docs, "NetworkPolicy")
for l in tls_listeners:
    for c in l["tls"]["certificates"]:
        for k, want in (("cert", "tls.crt"), ("key", "tls.key")):
            if c[k] != f"{mount}/{want}":
                sys.exit(f"[listeners.tls] {k} = {c[k]!r}: want {mount}/{want} (the Secret {secret} mount)")
    port = int(l["address"].rsplit(":", 1)[1])
    if port not in ports:
        sys.exit(f"listener {l['address']}: port {port} is not a container port ({sorted(ports)})")
    if not any(p.get("targetPort") in (port, ports[port]) for p in svc["spec"]["ports"]):
        sys.exit(f"listener {l['address']}: no Service port targets {port} or {ports[port]!r}")
    if not any(p.get("port") in (port, ports[port]) for r in netpol["spec"].get("ingress", []) for p in r.get("ports", [])):
        sys.exit(f"listener {l['address']}: the NetworkPolicy admits no ingress on {port}")
base = toml_of(load(base_out))
for t in (config, base):
    t.pop("listeners", None)
    t.pop("forwarding", None)
if config != base:
    diff = sorted(k for k in set(config) | set(base) if config.get(k) != base.get(k))
    sys.exit(f"the overlay's mcp-edge.toml differs from deploy/base's outside [[listeners]]/[forwarding], in {diff}: copy the change over")
svc_ports = [f"{p['port']}→{p['targetPort']}" for p in svc["spec"]["ports"]]
print(f"Certificate/{cert['metadata']['name']} → Secret {secret} → volume {vol['name']} at {mount} (0440, read-only) = [listeners.tls] files; "
      f"listener port(s) {[l['address'] for l in tls_listeners]}: container {sorted(ports)}, Service {svc_ports}, NetworkPolicy admits it")
EOF
then
    pass "$TLS_DIR: Certificate's Secret is the mounted one, listener files/ports match, TOML equals the base's but for listeners/forwarding"
else
    fail "$TLS_DIR: Certificate, Secret volume, listener and ports"
fi

section "Redis example (deploy/examples/redis: the TOML, the password mount, the egress)"
# The overlay's mcp-edge.toml is a full copy of the base's plus a rate limit and [rate_limits]:
# equal to the base's elsewhere; its redis_password_file is in the mounted Secret; the
# NetworkPolicy lets the edge reach the Redis port the URL names.
REDIS_DIR=deploy/examples/redis
REDIS_OUT="$WORK/$(echo "$REDIS_DIR" | tr / _).yaml"
if [ ! -s "$REDIS_OUT" ] || [ ! -s "$BASE_OUT" ]; then
    fail "$REDIS_DIR: no rendered build of it and deploy/base to check (see the kustomize builds above)"
elif "$PY" - "$REDIS_OUT" "$BASE_OUT" <<'EOF'
import sys, tomllib, yaml
def load(path):
    with open(path) as fh:
        return [d for d in yaml.safe_load_all(fh) if d]
def toml_of(docs):
    cm = [d for d in docs if d.get("kind") == "ConfigMap" and d["metadata"]["name"] == "mcp-edge-config"]
    return tomllib.loads(cm[0]["data"]["mcp-edge.toml"])
docs = load(sys.argv[1])
config, base = toml_of(docs), toml_of(load(sys.argv[2]))
rl = config.get("rate_limits")
if not rl or not any("rate_limit" in r for r in config.get("routes", [])):
    sys.exit("the overlay's mcp-edge.toml has no [rate_limits] or no route with a rate_limit")
dep = next(d for d in docs if d.get("kind") == "Deployment" and d["metadata"]["name"] == "mcp-edge")
container = next(c for c in dep["spec"]["template"]["spec"]["containers"] if c["name"] == "mcp-edge")
mounts = {m["mountPath"].rstrip("/") for m in container.get("volumeMounts", [])}
pw = rl.get("redis_password_file", "")
if pw.rsplit("/", 1)[0] not in mounts:
    sys.exit(f"redis_password_file {pw!r} is in no mounted volume ({sorted(mounts)})")
port = int(rl["redis"].split("://", 1)[1].split("/", 1)[0].rsplit(":", 1)[1])
netpol = next(d for d in docs if d.get("kind") == "NetworkPolicy" and d["metadata"]["name"] == "mcp-edge")
if not any(p.get("port") == port for r in netpol["spec"].get("egress", []) for p in r.get("ports", [])):
    sys.exit(f"the NetworkPolicy allows no egress to the Redis port {port}")
for t in (config, base):
    t.pop("rate_limits", None)
    for r in t.get("routes", []):
        r.pop("rate_limit", None)
if config != base:
    diff = sorted(k for k in set(config) | set(base) if config.get(k) != base.get(k))
    sys.exit(f"the overlay's mcp-edge.toml differs from deploy/base's outside the rate limits, in {diff}: copy the change over")
print(f"[rate_limits] {rl['redis']}: password file mounted, egress to {port} allowed, TOML equals the base's but for the rate limits")
EOF
then
    pass "$REDIS_DIR: the password file mounted, egress to Redis, TOML equals the base's but for the rate limits"
else
    fail "$REDIS_DIR: TOML, password mount, egress"
fi

# ---- the ConfigMaps' mcp-edge.toml ---------------------------------------------------------

section "ConfigMap configuration (mcp-edge --check)"
BIN=""
for candidate in target/debug/mcp-edge target/release/mcp-edge; do
    if [ -x "$candidate" ] && { [ -z "$BIN" ] || [ "$candidate" -nt "$BIN" ]; }; then
        BIN=$candidate
    fi
done
# The key ring path and variable point at a throwaway test ring (the real one is the hand-made
# Secret); the TLS listeners' /etc/mcp-edge/tls/ files at a throwaway certificate (the real one
# is cert-manager's or the hand-made Secret). Exit 3: a file was not checked (no certificate).
cat >"$WORK/check-toml.py" <<'EOF'
import os, re, subprocess, sys, yaml
binary, work, tls_dir, where, files = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]
test_ring = "1:MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="
keys = os.path.join(work, "session-keys")
with open(keys, "w") as fh:
    fh.write(test_ring + "\n")
checked, bad, unchecked = 0, 0, 0
for path in files:
    with open(path) as fh:
        docs = [d for d in yaml.safe_load_all(fh) if d]
    for d in docs:
        if d.get("kind") != "ConfigMap":
            continue
        for key, text in (d.get("data") or {}).items():
            if not key.endswith(".toml"):
                continue
            label = f"{path}: ConfigMap/{d['metadata']['name']} {key}"
            env = dict(os.environ)
            for var in re.findall(r'(?m)^\s*keys_env\s*=\s*"([^"]+)"', text):
                env[var] = test_ring
            # The Downward API's pod address, as [fleet] advertise takes it.
            env.setdefault("POD_IP", "10.0.0.10")
            text = re.sub(r'(?m)^(\s*keys_file\s*=\s*).*$', lambda m: m.group(1) + '"%s"' % keys, text)
            # The Redis password file is a hand-made Secret's: a throwaway one here.
            password = os.path.join(work, "redis-password")
            with open(password, "w") as fh:
                fh.write("throwaway\n")
            text = re.sub(r'(?m)^(\s*redis_password_file\s*=\s*).*$',
                          lambda m: m.group(1) + '"%s"' % password, text)
            note = ""
            if "/etc/mcp-edge/tls/" in text:
                if not tls_dir:
                    unchecked += 1
                    print(f"{label}: NOT CHECKED (TLS listener, and no throwaway certificate)")
                    continue
                text = text.replace("/etc/mcp-edge/tls/", tls_dir.rstrip("/") + "/")
                note = " (TLS files: the throwaway certificate)"
            out = os.path.join(work, "%s-%s-%s" % (path.replace("/", "_"), d["metadata"]["name"], key))
            with open(out, "w") as fh:
                fh.write(text)
            r = subprocess.run([binary, "--check", out], env=env, capture_output=True, text=True)
            checked += 1
            if r.returncode == 0:
                print(f"{label}: ok{note}")
            else:
                bad += 1
                print(f"{label}: REJECTED{note}\n{r.stdout}{r.stderr}")
if checked + unchecked == 0 and where == "files":
    sys.exit("no ConfigMap with a .toml key under deploy/")
sys.exit(1 if bad else 3 if unchecked else 0)
EOF
if [ -z "$BIN" ]; then
    skip "no target/debug/mcp-edge or target/release/mcp-edge: build one (cargo build) to --check the ConfigMap"
else
    echo "using $BIN (the newer build)"
    # A self-signed P-256 certificate for the name mcp-edge, valid one day, in the temp dir.
    TLS_CERTS="$WORK/tls"
    mkdir -p "$TLS_CERTS"
    if ! command -v openssl >/dev/null 2>&1; then
        skip "no openssl (run as root to install it): TLS listeners cannot be --checked"
        TLS_CERTS=""
    elif ! openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 \
        -subj /CN=mcp-edge -addext subjectAltName=DNS:mcp-edge \
        -keyout "$TLS_CERTS/tls.key" -out "$TLS_CERTS/tls.crt" >"$WORK/openssl.out" 2>&1; then
        cat "$WORK/openssl.out"
        fail "openssl: making the throwaway TLS certificate"
        TLS_CERTS=""
    fi
    # Every *.toml key of every ConfigMap file under deploy/, then of every rendered build (an
    # overlay's ConfigMap patch is only whole there).
    rc=0
    "$PY" "$WORK/check-toml.py" "$BIN" "$WORK" "$TLS_CERTS" files "${manifests[@]}" || rc=$?
    case $rc in
        0) pass "ConfigMap files: TOML passes $BIN --check" ;;
        3) skip "ConfigMap files: a TLS listener's TOML not --checked (no throwaway certificate)" ;;
        *) fail "ConfigMap files: TOML with $BIN --check" ;;
    esac
    for dir in "${kdirs[@]}"; do
        out="$WORK/$(echo "$dir" | tr / _).yaml"
        [ -s "$out" ] || continue  # the build failed above
        grep -q '^kind: ConfigMap$' "$out" || continue
        rc=0
        "$PY" "$WORK/check-toml.py" "$BIN" "$WORK" "$TLS_CERTS" build "$out" \
            | sed "s|^$WORK/[^:]*|${KUSTOMIZE[*]} $dir|" || rc=${PIPESTATUS[0]}
        case $rc in
            0) pass "${KUSTOMIZE[*]} $dir: rendered ConfigMap TOML passes $BIN --check" ;;
            3) skip "${KUSTOMIZE[*]} $dir: TLS listener TOML not --checked (no throwaway certificate)" ;;
            *) fail "${KUSTOMIZE[*]} $dir: rendered ConfigMap TOML with $BIN --check" ;;
        esac
    done
fi

# ---- the Helm chart ------------------------------------------------------------------------

CHART=deploy/helm/mcp-edge
HELM=("$PY" scripts/check-helm.py)
section "Helm chart ($CHART; Helm $("$PY" -c 'import helm_python as h; print(h.helm_sdk_version(), "through helm-python-sdk", h.__version__)'))"

# helm lint, with the default values and with each example's.
if "${HELM[@]}" lint "$CHART" "$CHART"/examples/*.yaml; then
    pass "helm lint $CHART: no warning or error (default values and every example)"
else
    fail "helm lint $CHART"
fi
if "${HELM[@]}" values-table "$CHART"; then
    pass "$CHART/README.md: the values table documents every key of values.yaml, no other, with its default"
else
    fail "$CHART/README.md: the values table against values.yaml"
fi
if "${HELM[@]}" schema-docs "$CHART" docs/configuration.md; then
    pass "$CHART/values.schema.json: the config tables' keys are docs/configuration.md's"
else
    fail "$CHART/values.schema.json against docs/configuration.md"
fi

# Render (values.schema.json first), validate every object like the kustomize builds' (custom
# resources aside), no Secret, the objects agree with the mcp-edge.toml they carry.
# helm_render NAME VALUES OUT [render options]: 0 when it rendered and validated.
helm_render() {
    local label=$1 values=$2 out=$3
    shift 3
    if ! "${HELM[@]}" render "$CHART" "$values" "$out" "$@" >"$WORK/helm-render.out" 2>&1; then
        cat "$WORK/helm-render.out"
        fail "helm template $CHART ($label)"
        return 1
    fi
    cat "$WORK/helm-render.out"
    if validate "$out.core.yaml" >"$WORK/kv.out" 2>&1; then
        pass "helm template $CHART ($label): $(head -n1 "$WORK/helm-render.out" | cut -d: -f1), each built-in one valid (--strict), no Secret, ports/names/mounts match its mcp-edge.toml"
    else
        cat "$WORK/kv.out"
        fail "helm template $CHART ($label): rendered objects"
        return 1
    fi
}
helm_renders=()
for values in - "$CHART"/examples/*.yaml; do
    if [ "$values" = - ]; then name=default; else name=$(basename "$values" .yaml); fi
    out="$WORK/helm-$name.yaml"
    with=()
    # An example's own manifests (e.g. the ConfigMap of existing-configmap) go with its render.
    if [ -f "$CHART/examples/manifests/$name.yaml" ]; then
        with=(--with "$CHART/examples/manifests/$name.yaml")
    fi
    if helm_render "${values/#-/default values}" "$values" "$out" "${with[@]}"; then
        helm_renders+=("$out")
    fi
done
# Another release name: every name derives from it.
helm_render "default values, release team-a" - "$WORK/helm-team-a.yaml" --name team-a --namespace team-a || true

# The default render is deploy/base; the cert-manager and Redis examples are the kustomize ones.
for pair in "default:deploy/base" "cert-manager:deploy/examples/tls" "redis:deploy/examples/redis"; do
    name=${pair%%:*}
    dir=${pair#*:}
    kout="$WORK/$(echo "$dir" | tr / _).yaml"
    if [ ! -s "$WORK/helm-$name.yaml" ] || [ ! -s "$kout" ]; then
        fail "helm template ($name) against ${KUSTOMIZE[*]} $dir: one of the two did not render (see above)"
    elif "${HELM[@]}" compare "$WORK/helm-$name.yaml" "$kout"; then
        pass "helm template ($name) and ${KUSTOMIZE[*]} $dir: the same objects (kinds, names, ports, probes, security context, resources, every other field)"
    else
        fail "helm template ($name) against ${KUSTOMIZE[*]} $dir"
    fi
done

# Every render's mcp-edge.toml, as the edge reads it.
if [ -z "$BIN" ]; then
    skip "no target/debug/mcp-edge or target/release/mcp-edge: the chart's mcp-edge.toml not --checked"
else
    for out in "${helm_renders[@]}"; do
        rc=0
        "$PY" "$WORK/check-toml.py" "$BIN" "$WORK" "${TLS_CERTS:-}" build "$out" \
            | sed "s|^$WORK/helm-\([^:]*\).yaml|helm template (\1)|" || rc=${PIPESTATUS[0]}
        label=$(basename "$out" .yaml)
        case $rc in
            0) pass "helm template (${label#helm-}): mcp-edge.toml passes $BIN --check" ;;
            3) skip "helm template (${label#helm-}): TLS listener TOML not --checked (no throwaway certificate)" ;;
            *) fail "helm template (${label#helm-}): mcp-edge.toml with $BIN --check" ;;
        esac
    done
fi

section "Helm chart: checks that must fail"
# Each check above must be able to fail: a broken template fails lint and render, values the
# schema refuses fail the render, a config the edge refuses fails --check, a key missing from
# the README fails the values table. Each on a copy of the chart in the temp dir.
# expect_failure LABEL PATTERN COMMAND...: COMMAND must fail, saying PATTERN (grep -E).
expect_failure() {
    local label=$1 pattern=$2 rc=0
    shift 2
    "$@" >"$WORK/neg.out" 2>&1 || rc=$?
    if [ "$rc" -eq 0 ]; then
        cat "$WORK/neg.out"
        fail "$label: the check passed"
    elif grep -Eq "$pattern" "$WORK/neg.out"; then
        pass "$label: fails as it must ($(grep -Em1 "$pattern" "$WORK/neg.out" | sed 's/^ *//' | cut -c1-110))"
    else
        cat "$WORK/neg.out"
        fail "$label: failed, but not with /$pattern/"
    fi
}
BROKEN="$WORK/broken/mcp-edge"
mkdir -p "$WORK/broken"
cp -r "$CHART" "$BROKEN"
printf '{{- if .Values.image }}\n' >>"$BROKEN/templates/deployment.yaml"
expect_failure "helm lint, a template with an unclosed {{ if }}" "deployment.yaml.*(unexpected EOF|parse error)|parse error.*deployment.yaml" \
    "${HELM[@]}" lint "$BROKEN"
expect_failure "helm template, a template with an unclosed {{ if }}" "deployment.yaml" \
    "${HELM[@]}" render "$BROKEN" - "$WORK/neg-render.yaml"
printf 'image:\n  repo: registry.example.com/mcp-edge\n' >"$WORK/neg-values-image.yaml"
expect_failure "helm template, values with a typo (image.repo)" "additional propert.*'repo'" \
    "${HELM[@]}" render "$CHART" "$WORK/neg-values-image.yaml" "$WORK/neg-render.yaml"
printf 'config:\n  server:\n    thread: 4\n' >"$WORK/neg-values-config.yaml"
expect_failure "helm template, an mcp-edge.toml key with a typo (config.server.thread)" "additional propert.*'thread'" \
    "${HELM[@]}" render "$CHART" "$WORK/neg-values-config.yaml" "$WORK/neg-render.yaml"
if [ -z "$BIN" ]; then
    skip "no mcp-edge binary: the expected failure of a config the edge refuses not run"
else
    printf 'config:\n  routes:\n    - path: /mcp\n      pool: nowhere\n' >"$WORK/neg-values-edge.yaml"
    if "${HELM[@]}" render "$CHART" "$WORK/neg-values-edge.yaml" "$WORK/neg-edge.yaml" >"$WORK/neg.out" 2>&1; then
        expect_failure "mcp-edge --check, a render whose route names no pool (the schema accepts it)" "unknown pool 'nowhere'" \
            "$PY" "$WORK/check-toml.py" "$BIN" "$WORK" "${TLS_CERTS:-}" build "$WORK/neg-edge.yaml"
    else
        cat "$WORK/neg.out"
        fail "helm template with a route to an unknown pool: the render itself failed"
    fi
fi
sed -i 's/^logLevel: info$/logLevel: info\nundocumentedKey: 1/' "$BROKEN/values.yaml"
expect_failure "values table, a values.yaml key the README does not document" "undocumentedKey" \
    "${HELM[@]}" values-table "$BROKEN"

section "Helm chart: package (target/helm/)"
# The CI artifact: the chart packaged by Helm, appVersion = Cargo.toml's version.
rm -f target/helm/*.tgz
if "${HELM[@]}" package "$CHART" target/helm Cargo.toml; then
    pass "helm package $CHART → $(ls target/helm/*.tgz): appVersion = the crate's version, loads, lints and renders as the directory"
else
    fail "helm package $CHART"
fi

printf '\ncheck-ops: %d passed, %d failed, %d skipped\n' "$passed" "$failed" "$skipped"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
