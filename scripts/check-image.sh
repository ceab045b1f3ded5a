#!/usr/bin/env bash
# Proves the container image builds and runs (CI runs it; needs root, a Linux host and the
# Debian package registry; no container registry).
#
#   bash scripts/check-image.sh
#
# 1. Replays the Dockerfile's builder stage on the host: its COPY lines are copied, and only
#    those, into target/image-check/build, and its cargo RUN lines run there as written (other
#    RUN lines, such as apt-get install cmake, are skipped; cmake and objcopy must be on the
#    host). A file the build needs that no COPY brings in fails here as it would in
#    `docker build`. CARGO_TARGET_DIR is the project's target directory, so dependencies
#    already built in release mode are reused (cold: ~7 min). The (stripped) binary the replay
#    leaves at /build/mcp-edge is the one the image gets, as with a plain `docker build`.
# 2. Builds the Dockerfile's `prebuilt` stage with podman, on a Debian base made locally with
#    debootstrap --variant=minbase bookworm (slimmed like debian:bookworm-slim), cached in
#    target/image-base/ (the podman image is reused while it exists, else re-imported from the
#    cached tarball). The context holds exactly the files the Dockerfile copies.
# 3. Runs the image as `deploy/` does: user 10001, read-only root filesystem with a tmpfs /tmp,
#    all capabilities dropped, the ConfigMap's mcp-edge.toml mounted at /etc/mcp-edge and a
#    test session key ring at /etc/mcp-edge/keys. The config is patched only where this host
#    differs from a cluster (host networking here): the listener and admin ports (free ports
#    on 127.0.0.1) and the pool's DNS name (127.0.0.1:<port> of an MCP server started on the
#    host, tests/peers/ts-server.mjs --mode modern). Checks /healthz, /readyz, a 2026-07-28
#    tools/list and tools/call proxied to that server, uid, read-only root, CA roots.
# 4. Stops it with SIGTERM (podman stop, 30 s = terminationGracePeriodSeconds): it must exit 0
#    on its own, in time.
#
# Installs podman, runc and debootstrap (Debian packages) when missing. Every step has a
# timeout; everything started is stopped on exit. Prints the image size. Exit status 0 only
# when every check passed. Environment: IMAGE (default localhost/mcp-edge:check),
# CARGO_TARGET_DIR (default ./target).
set -Eeuo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
TARGET=$CARGO_TARGET_DIR
IMAGE=${IMAGE:-localhost/mcp-edge:check}
CACHE=$ROOT/target/image-base                 # ignored build directory (.gitignore: /target)
BASE_VERSION=bookworm-minbase-slim-v2         # bump when the base recipe below changes
BASE_IMAGE=localhost/bookworm-min:$BASE_VERSION
REPLAY=$ROOT/target/image-check/build         # fixed path: cargo's fingerprints stay valid
GRACE=30                                      # deployment.yaml terminationGracePeriodSeconds
CTR=mcp-edge-check-$$
STARTED=$SECONDS

log() { printf '\n== %s (%ds)\n' "$1" "$((SECONDS - STARTED))"; }
die() { printf 'check-image: FAIL: %s\n' "$1" >&2; exit 1; }
# t LIMIT COMMAND...: every external step runs under a deadline.
t() { local limit=$1; shift; timeout --kill-after=10s "$limit" "$@"; }
trap 'rc=$?; printf "check-image: FAIL: line %s: %s (exit %s)\n" "${BASH_LINENO[0]}" "$BASH_COMMAND" "$rc" >&2' ERR

[ "$(id -u)" -eq 0 ] || die "run as root (rootful podman, debootstrap, apt-get)"

WORK=$(mktemp -d /tmp/check-image.XXXXXX)
SERVER_PID=""
CTR_STARTED=0
cleanup() {
    local rc=$?
    trap - ERR
    if [ "$CTR_STARTED" = 1 ]; then
        if [ "$rc" -ne 0 ]; then
            echo "--- container log (last 40 lines)"
            t 20s "${PM[@]}" logs --tail 40 "$CTR" 2>&1 || true
        fi
        t 40s "${PM[@]}" rm -f -t 5 "$CTR" >/dev/null 2>&1 || true
    fi
    if [ -n "$SERVER_PID" ]; then
        kill "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
    fi
    rm -rf "$WORK"
    if [ "$rc" -eq 0 ]; then
        printf '\ncheck-image: ok (%ds)\n' "$((SECONDS - STARTED))"
    else
        printf '\ncheck-image: FAILED (exit %d after %ds)\n' "$rc" "$((SECONDS - STARTED))" >&2
    fi
}
trap cleanup EXIT
trap 'exit 143' TERM
trap 'exit 130' INT
trap 'exit 129' HUP

# ---- tools ---------------------------------------------------------------------------------

log "tools"
missing=()
for pair in podman:podman runc:runc debootstrap:debootstrap curl:curl python3:python3 \
    cmake:cmake objcopy:binutils node:nodejs; do
    command -v "${pair%%:*}" >/dev/null 2>&1 || missing+=("${pair#*:}")
done
if [ "${#missing[@]}" -gt 0 ]; then
    echo "installing: ${missing[*]}"
    t 5m apt-get update -qq
    DEBIAN_FRONTEND=noninteractive t 15m apt-get install -y -qq --no-install-recommends \
        "${missing[@]}" >/dev/null
fi
if [ ! -d tests/peers/node_modules/@modelcontextprotocol ]; then
    t 15m bash tests/peers/setup.sh
fi
t 30s podman --version

# podman on this kind of host: runc (crun fails on hybrid cgroups), cgroupfs, no default
# ulimits (setrlimit is refused), host networking.
cat >"$WORK/containers.conf" <<'EOF'
[containers]
default_ulimits = []
[engine]
cgroup_manager = "cgroupfs"
runtime = "runc"
EOF
export CONTAINERS_CONF=$WORK/containers.conf
PM=(podman --runtime runc --cgroup-manager cgroupfs)

# ---- 1. the builder stage, replayed on the host --------------------------------------------

log "replaying the Dockerfile's builder stage in $REPLAY (CARGO_TARGET_DIR=$TARGET)"
# Writes $WORK/context.list: every COPY source (no --from) of every stage. Like a layer cache,
# a replay whose inputs (the stage's instructions, the files it copies, the toolchain) are
# those of the last successful one is not run again; FORCE_REPLAY=1 runs it anyway.
t 40m python3 - "$ROOT" "$REPLAY" "$TARGET" "$WORK/context.list" <<'EOF'
import glob, hashlib, json, os, re, shlex, shutil, subprocess, sys, time

root, replay, target, ctx_list = sys.argv[1:]

def instructions(path):
    """(keyword, rest) per Dockerfile instruction: continuations joined, comments dropped."""
    out, cur = [], ""
    for line in open(path):
        s = line.rstrip("\n")
        if s.lstrip().startswith("#"):
            continue
        if s.rstrip().endswith("\\"):
            cur += s.rstrip()[:-1] + " "
            continue
        cur += s
        if cur.strip():
            kw, _, rest = cur.strip().partition(" ")
            out.append((kw.upper(), rest.strip()))
        cur = ""
    if cur.strip():
        sys.exit("Dockerfile ends inside a continued line")
    return out

stages, cur = [], None
for kw, rest in instructions(os.path.join(root, "Dockerfile")):
    if kw == "FROM":
        m = re.match(r"(?i)(\S+)(?:\s+as\s+(\S+))?$", re.sub(r"--\S+\s+", "", rest))
        cur = {"image": m.group(1), "name": m.group(2), "steps": []}
        stages.append(cur)
    elif cur is not None:
        cur["steps"].append((kw, rest))

def copy_args(rest):
    if rest.startswith("["):
        words = json.loads(rest)
        flags = []
    else:
        words = shlex.split(rest)
        flags = [w for w in words if w.startswith("--")]
        words = [w for w in words if not w.startswith("--")]
    src_from = [f.split("=", 1)[1] for f in flags if f.startswith("--from=")]
    return src_from[0] if src_from else None, words[:-1], words[-1]

# Every file the build context must hold (for the podman build of the image).
sources = []
for st in stages:
    for kw, rest in st["steps"]:
        if kw in ("COPY", "ADD"):
            frm, srcs, _ = copy_args(rest)
            if frm is None:
                sources += srcs
with open(ctx_list, "w") as fh:
    fh.write("\n".join(sorted(set(sources))) + "\n")

# The stage the default (last) stage copies its binary from.
froms = [copy_args(r)[0] for k, r in stages[-1]["steps"] if k == "COPY" and copy_args(r)[0]]
if not froms:
    sys.exit("the last stage copies nothing --from a builder stage")
builder = next((s for s in stages if s["name"] == froms[0]), None)
if builder is None:
    sys.exit(f"no stage named {froms[0]}")
print(f"builder stage: FROM {builder['image']} AS {builder['name']}")

# The cache key: what a layer cache would compare, plus the host toolchain.
digest = hashlib.sha256(json.dumps(builder["steps"]).encode())
for cmd in (["rustc", "-vV"], ["cargo", "-V"]):
    digest.update(subprocess.run(cmd, capture_output=True, check=True).stdout)
for k in sorted(os.environ):
    if k == "RUSTFLAGS" or k.startswith(("CARGO_BUILD_", "CARGO_PROFILE_", "CARGO_ENCODED_")):
        digest.update(f"{k}={os.environ[k]}".encode())
for kw, rest in builder["steps"]:
    if kw == "COPY":
        for src in copy_args(rest)[1]:
            for m in sorted(glob.glob(os.path.join(root, src))):
                files = [m] if not os.path.isdir(m) else sorted(
                    os.path.join(d, f) for d, _, fs in os.walk(m) for f in fs)
                for f in files:
                    digest.update(os.path.relpath(f, root).encode() + b"\0")
                    digest.update(open(f, "rb").read())
digest = digest.hexdigest()
stamp = replay + ".stamp"
output = os.path.join(replay, "mcp-edge")
if (os.environ.get("FORCE_REPLAY", "") in ("", "0") and os.path.exists(output)
        and os.path.exists(stamp) and open(stamp).read() == digest):
    print(f"inputs unchanged since the last replay ({digest[:12]}): cached, as a layer would be")
    sys.exit(0)
if os.path.exists(stamp):
    os.remove(stamp)
shutil.rmtree(replay, ignore_errors=True)
os.makedirs(replay)

env = dict(os.environ)
workdir = None
def local(path):
    """A path inside the container → the replay directory."""
    if workdir is None:
        sys.exit("COPY/RUN before WORKDIR: cannot map the container path")
    p = os.path.normpath(os.path.join(workdir, path))
    if p != base and not p.startswith(base + "/"):
        sys.exit(f"{path}: outside WORKDIR {base}, cannot replay")
    return os.path.join(replay, os.path.relpath(p, base))

base = None
for kw, rest in builder["steps"]:
    if kw == "WORKDIR":
        if base is None:
            base = workdir = os.path.normpath(rest)
        else:
            workdir = os.path.normpath(os.path.join(workdir, rest))
        os.makedirs(local("."), exist_ok=True)
    elif kw in ("ENV", "ARG"):
        words = shlex.split(rest)
        if kw == "ENV" and len(words) >= 2 and "=" not in words[0]:
            words = [words[0] + "=" + " ".join(words[1:])]
        for w in words:
            if "=" in w:
                k, v = w.split("=", 1)
                env[k] = re.sub(r"\$\{?(\w+)\}?", lambda m: env.get(m.group(1), ""), v)
    elif kw in ("COPY", "ADD"):
        frm, srcs, dest = copy_args(rest)
        if frm is not None or kw == "ADD":
            sys.exit(f"{kw} {rest}: not replayable")
        dst = local(dest)
        into_dir = dest.endswith("/") or len(srcs) > 1
        for src in srcs:
            matches = sorted(glob.glob(os.path.join(root, src)))
            if not matches:
                sys.exit(f"COPY {src}: no such file in the context")
            for m in matches:
                if os.path.isdir(m):
                    shutil.copytree(m, dst, dirs_exist_ok=True, symlinks=True)
                elif into_dir or os.path.isdir(dst):
                    os.makedirs(dst, exist_ok=True)
                    shutil.copy2(m, dst)
                else:
                    os.makedirs(os.path.dirname(dst), exist_ok=True)
                    shutil.copy2(m, dst)
        print(f"COPY {' '.join(srcs)} -> {dest}")
    elif kw == "RUN":
        if "cargo" not in rest:
            print(f"skipped (not a cargo step): RUN {rest[:70]}...")
            continue
        env["CARGO_TARGET_DIR"] = target  # the project's: dependencies are reused
        cmd = json.loads(rest) if rest.startswith("[") else ["/bin/sh", "-c", rest]
        print(f"RUN {rest[:100]}...", flush=True)
        t0 = time.time()
        r = subprocess.run(cmd, cwd=local("."), env=env)
        print(f"  exit {r.returncode} after {time.time() - t0:.0f}s", flush=True)
        if r.returncode != 0:
            sys.exit(f"builder stage step failed: RUN {rest[:100]}")
with open(stamp, "w") as fh:
    fh.write(digest)
EOF
BIN=$WORK/mcp-edge
cp "$REPLAY/mcp-edge" "$BIN" || die "the builder stage no longer leaves /build/mcp-edge"
t 10s "$BIN" --version
echo "context files: $(tr '\n' ' ' <"$WORK/context.list")"

# ---- 2. the base image (debootstrap, cached) -----------------------------------------------

log "base image $BASE_IMAGE"
mkdir -p "$CACHE"
# Earlier versions of this base (this script's own cache and images).
find "$CACHE" -maxdepth 1 -name 'bookworm-minbase-*.tar' ! -name "$BASE_VERSION.tar" -delete
for old in $(t 1m "${PM[@]}" images --format '{{.Repository}}:{{.Tag}}' localhost/bookworm-min); do
    case "$old" in
        *:bookworm-minbase-*) [ "$old" = "$BASE_IMAGE" ] || t 1m "${PM[@]}" rmi "$old" >/dev/null 2>&1 || true ;;
    esac
done
if t 1m "${PM[@]}" image exists "$BASE_IMAGE"; then
    echo "present in podman's store"
else
    if [ ! -s "$CACHE/$BASE_VERSION.tar" ]; then
        echo "debootstrap --variant=minbase bookworm (cached afterwards in $CACHE)"
        rm -rf "$CACHE/rootfs"
        t 20m debootstrap --variant=minbase bookworm "$CACHE/rootfs" http://deb.debian.org/debian \
            >"$CACHE/debootstrap.log" 2>&1 || { tail -20 "$CACHE/debootstrap.log"; die "debootstrap"; }
        # Slim it as debian:bookworm-slim is (debuerreotype): no docs, manuals or translations,
        # now or in the packages installed later; no apt caches.
        cat >"$CACHE/rootfs/etc/dpkg/dpkg.cfg.d/slim" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/linda/*
EOF
        cat >"$CACHE/rootfs/etc/apt/apt.conf.d/docker-clean" <<'EOF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
EOF
        printf 'Acquire::Languages "none";\n' >"$CACHE/rootfs/etc/apt/apt.conf.d/docker-no-languages"
        find "$CACHE/rootfs/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
        rm -rf "$CACHE"/rootfs/usr/share/{man,info,locale,groff,lintian,linda}/* \
            "$CACHE"/rootfs/var/cache/apt/*.bin "$CACHE"/rootfs/var/cache/apt/archives/*.deb \
            "$CACHE"/rootfs/var/lib/apt/lists/*
        t 5m tar -C "$CACHE/rootfs" --numeric-owner -cf "$CACHE/$BASE_VERSION.tar.tmp" .
        mv "$CACHE/$BASE_VERSION.tar.tmp" "$CACHE/$BASE_VERSION.tar"
        rm -rf "$CACHE/rootfs"
    fi
    echo "importing $CACHE/$BASE_VERSION.tar"
    t 5m "${PM[@]}" import --change 'CMD ["/bin/bash"]' "$CACHE/$BASE_VERSION.tar" "$BASE_IMAGE" >/dev/null
fi

# ---- 3. the runtime image (stage prebuilt) -------------------------------------------------

log "podman build --target prebuilt -t $IMAGE"
CTX=$WORK/context
mkdir -p "$CTX"
cp Dockerfile .dockerignore "$CTX/"
while read -r src; do
    [ -n "$src" ] || continue
    mkdir -p "$CTX/$(dirname "$src")"
    if [ "$src" = target/release/mcp-edge ]; then
        cp "$BIN" "$CTX/$src"
    else
        cp -a "$src" "$CTX/$src"
    fi
done <"$WORK/context.list"
[ -x "$CTX/target/release/mcp-edge" ] || die "the Dockerfile no longer copies target/release/mcp-edge"
old_id=$(t 1m "${PM[@]}" image inspect -f '{{.Id}}' "$IMAGE" 2>/dev/null || true)
t 15m "${PM[@]}" build --network host --pull=never --target prebuilt \
    --build-arg "RUST_IMAGE=$BASE_IMAGE" --build-arg "RUNTIME_IMAGE=$BASE_IMAGE" \
    -t "$IMAGE" "$CTX"
new_id=$(t 1m "${PM[@]}" image inspect -f '{{.Id}}' "$IMAGE")
if [ -n "$old_id" ] && [ "$old_id" != "$new_id" ]; then
    t 1m "${PM[@]}" rmi "$old_id" >/dev/null 2>&1 || true   # this script's previous image, if unused
fi
user=$(t 1m "${PM[@]}" image inspect -f '{{.Config.User}}' "$IMAGE")
[ "$user" = 10001:10001 ] || die "image user is '$user', not 10001:10001"

# ---- 4. run it as the Deployment does ------------------------------------------------------

log "MCP server on the host"
node tests/peers/ts-server.mjs --mode modern --instance check-image --port 0 \
    >"$WORK/server.out" 2>"$WORK/server.err" &
SERVER_PID=$!
for _ in $(seq 100); do
    grep -q '^LISTENING ' "$WORK/server.out" 2>/dev/null && break
    kill -0 "$SERVER_PID" 2>/dev/null || { cat "$WORK/server.err"; die "ts-server exited"; }
    sleep 0.2
done
UP_PORT=$(awk '/^LISTENING /{print $2; exit}' "$WORK/server.out")
[ -n "$UP_PORT" ] || die "ts-server did not print LISTENING within 20 s"
echo "ts-server (modern) on 127.0.0.1:$UP_PORT"

log "configuration from deploy/base/configmap.yaml"
read -r MCP_PORT ADMIN_PORT HANDOFF_PORT < <(python3 -c '
import socket
ss = [socket.socket() for _ in range(3)]
for s in ss: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in ss])')
mkdir -p "$WORK/etc/keys"
# The block scalar under `mcp-edge.toml: |`, dedented.
awk '
    /^  mcp-edge\.toml: \|/ { on = 1; next }
    on && /^[^ ]/ { exit }
    on && NF && !ind { match($0, /^ +/); ind = RLENGTH }
    on && NF && match($0, /^ +/) && RLENGTH < ind { exit }
    on { print substr($0, ind + 1) }
' deploy/base/configmap.yaml >"$WORK/configmap.toml"
python3 - "$WORK/configmap.toml" "$WORK/etc/mcp-edge.toml" "$MCP_PORT" "$ADMIN_PORT" "$UP_PORT" "$HANDOFF_PORT" <<'EOF'
import re, sys
src, dst, mcp, admin, up, handoff = sys.argv[1:]
text = open(src).read()
def patch(pattern, repl, what):
    global text
    text, n = re.subn(pattern, repl, text, flags=re.M)
    if n != 1:
        sys.exit(f"configmap.yaml: expected one {what}, found {n}: update scripts/check-image.sh")
patch(r'(\[\[listeners\]\]\s*\naddress = )"[^"]*"', rf'\1"127.0.0.1:{mcp}"', "[[listeners]] address")
patch(r'(\[metrics\]\s*\naddress = )"[^"]*"', rf'\1"127.0.0.1:{admin}"', "[metrics] address")
patch(r'(\[\[pools\]\][^\[]*?^dns = )"[^"]*"', rf'\1"127.0.0.1:{up}"', "pool dns")
# The replicas' headless Service is the cluster's; here the one replica is itself, on its
# hand-off listener; its address comes from POD_IP as the Downward API gives it.
patch(r'(\[fleet\][^\[]*?^dns = )"[^"]*"', rf'\1"127.0.0.1:{handoff}"', "[fleet] dns")
patch(r'(\[fleet\][^\[]*?^handoff_listen = )"[^"]*"', rf'\1"127.0.0.1:{handoff}"', "[fleet] handoff_listen")
patch(r'(\[fleet\][^\[]*?^advertise = )"\$\{POD_IP\}:[0-9]+"', rf'\1"${{POD_IP}}:{handoff}"', "[fleet] advertise")
if 'keys_file = "/etc/mcp-edge/keys/session-keys"' not in text:
    sys.exit("configmap.yaml: keys_file is not /etc/mcp-edge/keys/session-keys any more")
open(dst, "w").write(text)
EOF
diff "$WORK/configmap.toml" "$WORK/etc/mcp-edge.toml" || true
# The Secret's file: a fresh test ring. Mode 0440, group 10001: what the kubelet makes of a
# Secret volume (defaultMode 0400) for a pod with fsGroup 10001.
printf '1:%s\n' "$(head -c 32 /dev/urandom | base64)" >"$WORK/etc/keys/session-keys"
chown 0:10001 "$WORK/etc/keys/session-keys"
chmod 0440 "$WORK/etc/keys/session-keys"
chmod 0755 "$WORK" "$WORK/etc" "$WORK/etc/keys"
chmod 0644 "$WORK/etc/mcp-edge.toml"

log "podman run --read-only --user 10001:10001 $IMAGE"
CTR_STARTED=1
t 1m "${PM[@]}" run -d --name "$CTR" --network host --read-only --read-only-tmpfs=false \
    --tmpfs /tmp:rw,size=16m,mode=1777 --user 10001:10001 --cap-drop ALL \
    --security-opt no-new-privileges --stop-timeout "$GRACE" -e POD_IP=127.0.0.1 \
    -v "$WORK/etc:/etc/mcp-edge:ro" -v "$WORK/etc/keys:/etc/mcp-edge/keys:ro" \
    "$IMAGE" >/dev/null
ADMIN=http://127.0.0.1:$ADMIN_PORT
# wait_for URL SECONDS: until the URL answers 200.
wait_for() {
    local url=$1 limit=$2 start=$SECONDS code=""
    while [ $((SECONDS - start)) -lt "$limit" ]; do
        [ "$(t 10s "${PM[@]}" inspect -f '{{.State.Running}}' "$CTR")" = true ] || die "the container exited"
        code=$(t 5s curl -s -o /dev/null -w '%{http_code}' "$url" || true)
        if [ "$code" = 200 ]; then
            echo "$url: 200 after $((SECONDS - start))s"
            return 0
        fi
        sleep 0.5
    done
    die "$url: no 200 within ${limit}s (last: ${code:-no answer})"
}
wait_for "$ADMIN/healthz" 30
wait_for "$ADMIN/readyz" 40

log "inside the container"
[ "$(t 20s "${PM[@]}" exec "$CTR" id -u)" = 10001 ] || die "not running as uid 10001"
if t 20s "${PM[@]}" exec "$CTR" sh -c 'echo x >/usr/local/bin/x' 2>/dev/null; then
    die "the root filesystem is writable"
fi
t 20s "${PM[@]}" exec "$CTR" test -s /etc/ssl/certs/ca-certificates.crt || die "no CA roots in the image"
echo "uid 10001, read-only root, /etc/ssl/certs/ca-certificates.crt present"

log "MCP requests through the edge to the host's server"
mcp() { # mcp METHOD NAME BODY
    local extra=()
    [ -z "$2" ] || extra=(-H "Mcp-Name: $2")
    t 20s curl -sS --fail-with-body "http://127.0.0.1:$MCP_PORT/mcp" \
        -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' \
        -H 'MCP-Protocol-Version: 2026-07-28' -H "Mcp-Method: $1" "${extra[@]}" -d "$3"
}
META='"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}'
reqs_before=$(grep -c '^REQ POST /mcp' "$WORK/server.err" || true)
out=$(mcp tools/list "" '{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{'"$META"'}}') \
    || die "tools/list: $out"
grep -q '"name":"echo"' <<<"$out" || die "tools/list: no echo tool in: ${out:0:300}"
echo "tools/list: ok ($(grep -o '"name":"[a-z]*"' <<<"$out" | tr '\n' ' '))"
out=$(mcp tools/call echo '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"},'"$META"'}}') \
    || die "tools/call: $out"
grep -q 'check-image:hi' <<<"$out" || die "tools/call echo: unexpected answer: ${out:0:300}"
echo "tools/call echo: check-image:hi"
reqs_after=$(grep -c '^REQ POST /mcp' "$WORK/server.err" || true)
[ "$reqs_after" -ge $((reqs_before + 2)) ] || die "the host's server did not see the requests"

# ---- 5. SIGTERM ----------------------------------------------------------------------------

log "SIGTERM (podman stop, grace ${GRACE}s)"
t0=$(date +%s.%N)
t $((GRACE + 30))s "${PM[@]}" stop -t "$GRACE" "$CTR" >/dev/null
elapsed=$(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$t0" "$(date +%s.%N)")
code=$(t 1m "${PM[@]}" inspect -f '{{.State.ExitCode}}' "$CTR")
echo "stopped in ${elapsed}s, exit status $code"
logs=$(t 20s "${PM[@]}" logs "$CTR" 2>&1)
grep -q 'SIGTERM: draining' <<<"$logs" || die "the edge did not log its SIGTERM drain"
grep -q 'All runtimes exited' <<<"$logs" || die "the edge did not finish its graceful shutdown"
[ "$code" = 0 ] || die "exit status $code after SIGTERM (137: killed at the end of the grace period)"
python3 -c "import sys; sys.exit(float(sys.argv[1]) >= float(sys.argv[2]))" "$elapsed" "$GRACE" \
    || die "took ${elapsed}s, not within the ${GRACE}s grace period"

# ---- size ----------------------------------------------------------------------------------

log "size"
mb() { python3 -c "import sys; print(f'{int(sys.argv[1]) / 1e6:.0f} MB')" "$1"; }
size=$(t 1m "${PM[@]}" image inspect -f '{{.Size}}' "$IMAGE")
base_size=$(t 1m "${PM[@]}" image inspect -f '{{.Size}}' "$BASE_IMAGE")
bin_size=$(stat -c %s "$BIN")
echo "image $IMAGE: $(mb "$size") (base $(mb "$base_size"), mcp-edge binary $(mb "$bin_size"))"
t 1m "${PM[@]}" images --filter "reference=$IMAGE"
