//! Member health and discovery, one pool at a time: DNS re-resolution and active checks
//! (TCP connect or an MCP `server/discover` probe, which also learns the revisions a member
//! speaks). [`crate::ops::maintenance`] schedules them.

use std::net::SocketAddr;

use std::sync::LazyLock;

use pingora::connectors::TransportConnector;
use pingora::http::RequestHeader;
use pingora::protocols::http::v1::client::HttpSession;
use pingora::protocols::Stream;
use serde_json::Value;

use super::{CheckKind, Member, Pool};

mod absent;
use crate::mcp::client;
use crate::mcp::versions::Speaks;
use crate::mcp::LATEST_LEGACY;
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
        let was_passing = member.passes_checks();
        let now = member.record_check(ok, &pool.health);
        if !was_passing && member.passes_checks() {
            // Back from failed checks (not a passive ejection): perhaps another server at the
            // same address. One that answers discover says who it is at every check (a new
            // identity resets what was learned); a legacy-only one only when asked: asked again.
            if let Ok(mut speaks) = member.speaks.lock() {
                if speaks.modern.is_none() {
                    *speaks = Speaks::default();
                }
            }
        }
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
        // One learning at a time per member (rounds may overlap while a member is slow).
        if let Some(_learning) = ok.then(|| Learning::take(member)).flatten() {
            learn_legacy(pool, member).await;
            absent::learn(pool, member).await;
        }
    });
    futures::future::join_all(checks).await;
    pool.publish();
}

/// A member being asked what it speaks and answers: taken by one round at a time, given back
/// however the round ends.
struct Learning<'a>(&'a Member);

impl<'a> Learning<'a> {
    fn take(member: &'a Member) -> Option<Learning<'a>> {
        (!member
            .learning
            .swap(true, std::sync::atomic::Ordering::AcqRel))
        .then_some(Learning(member))
    }
}

impl Drop for Learning<'_> {
    fn drop(&mut self) {
        self.0
            .learning
            .store(false, std::sync::atomic::Ordering::Release);
    }
}

/// Connections for health checks (fresh each time, never pooled).
static CONNECTOR: LazyLock<TransportConnector> = LazyLock::new(|| TransportConnector::new(None));

/// The most of an answer a check reads.
const MAX_ANSWER: usize = 64 * 1024;

const DISCOVER_ID: &str = "mcp-edge-health";
const INITIALIZE_ID: &str = "mcp-edge-legacy-probe";

/// One active check: a connection as a request would make it (a TLS handshake included for
/// an HTTPS pool), then for `mcp` a `server/discover` POST. The status decides health (any
/// answer below 500 is healthy); reading a `DiscoverResult` from the body, to learn which
/// modern revisions the member speaks, is best effort with its own deadline.
pub async fn probe(pool: &Pool, member: &Member) -> bool {
    let t = pool.health.timeout;
    let CheckKind::Mcp { path, strict } = &pool.health.check else {
        return matches!(
            tokio::time::timeout(t, connect(pool, member)).await,
            Ok(Some(_))
        );
    };
    let headers = client::modern_headers("server/discover");
    let discover = client::discover(&Value::from(DISCOVER_ID).to_string(), client::HEALTH);
    let asked = exchange(pool, member, "POST", path, &discover, &headers);
    let Ok(Some(mut answer)) = tokio::time::timeout(t, asked).await else {
        return false;
    };
    if let Ok(reply) = tokio::time::timeout(t, answer.reply(DISCOVER_ID)).await {
        learn_modern(pool, member, reply.as_ref());
    }
    answer.status < 500 || !strict
}

/// Record the modern revisions a `server/discover` reply names: a `DiscoverResult`'s
/// `supportedVersions`, or a -32022's `data.supported`. A reply naming none (or none at all)
/// leaves it unknown.
fn learn_modern(pool: &Pool, member: &Member, reply: Option<&Value>) {
    let result = reply.and_then(|r| r.get("result"));
    let listed = result
        .and_then(|r| r.get("supportedVersions"))
        .or_else(|| reply.and_then(unsupported_list));
    let modern: Option<Vec<String>> = listed.and_then(strings).map(|list| {
        list.into_iter()
            .filter(|v| is_revision(v) && !crate::mcp::is_legacy_version(v))
            .take(MAX_REVISIONS)
            .collect()
    });
    let identity = result
        .and_then(|r| r.pointer("/_meta/io.modelcontextprotocol~1serverInfo"))
        .map(identity);
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
        speaks.legacy_attempts = 0;
        speaks.absent = None;
        speaks.absent_attempts = 0;
    }
    speaks.modern = modern;
}

/// A server's identity from its `serverInfo`: name and version, at most 64 characters each.
fn identity(info: &Value) -> String {
    let field = |k: &str| {
        let v = info.get(k).and_then(Value::as_str).unwrap_or("");
        v.chars().take(64).collect::<String>()
    };
    format!("{} {}", field("name"), field("version"))
}

/// Revisions kept from one answer (a member cannot make the edge hold or log more).
const MAX_REVISIONS: usize = 16;

fn is_revision(v: &str) -> bool {
    v.len() == 10
        && v.bytes().enumerate().all(|(i, b)| {
            if i == 4 || i == 7 {
                b == b'-'
            } else {
                b.is_ascii_digit()
            }
        })
}

/// Once per server identity: does the member accept a legacy `initialize`? A modern-only
/// server answers -32022. A session the probe opened is deleted at once, whatever came with
/// it. An answer that says neither leaves it unknown; no answer at all is asked again, at
/// most [`Speaks::LEGACY_ATTEMPTS`] times, until the server changes.
async fn learn_legacy(pool: &Pool, member: &Member) {
    let CheckKind::Mcp { path, .. } = &pool.health.check else {
        return;
    };
    match member.speaks.lock() {
        Ok(mut speaks)
            if speaks.legacy.is_none() && speaks.legacy_attempts < Speaks::LEGACY_ATTEMPTS =>
        {
            speaks.legacy_attempts += 1;
        }
        _ => return,
    }
    let Some(opened) = open_legacy(pool, member, path, INITIALIZE_ID).await else {
        return;
    };
    end_legacy(pool, member, path, &opened).await;
    let Some(reply) = opened.reply else {
        return;
    };
    let legacy = if reply.get("result").is_some() {
        Some(true)
    } else {
        unsupported_list(&reply)
            .and_then(strings)
            .map(|list| list.iter().any(|v| crate::mcp::is_legacy_version(v)))
    };
    if let Ok(mut speaks) = member.speaks.lock() {
        speaks.legacy = legacy;
        // An answer came: whatever it said, the question is settled for this server.
        speaks.legacy_attempts = Speaks::LEGACY_ATTEMPTS;
        // A legacy-only server says who it is here, not in a discover answer.
        if speaks.identity.is_none() {
            speaks.identity = reply.pointer("/result/serverInfo").map(identity);
        }
    }
}

/// A legacy session a check opened: the `initialize` answer's message, the session (if the
/// server made one), the revision negotiated.
pub(super) struct Opened {
    pub(super) reply: Option<Value>,
    pub(super) session: Option<String>,
    pub(super) revision: String,
}

/// A legacy `initialize` POSTed to `path` with the string id `id`, and what it opened.
pub(super) async fn open_legacy(
    pool: &Pool,
    member: &Member,
    path: &str,
    id: &str,
) -> Option<Opened> {
    let t = pool.health.timeout;
    let body = client::initialize(&Value::from(id).to_string(), LATEST_LEGACY, client::HEALTH);
    let asked = exchange(pool, member, "POST", path, &body, &[]);
    let mut answer = tokio::time::timeout(t, asked).await.ok()??;
    let session = answer.session.take();
    let reply = tokio::time::timeout(t, answer.reply(id))
        .await
        .ok()
        .flatten();
    let revision = client::negotiated(reply.as_ref()).to_owned();
    Some(Opened {
        reply,
        session,
        revision,
    })
}

/// The session a check opened, deleted at the revision it was opened with (best effort: a
/// server without DELETE keeps it until it expires).
pub(super) async fn end_legacy(pool: &Pool, member: &Member, path: &str, opened: &Opened) {
    if let Some(session) = &opened.session {
        let headers = client::session_headers(session, &opened.revision);
        let gone = exchange(pool, member, "DELETE", path, "", &headers);
        let _ = tokio::time::timeout(pool.health.timeout, gone).await;
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
            if crate::net::tls::is_handshake_failure(&e) {
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

/// A member's answer to a check, its head read.
struct Answer {
    http: HttpSession,
    status: u16,
    /// The `Mcp-Session-Id` it issued, if any.
    session: Option<String>,
    sse: bool,
}

impl Answer {
    /// The JSON-RPC reply with `id`, from a JSON or an SSE body: at most [`MAX_ANSWER`] is
    /// read, and reading stops once the reply is complete (an SSE answer may stay open).
    async fn reply(&mut self, id: &str) -> Option<Value> {
        let (text, _) = self.message(id).await?;
        serde_json::from_str(&text).ok()
    }

    /// [`Answer::reply`] as the member wrote it: the JSON body, or the SSE event's data
    /// (and whether that event's lines ended in CRLF).
    async fn message(&mut self, id: &str) -> Option<(String, bool)> {
        let mut read = Vec::new();
        while read.len() < MAX_ANSWER {
            match self.http.read_body_ref().await {
                Ok(Some(chunk)) => read.extend_from_slice(chunk),
                _ => break,
            }
            if self.sse {
                if let Some(reply) = sse_reply(&read, id) {
                    return Some(reply);
                }
            }
        }
        if self.sse {
            return sse_reply(&read, id);
        }
        let text = String::from_utf8(read).ok()?;
        let v = serde_json::from_str::<Value>(&text).ok()?;
        (v.get("id").and_then(Value::as_str) == Some(id)).then_some((text, false))
    }
}

/// One HTTP/1.1 request on a fresh connection; the answer's head.
async fn exchange(
    pool: &Pool,
    member: &Member,
    method: &str,
    path: &str,
    body: &str,
    headers: &[(&str, &str)],
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
    let sse = text("content-type")
        .is_some_and(|t| t.to_ascii_lowercase().starts_with("text/event-stream"));
    Some(Answer {
        http,
        status,
        session,
        sse,
    })
}

/// The JSON-RPC message with `id` among the complete events of an SSE body (read by the
/// wire's event reader, as the doctor reads them): its data as written, and whether the
/// body's lines end in CRLF.
fn sse_reply(body: &[u8], id: &str) -> Option<(String, bool)> {
    let crlf = memchr::memmem::find(body, b"\r\n").is_some();
    let mut reader = crate::mcp::sse::EventData::default();
    let mut events = reader.feed(body);
    events.extend(reader.finish());
    events
        .into_iter()
        .find(|data| {
            serde_json::from_str::<Value>(data)
                .is_ok_and(|v| v.get("id").and_then(Value::as_str) == Some(id))
        })
        .map(|data| (data, crlf))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_reply_among_complete_sse_events() {
        let body = b"event: message\r\nid: 1\r\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\"}\r\n\r\ndata: {\"jsonrpc\":\"2.0\",\"id\":\"x\",\r\ndata: \"result\":{}}\n\n";
        let (reply, crlf) = sse_reply(body, "x").expect("reply");
        assert!(reply.contains("\"result\"") && crlf);
        assert!(sse_reply(body, "y").is_none());
        // The same event without its blank line is not complete yet.
        assert!(sse_reply(&body[..body.len() - 1], "x").is_none());
    }

    #[test]
    fn bare_cr_line_ends_count_and_only_revisions_are_kept() {
        let body = b"data: {\"jsonrpc\":\"2.0\",\"id\":\"x\",\"result\":{}}\r\r";
        assert!(sse_reply(body, "x").is_some());
        assert!(is_revision("2026-07-28"));
        for not in ["2026-7-28", "latest", "2026-07-28\n", "２０２６-07-28"] {
            assert!(!is_revision(not), "{not}");
        }
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
