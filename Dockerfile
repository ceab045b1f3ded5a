# syntax=docker/dockerfile:1
#
# mcp-edge container image.
#   docker build -t mcp-edge:latest .
#   docker run --rm -p 8080:8080 -p 9090:9090 \
#     -v "$PWD/conf/mcp-edge.toml:/etc/mcp-edge/mcp-edge.toml:ro" mcp-edge:latest
# Kubernetes: see deploy/README.md.

# ---- build -------------------------------------------------------------------------------
FROM rust:1.95-bookworm AS builder

# cmake: Pingora's zlib-ng build (libz-ng-sys).
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends cmake \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /build

# Dependencies first, against stub sources, so that changing src/ does not rebuild them.
COPY Cargo.toml Cargo.lock ./
RUN mkdir -p src/bin/mcp-edge \
 && echo 'fn main() {}' > src/bin/mcp-edge/main.rs \
 && touch src/lib.rs \
 && cargo build --release --locked \
 && rm -rf src

# The real sources; touch them so cargo does not mistake them for the stubs it just built.
COPY src ./src
RUN touch src/bin/mcp-edge/main.rs src/lib.rs \
 && cargo build --release --locked \
 && ./target/release/mcp-edge --version

# ---- runtime -----------------------------------------------------------------------------
FROM debian:bookworm-slim

# ca-certificates: the TLS connector Pingora builds at start loads the platform roots.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 mcp-edge \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin mcp-edge

COPY --from=builder /build/target/release/mcp-edge /usr/local/bin/mcp-edge
# A default configuration so the image starts on its own; Kubernetes mounts a ConfigMap over
# /etc/mcp-edge (deploy/base/configmap.yaml).
COPY conf/mcp-edge.toml /etc/mcp-edge/mcp-edge.toml

# Numeric, so Kubernetes can verify runAsNonRoot.
USER 10001:10001

# 8080: MCP traffic ([[listeners]] address). 9090: admin listener (metrics.address):
# /metrics, /healthz, /readyz.
EXPOSE 8080 9090

ENV RUST_LOG=info
ENTRYPOINT ["mcp-edge"]
CMD ["--config", "/etc/mcp-edge/mcp-edge.toml"]
