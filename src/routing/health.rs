//! Member health and discovery, one pool at a time: DNS re-resolution and active checks
//! (TCP connect or an MCP `server/discover` probe, which also learns the revisions a member
//! speaks). [`crate::maintenance`] schedules them.

use std::net::SocketAddr;

use std::sync::LazyLock;

use pingora::connectors::TransportConnector;
use pingora::http::RequestHeader;
use pingora::protocols::http::v1::client::HttpSession;
use pingora::protocols::Stream;
use serde_json::Value;

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
        if ok {
            learn_legacy(pool, member).await;
        }
    });
    futures::future::join_all(checks).await;
    pool.publish();
}

/// Connections for health checks (fresh each time, never pooled).
static CONNECTOR: LazyLock<TransportConnector> = LazyLock::new(|| TransportConnector::new(None));

/// The most of an answer a check reads.
const MAX_ANSWER: usize = 64 * 1024;

const DISCOVER_ID: &str = "mcp-edge-health";
const DISCOVER: &str = r#"{"jsonrpc":"2.0","id":"mcp-edge-health","method":"server/discover","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"mcp-edge-health","version":"1"}}}}"#;

const INITIALIZE_ID: &str = "mcp-edge-legacy-probe";
const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":"mcp-edge-legacy-probe","method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"mcp-edge-health","version":"1"}}}"#;

/// One active check: a connection as a request would make it (a TLS handshake included for
/// an HTTPS pool), then for `mcp` a `server/discover` POST: any answer below 500 is healthy,
/// and a `DiscoverResult` tells which modern revisions the member speaks.
pub async fn probe(pool: &Pool, member: &Member) -> bool {
    let attempt = async {
        let CheckKind::Mcp { path } = &pool.health.check else {
            return connect(pool, member).await.map(|_| true);
        };
        let headers = [
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "server/discover"),
        ];
        let answer = ask(pool, member, "POST", path, DISCOVER, &headers, DISCOVER_ID).await?;
        if let Some(reply) = &answer.reply {
            learn_modern(pool, member, reply);
        }
        Some(answer.status < 500)
    };
    matches!(
        tokio::time::timeout(pool.health.timeout, attempt).await,
        Ok(Some(true))
    )
}

/// Record the modern revisions a `server/discover` reply names: a `DiscoverResult`'s
/// `supportedVersions`, or a -32022's `data.supported`.
fn learn_modern(pool: &Pool, member: &Member, reply: &Value) {
    let result = reply.get("result");
    let listed = result
        .and_then(|r| r.get("supportedVersions"))
        .or_else(|| unsupported_list(reply));
    let Some(modern) = listed.and_then(strings) else {
        return;
    };
    let modern: Vec<String> = modern
        .into_iter()
        .filter(|v| !crate::mcp::is_legacy_version(v))
        .collect();
    let identity = result
        .and_then(|r| r.pointer("/_meta/io.modelcontextprotocol~1serverInfo"))
        .map(|info| {
            let field = |k: &str| info.get(k).and_then(Value::as_str).unwrap_or("");
            format!("{} {}", field("name"), field("version"))
        });
    let Ok(mut speaks) = member.speaks.lock() else {
        return;
    };
    if identity.is_some() && speaks.identity != identity {
        if speaks.identity.is_some() {
            log::info!(
                "pool {}: member {} is now {}; asking again whether it speaks legacy revisions",
                pool.name,
                member.label,
                identity.as_deref().unwrap_or("")
            );
        }
        speaks.identity = identity;
        speaks.legacy = None;
        speaks.asked_legacy = false;
    }
    speaks.modern = Some(modern);
}

/// Once per server identity: does the member accept a legacy `initialize`? A modern-only
/// server answers -32022. A session the probe opened is deleted at once. An answer that
/// says neither leaves it unknown, and is not asked again until the server changes.
async fn learn_legacy(pool: &Pool, member: &Member) {
    let CheckKind::Mcp { path } = &pool.health.check else {
        return;
    };
    match member.speaks.lock() {
        Ok(mut speaks) if !speaks.asked_legacy => speaks.asked_legacy = true,
        _ => return,
    }
    // `None`: no answer at all (asked again next round); `Some(None)`: an answer that
    // says neither.
    let attempt = async {
        let answer = ask(pool, member, "POST", path, INITIALIZE, &[], INITIALIZE_ID).await?;
        let Some(reply) = answer.reply else {
            return Some(None);
        };
        let legacy = if let Some(result) = reply.get("result") {
            if let Some(session) = &answer.session {
                let version = result
                    .get("protocolVersion")
                    .and_then(Value::as_str)
                    .unwrap_or("2025-11-25");
                let headers = [
                    ("mcp-session-id", session.as_str()),
                    ("mcp-protocol-version", version),
                ];
                // Best effort: a server without DELETE keeps the session until it expires.
                let _ = ask(pool, member, "DELETE", path, "", &headers, "").await;
            }
            Some(true)
        } else {
            unsupported_list(&reply)
                .and_then(strings)
                .map(|list| list.iter().any(|v| crate::mcp::is_legacy_version(v)))
        };
        Some(legacy)
    };
    let verdict = tokio::time::timeout(pool.health.timeout, attempt)
        .await
        .ok()
        .flatten();
    if let Ok(mut speaks) = member.speaks.lock() {
        match verdict {
            Some(legacy) => speaks.legacy = legacy,
            None => speaks.asked_legacy = false,
        }
    }
}

/// `error.data.supported` of a -32022 reply.
fn unsupported_list(reply: &Value) -> Option<&Value> {
    let error = reply.get("error")?;
    (error.get("code")?.as_i64()? == -32022)
        .then(|| error.pointer("/data/supported"))
        .flatten()
}

fn strings(v: &Value) -> Option<Vec<String>> {
    v.as_array()?
        .iter()
        .map(|s| s.as_str().map(str::to_owned))
        .collect()
}

async fn connect(pool: &Pool, member: &Member) -> Option<Stream> {
    let peer = pool.peer(member);
    match CONNECTOR.new_stream(&peer).await {
        Ok(s) => Some(s),
        Err(e) => {
            if crate::tls::is_handshake_failure(&e) {
                metrics::get()
                    .tls
                    .upstream_failures
                    .with_label_values(&[pool.name.as_str(), member.label.as_str()])
                    .inc();
            }
            None
        }
    }
}

/// What a member answered a check.
struct Answer {
    status: u16,
    /// The `Mcp-Session-Id` it issued, if any.
    session: Option<String>,
    /// The JSON-RPC reply with the check's id, from a JSON or an SSE body.
    reply: Option<Value>,
}

/// One HTTP/1.1 exchange on a fresh connection; reads at most [`MAX_ANSWER`] of the body,
/// and stops as soon as the reply with `id` is complete (an SSE answer may stay open).
#[allow(clippy::too_many_arguments)]
async fn ask(
    pool: &Pool,
    member: &Member,
    method: &str,
    path: &str,
    body: &str,
    headers: &[(&str, &str)],
    id: &str,
) -> Option<Answer> {
    let host = pool.host.clone().unwrap_or_else(|| match &pool.tls {
        Some(tls) => tls.sni.clone().unwrap_or_else(|| member.addr.to_string()),
        None => member.addr.to_string(),
    });
    let mut request = RequestHeader::build(method, path.as_bytes(), None).ok()?;
    let length = body.len().to_string();
    let fixed = [
        ("host", host.as_str()),
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
        ("content-length", length.as_str()),
        ("connection", "close"),
    ];
    for (name, value) in fixed.iter().chain(headers) {
        request
            .insert_header(name.to_string(), value.to_string())
            .ok()?;
    }
    let mut http = HttpSession::new(connect(pool, member).await?);
    http.write_request_header(Box::new(request)).await.ok()?;
    http.write_body(body.as_bytes()).await.ok()?;
    http.finish_body().await.ok()?;
    http.read_response().await.ok()?;
    let status = http.get_status()?.as_u16();
    let text = |name: &str| {
        http.get_header(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let session = text("mcp-session-id");
    let sse = text("content-type").is_some_and(|t| t.starts_with("text/event-stream"));
    let mut read = Vec::new();
    let mut reply = None;
    while !id.is_empty() && read.len() < MAX_ANSWER {
        match http.read_body_ref().await {
            Ok(Some(chunk)) => read.extend_from_slice(chunk),
            _ => break,
        }
        reply = if sse {
            sse_reply(&read, id)
        } else {
            serde_json::from_slice::<Value>(&read)
                .ok()
                .filter(|v| v.get("id").and_then(Value::as_str) == Some(id))
        };
        if reply.is_some() {
            break;
        }
    }
    Some(Answer {
        status,
        session,
        reply,
    })
}

/// The JSON-RPC message with `id` among the complete events of an SSE body.
fn sse_reply(body: &[u8], id: &str) -> Option<Value> {
    let text = String::from_utf8_lossy(body).replace("\r\n", "\n");
    // The last piece may be an incomplete event.
    let mut events: Vec<&str> = text.split("\n\n").collect();
    events.pop();
    events.into_iter().find_map(|event| {
        let data: Vec<&str> = event
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .map(|d| d.strip_prefix(' ').unwrap_or(d))
            .collect();
        serde_json::from_str::<Value>(&data.join("\n"))
            .ok()
            .filter(|v| v.get("id").and_then(Value::as_str) == Some(id))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_reply_among_complete_sse_events() {
        let body = b"event: message\r\nid: 1\r\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\"}\r\n\r\ndata: {\"jsonrpc\":\"2.0\",\"id\":\"x\",\r\ndata: \"result\":{}}\n\n";
        let reply = sse_reply(body, "x").expect("reply");
        assert!(reply.get("result").is_some());
        assert!(sse_reply(body, "y").is_none());
        // The same event without its blank line is not complete yet.
        assert!(sse_reply(&body[..body.len() - 1], "x").is_none());
    }

    #[test]
    fn reads_supported_revisions_from_a_32022() {
        let reply: Value = serde_json::from_str(
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32022,"message":"no","data":{"supported":["2026-07-28"]}}}"#,
        )
        .unwrap();
        assert_eq!(
            unsupported_list(&reply).and_then(strings),
            Some(vec!["2026-07-28".to_string()])
        );
        let other: Value =
            serde_json::from_str(r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32600,"message":"no","data":{"supported":[]}}}"#)
                .unwrap();
        assert!(unsupported_list(&other).is_none());
    }
}
