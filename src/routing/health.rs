//! Member health and discovery, one pool at a time: DNS re-resolution and active checks
//! (TCP connect or an MCP `server/discover` probe). [`crate::maintenance`] schedules them.

use std::net::SocketAddr;

use std::sync::LazyLock;

use pingora::connectors::TransportConnector;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{CheckKind, Member, Pool};
use crate::metrics;

/// Re-resolve a DNS-discovered pool; a failed or empty answer keeps the current members.
pub async fn resolve(pool: &Pool, name: &str) {
    let m = metrics::get();
    match tokio::net::lookup_host(name).await {
        Ok(addrs) => {
            let addrs: Vec<SocketAddr> = addrs.collect();
            if addrs.is_empty() {
                m.pools
                    .dns_resolutions
                    .with_label_values(&[pool.name.as_str(), "empty"])
                    .inc();
                return;
            }
            if pool.set_members(&addrs) {
                log::info!(
                    "pool {}: {} resolved to {} members",
                    pool.name,
                    name,
                    addrs.len()
                );
            }
            m.pools
                .dns_resolutions
                .with_label_values(&[pool.name.as_str(), "ok"])
                .inc();
        }
        Err(e) => {
            log::warn!(
                "pool {}: resolving {name} failed: {e}; keeping the current members",
                pool.name
            );
            m.pools
                .dns_resolutions
                .with_label_values(&[pool.name.as_str(), "error"])
                .inc();
        }
    }
    pool.publish();
}

/// Run one round of active checks on every member of `pool`.
pub async fn check_pool(pool: &Pool) {
    let members = pool.members();
    let checks = members.iter().map(|member| async move {
        let ok = probe(pool, member).await;
        let was = member.is_healthy();
        let now = member.record_check(ok, &pool.health);
        if was != now {
            log::warn!(
                "pool {}: member {} is now {}",
                pool.name,
                member.label,
                if now { "healthy" } else { "unhealthy" }
            );
        }
        metrics::get()
            .pools
            .health_checks
            .with_label_values(&[pool.name.as_str(), if ok { "ok" } else { "failed" }])
            .inc();
    });
    futures::future::join_all(checks).await;
    pool.publish();
}

/// Connections for health checks (fresh each time, never pooled).
static CONNECTOR: LazyLock<TransportConnector> = LazyLock::new(|| TransportConnector::new(None));

/// One active check: a connection as a request would make it (a TLS handshake included for
/// an HTTPS pool), then for `mcp` a `server/discover` POST.
pub async fn probe(pool: &Pool, member: &Member) -> bool {
    let attempt = async {
        let peer = pool.peer(member);
        let mut stream = match CONNECTOR.new_stream(&peer).await {
            Ok(s) => s,
            Err(e) => {
                if crate::tls::is_handshake_failure(&e) {
                    metrics::get()
                        .tls
                        .upstream_failures
                        .with_label_values(&[pool.name.as_str(), member.label.as_str()])
                        .inc();
                }
                return None;
            }
        };
        let CheckKind::Mcp { path } = &pool.health.check else {
            return Some(true);
        };
        let host = pool.host.clone().unwrap_or_else(|| match &pool.tls {
            Some(tls) => tls.sni.clone().unwrap_or_else(|| member.addr.to_string()),
            None => member.addr.to_string(),
        });
        let body = r#"{"jsonrpc":"2.0","id":"mcp-edge-health","method":"server/discover","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"mcp-edge-health","version":"1"}}}}"#;
        let request = format!(
            "POST {path} HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\naccept: application/json, text/event-stream\r\nmcp-protocol-version: 2026-07-28\r\nmcp-method: server/discover\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            host,
            body.len()
        );
        stream.write_all(request.as_bytes()).await.ok()?;
        let mut head = [0u8; 12];
        stream.read_exact(&mut head).await.ok()?;
        // "HTTP/1.1 200"
        let status: u16 = std::str::from_utf8(&head[9..12]).ok()?.parse().ok()?;
        Some(head.starts_with(b"HTTP/1.") && status < 500)
    };
    matches!(
        tokio::time::timeout(pool.health.timeout, attempt).await,
        Ok(Some(true))
    )
}
