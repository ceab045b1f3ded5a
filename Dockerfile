# syntax=docker/dockerfile:1
#
# mcp-edge container image (about 104 MB). scripts/check-image.sh builds and runs it in CI.
#
#   docker build -t mcp-edge:latest .          # compiles in the builder stage
#   podman build -t mcp-edge:latest .          # the same with podman (tagged localhost/...)
#
# With a release binary already built on the host (cargo build --release, on a glibc no newer
# than Debian 12's), skip the builder stage; the binary is taken as is:
#
#   docker build --target prebuilt -t mcp-edge:latest .
#
# Other base images (a mirror, or a local Debian base when no registry can be reached):
#
#   docker build --build-arg RUST_IMAGE=registry.example.com/rust:1.95-bookworm \
#                --build-arg RUNTIME_IMAGE=registry.example.com/debian:bookworm-slim .
#
# Run it (the built-in conf/mcp-edge.toml reads its session key ring from the environment):
#
#   docker run --rm --read-only -p 8080:8080 -p 9090:9090 \
#     -e MCP_EDGE_SESSION_KEYS="1:$(head -c 32 /dev/urandom | base64)" \
#     -v "$PWD/conf/mcp-edge.toml:/etc/mcp-edge/mcp-edge.toml:ro" mcp-edge:latest
#
# Kubernetes: see deploy/README.md.

ARG RUST_IMAGE=rust:1.95-bookworm
ARG RUNTIME_IMAGE=debian:bookworm-slim

# ---- build -------------------------------------------------------------------------------
FROM ${RUST_IMAGE} AS builder

# cmake: Pingora's zlib-ng build (libz-ng-sys).
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends cmake \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /build
ENV CARGO_TARGET_DIR=/build/target

# Dependencies first, against stub sources, so that changing src/ does not rebuild them.
# Cargo refuses a manifest whose targets have no source file, so every target the manifest
# declares ([lib], [[bin]], [[bench]], [[example]], [[test]]: its `path`, or the default one)
# gets a stub. The bench/example/test stubs stay: they are not built, only parsed.
COPY Cargo.toml Cargo.lock ./
RUN awk ' \
      function val(l) { sub(/^[^=]*=[ \t]*"/, "", l); sub(/".*$/, "", l); return l } \
      function flush() { \
        if (kind == "lib" && path == "") path = "src/lib.rs"; \
        if (kind != "" && path == "") path = dir[kind] "/" name ".rs"; \
        if (kind != "") print kind, path; \
        kind = ""; name = ""; path = "" } \
      BEGIN { dir["bin"] = "src/bin"; dir["bench"] = "benches"; dir["example"] = "examples"; dir["test"] = "tests" } \
      /^[ \t]*\[/ { flush() } \
      /^[ \t]*\[\[?(lib|bin|bench|example|test)\]\]?[ \t]*(#.*)?$/ { kind = $0; sub(/^[ \t]*\[+/, "", kind); sub(/\].*$/, "", kind) } \
      kind != "" && /^[ \t]*name[ \t]*=/ { name = val($0) } \
      kind != "" && /^[ \t]*path[ \t]*=/ { path = val($0) } \
      END { flush() }' Cargo.toml \
    | while read -r kind path; do \
        echo "stub for $kind: $path"; \
        mkdir -p "$(dirname "$path")" || exit 1; \
        if [ "$kind" = lib ]; then : > "$path"; else echo 'fn main() {}' > "$path"; fi || exit 1; \
      done \
 && cargo build --release --locked \
 && rm -rf src

# The real sources; touch them so cargo does not mistake them for the stubs it just built
# (COPY keeps the files' older modification times).
COPY src ./src
# The release profile keeps line tables (debug = 1, for profiling); the image does not need
# them: --strip-debug takes the binary from about 120 MB to 17 MB and keeps the symbols.
RUN find src -name '*.rs' -exec touch {} + \
 && cargo build --release --locked \
 && objcopy --strip-debug "$CARGO_TARGET_DIR/release/mcp-edge" mcp-edge \
 && ./mcp-edge --version

# ---- runtime base ------------------------------------------------------------------------
FROM ${RUNTIME_IMAGE} AS runtime-base

# ca-certificates: the TLS connector Pingora builds at start loads the platform roots
# (TLS upstreams). A base that already has it needs no network here.
RUN if ! dpkg-query -W -f '${Status}' ca-certificates 2>/dev/null | grep -q 'ok installed'; then \
      apt-get update \
      && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ca-certificates \
      && apt-get clean \
      && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin; \
    fi \
 && test -s /etc/ssl/certs/ca-certificates.crt \
 && groupadd --system --gid 10001 mcp-edge \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin mcp-edge

# A default configuration (it needs MCP_EDGE_SESSION_KEYS set); Kubernetes mounts a ConfigMap
# over /etc/mcp-edge (deploy/base/configmap.yaml) and the key Secret at /etc/mcp-edge/keys.
COPY conf/mcp-edge.toml /etc/mcp-edge/mcp-edge.toml

# Read-only root filesystem: the edge writes no files. Scratch space, if any, is /tmp (an
# emptyDir in deployment.yaml, a tmpfs with `podman run --read-only`).
ENV RUST_LOG=info TMPDIR=/tmp

# Numeric, so Kubernetes can verify runAsNonRoot.
USER 10001:10001

# 8080: MCP traffic ([[listeners]] address). 9090: admin listener (metrics.address):
# /metrics, /healthz, /readyz.
EXPOSE 8080 9090

# The edge is PID 1 and handles SIGTERM itself (graceful drain, then exit 0).
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/mcp-edge"]
CMD ["--config", "/etc/mcp-edge/mcp-edge.toml"]

# ---- runtime from a prebuilt binary (docker build --target prebuilt) ---------------------
# Takes target/release/mcp-edge from the build context as it is (.dockerignore lets that one
# file of target/ through): about 120 MB with the release profile's line tables, unless
# stripped as above. BuildKit (Docker's default builder) and podman skip the builder stage for
# this target. scripts/check-image.sh builds this stage, with the builder stage's binary.
FROM runtime-base AS prebuilt
COPY target/release/mcp-edge /usr/local/bin/mcp-edge
RUN ["/usr/local/bin/mcp-edge", "--version"]

# ---- runtime (the default target: the binary from the builder stage) ---------------------
FROM runtime-base AS runtime
COPY --from=builder /build/mcp-edge /usr/local/bin/mcp-edge
RUN ["/usr/local/bin/mcp-edge", "--version"]
