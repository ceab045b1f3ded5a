//! The pool maintenance service: re-resolves DNS-discovered pools and runs active health
//! checks, off the request path. It always works on the current runtime snapshot, so a
//! reload takes effect at the next tick.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use async_trait::async_trait;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::{CheckKind, Member, Pool, Source};
use crate::config::Runtime;
use crate::metrics;

const TICK: Duration = Duration::from_millis(100);

pub struct Maintenance {
    pub runtime: Arc<ArcSwap<Runtime>>,
}

#[async_trait]
impl BackgroundService for Maintenance {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let mut due: HashMap<(String, &'static str), Instant> = HashMap::new();
        loop {
            let snapshot = self.runtime.load_full();
            for pool in snapshot.pools.values() {
                if let Source::Dns { name, interval } = &pool.source {
                    if is_due(&mut due, &pool.name, "dns", *interval) {
                        let (pool, name) = (pool.clone(), name.clone());
                        tokio::spawn(async move { resolve(&pool, &name).await });
                    }
                }
                if pool.health.check != CheckKind::None
                    && is_due(&mut due, &pool.name, "check", pool.health.interval)
                {
                    let pool = pool.clone();
                    tokio::spawn(async move { check_pool(&pool).await });
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(TICK) => {}
                _ = shutdown.changed() => return,
            }
        }
    }
}

fn is_due(
    due: &mut HashMap<(String, &'static str), Instant>,
    pool: &str,
    what: &'static str,
    every: Duration,
) -> bool {
    let now = Instant::now();
    let key = (pool.to_string(), what);
    match due.get(&key) {
        Some(t) if *t > now => false,
        _ => {
            due.insert(key, now + every);
            true
        }
    }
}

/// Re-resolve a DNS-discovered pool; a failed or empty answer keeps the current members.
pub async fn resolve(pool: &Pool, name: &str) {
    let m = metrics::get();
    match tokio::net::lookup_host(name).await {
        Ok(addrs) => {
            let addrs: Vec<SocketAddr> = addrs.collect();
            if addrs.is_empty() {
                m.dns_resolutions
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
            m.dns_resolutions
                .with_label_values(&[pool.name.as_str(), "ok"])
                .inc();
        }
        Err(e) => {
            log::warn!(
                "pool {}: resolving {name} failed: {e}; keeping the current members",
                pool.name
            );
            m.dns_resolutions
                .with_label_values(&[pool.name.as_str(), "error"])
                .inc();
        }
    }
    metrics::publish_pool(pool);
}

async fn check_pool(pool: &Pool) {
    let members = pool.members();
    let checks = members.iter().map(|member| async move {
        let ok = probe(member, &pool.health.check, pool.health.timeout).await;
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
            .health_checks
            .with_label_values(&[pool.name.as_str(), if ok { "ok" } else { "failed" }])
            .inc();
    });
    futures::future::join_all(checks).await;
    metrics::publish_pool(pool);
}

/// One active check.
pub async fn probe(member: &Member, kind: &CheckKind, timeout: Duration) -> bool {
    let attempt = async {
        let mut stream = TcpStream::connect(member.addr).await.ok()?;
        let CheckKind::Mcp { path } = kind else {
            return Some(true);
        };
        let body = r#"{"jsonrpc":"2.0","id":"mcp-edge-health","method":"server/discover","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"mcp-edge-health","version":"1"}}}}"#;
        let request = format!(
            "POST {path} HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\naccept: application/json, text/event-stream\r\nmcp-protocol-version: 2026-07-28\r\nmcp-method: server/discover\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            member.addr,
            body.len()
        );
        stream.write_all(request.as_bytes()).await.ok()?;
        let mut head = [0u8; 12];
        stream.read_exact(&mut head).await.ok()?;
        // "HTTP/1.1 200"
        let status: u16 = std::str::from_utf8(&head[9..12]).ok()?.parse().ok()?;
        Some(head.starts_with(b"HTTP/1.") && status < 500)
    };
    matches!(tokio::time::timeout(timeout, attempt).await, Ok(Some(true)))
}
