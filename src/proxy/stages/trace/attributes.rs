//! The spans' attributes, after the OpenTelemetry semantic conventions for MCP (the table is
//! in `docs/observability.md`), and the edge's own (`mcp.edge.*`). Callers choose methods,
//! names and ids: what a span carries is bounded (names by shape, text by length).

use std::borrow::Cow;

use pingora::http::RequestHeader;
use pingora::proxy::Session;

use crate::mcp::rules::Era;
use crate::mcp::target::Kind;
use crate::ops::tracing::{Attribute, Value};
use crate::proxy::ctx::{Ctx, Holds};
use crate::proxy::stages::outcome::Failure;

/// An attribute.
fn attr(key: &'static str, value: impl Into<Value>) -> Attribute {
    (key, value.into())
}

/// The longest name, method or id a span carries (longer ones are cut).
const MAX_TEXT: usize = 256;

/// The SERVER span's attributes known at the start: who calls, over what.
pub fn connection(session: &Session, ctx: &Ctx) -> Vec<Attribute> {
    // Room for what the span gets when it ends (`target`, `operation`, `outcome`, `decisions`).
    let mut kv = Vec::with_capacity(24);
    kv.extend([
        attr("network.transport", "tcp"),
        attr("network.protocol.name", "http"),
        attr(
            "network.protocol.version",
            match session.req_header().version {
                http::Version::HTTP_2 => "2",
                http::Version::HTTP_10 => "1.0",
                _ => "1.1",
            },
        ),
        attr(
            "http.request.method",
            http_method(&session.req_header().method),
        ),
    ]);
    let client = crate::proxy::stages::forwarding::client_address(session, ctx);
    if let Some(ip) = client {
        kv.push(attr("client.address", ip));
    }
    kv
}

/// The CLIENT span's attributes known at the start of a try: the member.
pub fn member(ctx: &Ctx) -> Vec<Attribute> {
    let stdio = ctx
        .route()
        .and_then(|r| r.pool.stdio.get().map(|_| &r.pool.name));
    if let Some(pool) = stdio {
        return vec![
            attr("network.transport", "pipe"),
            attr("mcp.edge.stdio.pool", pool.clone()),
        ];
    }
    // Room for the target's and the answer's attributes.
    let mut kv = Vec::with_capacity(10);
    kv.push(attr("network.transport", "tcp"));
    if let Some(m) = ctx.upstream.member() {
        kv.push(attr("server.address", m.addr.ip()));
        kv.push(attr("server.port", i64::from(m.addr.port())));
    }
    kv
}

/// `error.type`, and the JSON-RPC code of the answer.
pub fn outcome(failure: &Failure<'_>) -> Vec<Attribute> {
    let mut kv = vec![attr("error.type", failure.error_type())];
    if let Some(code) = failure.code() {
        kv.push(attr("rpc.response.status_code", code));
    }
    kv
}

/// `{mcp.method.name} {target}`: the method as the metrics bound it (a known one, else
/// `other`) and the tool's or prompt's name when it is a plausible name (at most 64 bytes of
/// letters, digits, `_`, `-`, `.`, `/`); `{HTTP method} {route}` for a request without a
/// method (a stream, a `DELETE`). Callers choose names and methods: a span name must not
/// carry whatever they send.
pub fn span_name(ctx: &Ctx, http_method: &str) -> Cow<'static, str> {
    let message = ctx.request.message.as_deref();
    if message.and_then(|m| m.method.as_deref()).is_none() {
        return joined(http_method, ctx.route_name()).into();
    }
    let method = ctx.labels.method;
    let target = message
        .and_then(|m| m.target.as_ref())
        .filter(|t| t.kind != Kind::Resource && plausible_name(&t.value));
    match target {
        Some(t) => joined(method, &t.value).into(),
        None => method.into(),
    }
}

/// `{a} {b}`, without a formatter.
fn joined(a: &str, b: &str) -> String {
    let mut s = String::with_capacity(a.len() + 1 + b.len());
    s.push_str(a);
    s.push(' ');
    s.push_str(b);
    s
}

fn plausible_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b'/'))
}

/// The attributes both spans carry: the method and what it names.
pub fn target(ctx: &Ctx) -> Vec<Attribute> {
    let mut kv = Vec::with_capacity(3);
    let message = ctx.request.message.as_deref();
    let method = message.and_then(|m| m.method.as_deref());
    if let Some(method) = method {
        kv.push(attr("mcp.method.name", shared(cut(method))));
    }
    if method == Some("tools/call") {
        kv.push(attr("gen_ai.operation.name", "execute_tool"));
    }
    if let Some(t) = message.and_then(|m| m.target.as_ref()) {
        let key = match t.kind {
            Kind::Tool => "gen_ai.tool.name",
            Kind::Prompt => "gen_ai.prompt.name",
            Kind::Resource => "mcp.resource.uri",
        };
        let value = match t.kind {
            Kind::Resource => crate::mcp::target::redacted_uri(&t.value),
            _ => t.value.as_str().into(),
        };
        kv.push(attr(key, shared(cut(&value))));
    }
    kv
}

/// The request's details, on the SERVER span (its CLIENT spans are its children).
pub fn operation(ctx: &Ctx, legacy_version: Option<&str>) -> Vec<Attribute> {
    let mut kv = Vec::with_capacity(3);
    let message = ctx.request.message.as_deref();
    if let Some(id) = message.and_then(|m| m.id.as_ref()) {
        let id = match id {
            serde_json::Value::String(s) => shared(cut(s)),
            other => shared(cut(&other.to_string())),
        };
        kv.push(attr("jsonrpc.request.id", id));
    }
    let version = match &ctx.request.era {
        Some(Era::Modern(v)) => Some(v.as_str()),
        _ => legacy_version,
    };
    if let Some(v) = version {
        kv.push(attr("mcp.protocol.version", shared(v)));
    }
    if let Some(id) = crate::proxy::stages::legacy::upstream_session(ctx) {
        kv.push(attr("mcp.session.id", shared(cut(id))));
    }
    kv
}

/// An attribute value both spans share (cloned by a count, not a copy).
fn shared(text: &str) -> std::sync::Arc<str> {
    std::sync::Arc::from(text)
}

/// What the edge decided, on the SERVER span.
pub fn decisions(ctx: &Ctx, status: Option<u16>) -> Vec<Attribute> {
    let mut kv = vec![
        attr("mcp.edge.route", ctx.route_name().to_owned()),
        attr(
            "mcp.edge.outcome",
            <&str>::from(crate::proxy::stages::metrics::outcome(ctx)),
        ),
        attr("mcp.edge.era", <&str>::from(ctx.labels.era)),
    ];
    if let Some(s) = status {
        kv.push(attr("http.response.status_code", i64::from(s)));
    }
    if let Some(e) = &ctx.error {
        kv.push(attr("mcp.edge.error", e.kind().as_str()));
    }
    let request = &ctx.request;
    if request.bridged {
        kv.push(attr("mcp.edge.bridged", true));
    }
    if ctx.answered {
        kv.push(attr("mcp.edge.answered", true));
    }
    if let Some(p) = &request.pinned {
        let held = match p.holds {
            Holds::Session => "session",
            Holds::Task => "task",
            Holds::ReplicaSession | Holds::ReplicaCaller => "replica",
        };
        kv.push(attr("mcp.edge.pinned", held));
    }
    if ctx.upstream.member().is_some() {
        kv.push(attr(
            "mcp.edge.credential",
            crate::proxy::stages::credential::kind(ctx),
        ));
    }
    if let Some(rate) = request.decided.rate {
        kv.push(attr("mcp.edge.rate_limit", <&str>::from(rate)));
    }
    if let Some(p) = &request.decided.policy {
        kv.push(attr("mcp.edge.policy.verdict", <&str>::from(p.verdict)));
        kv.push(attr("mcp.edge.policy.rule", p.rule.clone()));
    }
    let tried = ctx.upstream.tried.len();
    if tried > 0 {
        kv.push(attr("mcp.edge.attempts", tried as i64));
    }
    if let Some(waited) = ctx.upstream.queued {
        kv.push(attr("mcp.edge.queue.wait_ms", waited.as_millis() as i64));
    }
    if ctx.stages.limits.long_lived() {
        kv.push(attr("mcp.edge.stream", "opened"));
    }
    kv
}

/// The span status's description: the edge's error message, or the answer's code.
pub fn description(failure: &Failure<'_>) -> String {
    match failure {
        Failure::Edge(e) => cut(&e.message()).to_owned(),
        Failure::Code(code) => format!("JSON-RPC error {code}"),
        Failure::ToolError => "the tool reported an error".to_owned(),
        Failure::Cancelled => "cancelled".to_owned(),
        Failure::Status(s) => format!("the member answered {s}"),
    }
}

/// The HTTP method as the conventions bound it: one of HTTP's, else `_OTHER` (a method of a
/// megabyte is a head Pingora takes).
pub fn http_method(method: &http::Method) -> &'static str {
    const KNOWN: &[&str] = &[
        "GET", "POST", "DELETE", "PUT", "PATCH", "HEAD", "OPTIONS", "CONNECT", "TRACE",
    ];
    KNOWN
        .iter()
        .find(|k| **k == method.as_str())
        .copied()
        .unwrap_or("_OTHER")
}

/// A legacy client's `MCP-Protocol-Version` header, when it is a plausible revision.
pub fn legacy_version(req: &RequestHeader) -> Option<String> {
    let v = req.headers.get(crate::mcp::headers::PROTOCOL_VERSION)?;
    let v = v.to_str().ok()?;
    (v.len() <= 16 && v.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'))
        .then(|| v.to_owned())
}

/// Pingora's error names in snake case: `ConnectRefused` as `connect_refused`,
/// `TLSHandshakeFailure` as `tls_handshake_failure`.
pub fn snake(name: &str) -> String {
    let chars: Vec<char> = name.chars().collect();
    let mut out = String::with_capacity(name.len() + 4);
    for (i, &c) in chars.iter().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            let before = chars[i - 1];
            let next_lower = chars.get(i + 1).is_some_and(char::is_ascii_lowercase);
            if !before.is_ascii_uppercase() || next_lower {
                out.push('_');
            }
        }
        out.push(c.to_ascii_lowercase());
    }
    out
}

/// At most [`MAX_TEXT`] bytes of `text`, cut at a character boundary.
pub fn cut(text: &str) -> &str {
    if text.len() <= MAX_TEXT {
        return text;
    }
    let mut end = MAX_TEXT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_cuts() {
        assert_eq!(snake("ConnectRefused"), "connect_refused");
        assert_eq!(snake("TLSHandshakeFailure"), "tls_handshake_failure");
        assert_eq!(snake("H2Error"), "h2_error");
        assert_eq!(snake("HTTPStatus"), "http_status");
        let long = "é".repeat(200);
        assert!(cut(&long).len() <= MAX_TEXT && long.starts_with(cut(&long)));
    }
}
