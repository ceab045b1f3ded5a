//! OpenTelemetry spans of each request, following the semantic conventions for MCP (the
//! attribute table is in `docs/observability.md`), when `[tracing]` is configured.
//!
//! - A SERVER span per request (first of all, so a refusal is traced too), named
//!   `{mcp.method.name} {tool or prompt}` once the body named them. A client's W3C
//!   `traceparent` is its parent on a listener with `trace_context = "continue"`; otherwise
//!   (the default) the span starts a trace of its own with a link to the client's span.
//! - A CLIENT span per try at a member: a refused connect and the member tried next are two.
//!   The member gets the CLIENT span's context in `traceparent` / `tracestate` (replacing the
//!   client's); the body is never touched (a stdio pool's server writes it into
//!   `params._meta` on the pipe, where there are no headers).
//! - Edge decisions are attributes of the SERVER span (`mcp.edge.*`).
//! - A long-lived stream (`subscriptions/listen`, a legacy GET stream) is an operation that
//!   ends when the stream opens: both spans end at the member's response head, marked
//!   `mcp.edge.stream = "opened"`. An open stream's life is in the metrics and in its
//!   access-log line, which carries the same trace id.

use std::time::SystemTime;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{
    Link, Span as _, SpanBuilder, SpanContext, SpanKind, Status, TraceContextExt, TraceFlags,
    Tracer as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::Span;
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::proxy::Session;

use super::outcome::Failure;
use crate::config::TraceContext;
use crate::error::Rejection;
use crate::mcp::rules::Era;
use crate::mcp::target::Kind;
use crate::proxy::ctx::{Ctx, Holds};
use crate::proxy::stage::{Admission, Flow, Outbound, Stage};
use crate::proxy::Edge;

/// The longest name, method or id a span carries (longer ones are cut).
const MAX_TEXT: usize = 256;

/// A traced request's spans.
pub struct State {
    server: Span,
    /// The current try's span.
    client: Option<Span>,
    /// The SERVER span's ids (for the access log, also once it ended).
    ids: SpanContext,
    http_method: http::Method,
    /// A legacy client's `MCP-Protocol-Version` header.
    legacy_version: Option<String>,
    /// Both spans ended (at a long-lived stream's head).
    ended: bool,
}

pub struct Trace;

impl Stage for Trace {
    const NAME: &'static str = "trace";

    async fn request(a: &mut Admission<'_>) -> Result<Flow, Rejection> {
        let Some(tracing) = &a.edge.tracing else {
            return Ok(Flow::Next);
        };
        let req = a.session.req_header();
        let remote = remote_parent(req);
        let mut builder = SpanBuilder::from_name(req.method.as_str().to_owned())
            .with_kind(SpanKind::Server)
            .with_start_time(SystemTime::now() - a.ctx.started.elapsed());
        let parent = match (a.edge.trace_context, remote) {
            (TraceContext::Continue, Some(sc)) => Context::new().with_remote_span_context(sc),
            (TraceContext::Link, Some(sc)) => {
                builder = builder.with_links(vec![Link::with_context(sc)]);
                Context::new()
            }
            (_, None) => Context::new(),
        };
        let mut server = tracing.tracer.build_with_context(builder, &parent);
        if server.is_recording() {
            server.set_attributes(connection(a.session, a.ctx));
        }
        a.ctx.stages.trace = Some(Box::new(State {
            ids: server.span_context().clone(),
            server,
            client: None,
            http_method: req.method.clone(),
            legacy_version: legacy_version(req),
            ended: false,
        }));
        Ok(Flow::Next)
    }

    fn attempt(ctx: &mut Ctx, edge: &Edge) {
        let (Some(tracing), Some(state)) = (&edge.tracing, ctx.stages.trace.as_deref_mut()) else {
            return;
        };
        if let Some(mut previous) = state.client.take() {
            previous.end();
        }
        let parent = Context::new().with_remote_span_context(state.ids.clone());
        let builder = SpanBuilder::from_name(state.http_method.as_str().to_owned())
            .with_kind(SpanKind::Client);
        let mut client = tracing.tracer.build_with_context(builder, &parent);
        if client.is_recording() {
            client.set_attributes(member(ctx));
        }
        if let Some(state) = ctx.stages.trace.as_deref_mut() {
            state.client = Some(client);
        }
    }

    fn attempt_failed(ctx: &mut Ctx, error: &pingora::Error) {
        let Some(state) = ctx.stages.trace.as_deref_mut() else {
            return;
        };
        if let Some(mut client) = state.client.take() {
            client.set_attribute(KeyValue::new("error.type", snake(error.etype().as_str())));
            client.set_status(Status::error(cut(&error.to_string()).to_owned()));
            client.end();
        }
    }

    fn upstream_request(o: &mut Outbound<'_>) -> pingora::Result<()> {
        let Some(client) = o
            .ctx
            .stages
            .trace
            .as_deref()
            .and_then(|s| s.client.as_ref())
        else {
            return Ok(());
        };
        inject(o.head, client.span_context())
    }

    fn response(head: &mut ResponseHeader, ctx: &mut Ctx, _edge: &Edge) -> pingora::Result<()> {
        if ctx.stages.limits.long_lived() && ctx.stages.trace.is_some() {
            finish(ctx, Some(head.status.as_u16()));
        }
        Ok(())
    }

    fn logging(session: &Session, ctx: &mut Ctx) {
        if ctx.stages.trace.as_deref().is_some_and(|s| !s.ended) {
            finish(ctx, session.response_written().map(|r| r.status.as_u16()));
        }
    }
}

/// The trace and span ids of the request's SERVER span, when it is traced.
pub fn ids(ctx: &Ctx) -> Option<&SpanContext> {
    ctx.stages.trace.as_deref().map(|s| &s.ids)
}

/// The client's span, from a valid `traceparent` (and its `tracestate`).
pub fn remote_parent(req: &RequestHeader) -> Option<SpanContext> {
    if !req.headers.contains_key("traceparent") {
        return None;
    }
    let extractor = opentelemetry_http::HeaderExtractor(&req.headers);
    let cx = TraceContextPropagator::new().extract(&extractor);
    let sc = cx.span().span_context().clone();
    sc.is_valid().then_some(sc)
}

/// The member's `traceparent` (and `tracestate`, when there is one): the CLIENT span.
fn inject(head: &mut RequestHeader, sc: &SpanContext) -> pingora::Result<()> {
    let flags = sc.trace_flags() & TraceFlags::SAMPLED;
    let parent = format!(
        "00-{}-{}-{:02x}",
        sc.trace_id(),
        sc.span_id(),
        flags.to_u8()
    );
    head.insert_header("traceparent", parent)?;
    let state = sc.trace_state().header();
    if state.is_empty() {
        head.remove_header("tracestate");
    } else {
        head.insert_header("tracestate", state)?;
    }
    Ok(())
}

/// The SERVER span's attributes known at the start: who calls, over what.
fn connection(session: &Session, ctx: &Ctx) -> Vec<KeyValue> {
    let mut kv = vec![
        KeyValue::new("network.transport", "tcp"),
        KeyValue::new("network.protocol.name", "http"),
        KeyValue::new(
            "network.protocol.version",
            match session.req_header().version {
                http::Version::HTTP_2 => "2",
                http::Version::HTTP_10 => "1.0",
                _ => "1.1",
            },
        ),
        KeyValue::new(
            "http.request.method",
            session.req_header().method.as_str().to_owned(),
        ),
    ];
    let client = super::forwarding::client_address(session, &ctx.snapshot.forwarding);
    if let Some(ip) = client {
        kv.push(KeyValue::new("client.address", ip.to_string()));
    }
    kv
}

/// The CLIENT span's attributes known at the start of a try: the member.
fn member(ctx: &Ctx) -> Vec<KeyValue> {
    let stdio = ctx
        .route()
        .and_then(|r| r.pool.stdio.get().map(|_| &r.pool.name));
    if let Some(pool) = stdio {
        return vec![
            KeyValue::new("network.transport", "pipe"),
            KeyValue::new("mcp.edge.stdio.pool", pool.clone()),
        ];
    }
    let mut kv = vec![KeyValue::new("network.transport", "tcp")];
    if let Some(m) = ctx.upstream.member() {
        kv.push(KeyValue::new("server.address", m.addr.ip().to_string()));
        kv.push(KeyValue::new("server.port", i64::from(m.addr.port())));
    }
    kv
}

/// End the spans with what the request became; `status`: the HTTP status sent.
fn finish(ctx: &mut Ctx, status: Option<u16>) {
    let Some(mut state) = ctx.stages.trace.take() else {
        return;
    };
    state.ended = true;
    let failure = Failure::of(ctx);
    if state.server.is_recording() || state.client.as_ref().is_some_and(|c| c.is_recording()) {
        let common = operation(ctx, &state, failure.as_ref());
        let name = span_name(ctx, &state);
        if let Some(mut client) = state.client.take() {
            client.update_name(name.clone());
            client.set_attributes(common.iter().cloned());
            if let Some(s) = ctx.upstream.status {
                client.set_attribute(KeyValue::new("http.response.status_code", i64::from(s)));
            }
            if let Some(f) = &failure {
                // Every failure of the member's answer is the client's failure.
                client.set_status(Status::error(f.error_type()));
            }
            client.end();
        }
        state.server.update_name(name);
        state.server.set_attributes(common);
        state.server.set_attributes(decisions(ctx, status));
        if let Some(f) = failure.filter(Failure::is_server_side) {
            state.server.set_status(Status::error(description(&f)));
        }
    }
    if let Some(mut client) = state.client.take() {
        client.end();
    }
    state.server.end();
    ctx.stages.trace = Some(state);
}

/// `{mcp.method.name} {target}` (a tool's or prompt's name); `{HTTP method} {route}` for a
/// request without a method (a stream, a `DELETE`).
fn span_name(ctx: &Ctx, state: &State) -> String {
    let message = ctx.request.message.as_deref();
    match message.and_then(|m| m.method.as_deref()) {
        Some(method) => {
            let target = message
                .and_then(|m| m.target.as_ref())
                .filter(|t| t.kind != Kind::Resource);
            match target {
                Some(t) => format!("{} {}", cut(method), cut(&t.value)),
                None => cut(method).to_owned(),
            }
        }
        None => format!("{} {}", state.http_method, ctx.route_name()),
    }
}

/// The attributes both spans carry: the operation and how it ended.
fn operation(ctx: &Ctx, state: &State, failure: Option<&Failure<'_>>) -> Vec<KeyValue> {
    let mut kv = Vec::with_capacity(10);
    let message = ctx.request.message.as_deref();
    let method = message.and_then(|m| m.method.as_deref());
    if let Some(method) = method {
        kv.push(KeyValue::new("mcp.method.name", cut(method).to_owned()));
    }
    if method == Some("tools/call") {
        kv.push(KeyValue::new("gen_ai.operation.name", "execute_tool"));
    }
    if let Some(t) = message.and_then(|m| m.target.as_ref()) {
        let key = match t.kind {
            Kind::Tool => "gen_ai.tool.name",
            Kind::Prompt => "gen_ai.prompt.name",
            Kind::Resource => "mcp.resource.uri",
        };
        kv.push(KeyValue::new(key, cut(&t.value).to_owned()));
    }
    if let Some(id) = message.and_then(|m| m.id.as_ref()) {
        let id = match id {
            serde_json::Value::String(s) => cut(s).to_owned(),
            other => cut(&other.to_string()).to_owned(),
        };
        kv.push(KeyValue::new("jsonrpc.request.id", id));
    }
    let version = match &ctx.request.era {
        Some(Era::Modern(v)) => Some(v.clone()),
        _ => state.legacy_version.clone(),
    };
    if let Some(v) = version {
        kv.push(KeyValue::new("mcp.protocol.version", v));
    }
    if let Some(id) = super::legacy::upstream_session(ctx) {
        kv.push(KeyValue::new("mcp.session.id", cut(id).to_owned()));
    }
    if let Some(f) = failure {
        kv.push(KeyValue::new("error.type", f.error_type()));
        if let Some(code) = f.code() {
            kv.push(KeyValue::new("rpc.response.status_code", code));
        }
    }
    kv
}

/// What the edge decided, on the SERVER span.
fn decisions(ctx: &Ctx, status: Option<u16>) -> Vec<KeyValue> {
    let mut kv = vec![
        KeyValue::new("mcp.edge.route", ctx.route_name().to_owned()),
        KeyValue::new(
            "mcp.edge.outcome",
            <&str>::from(super::metrics::outcome(ctx)),
        ),
        KeyValue::new("mcp.edge.era", <&str>::from(ctx.labels.era)),
    ];
    if let Some(s) = status {
        kv.push(KeyValue::new("http.response.status_code", i64::from(s)));
    }
    if let Some(e) = &ctx.error {
        kv.push(KeyValue::new("mcp.edge.error", e.kind().as_str()));
    }
    let request = &ctx.request;
    if request.bridged {
        kv.push(KeyValue::new("mcp.edge.bridged", true));
    }
    if ctx.answered {
        kv.push(KeyValue::new("mcp.edge.answered", true));
    }
    if let Some(p) = &request.pinned {
        let held = match p.holds {
            Holds::Session => "session",
            Holds::Task => "task",
        };
        kv.push(KeyValue::new("mcp.edge.pinned", held));
    }
    if let Some(rate) = request.decided.rate {
        kv.push(KeyValue::new("mcp.edge.rate_limit", <&str>::from(rate)));
    }
    if let Some(p) = &request.decided.policy {
        kv.push(KeyValue::new(
            "mcp.edge.policy.verdict",
            <&str>::from(p.verdict),
        ));
        kv.push(KeyValue::new("mcp.edge.policy.rule", p.rule.clone()));
    }
    let tried = ctx.upstream.tried.len();
    if tried > 0 {
        kv.push(KeyValue::new("mcp.edge.attempts", tried as i64));
    }
    if ctx.stages.limits.long_lived() {
        kv.push(KeyValue::new("mcp.edge.stream", "opened"));
    }
    kv
}

/// The span status's description: the edge's error message, or the answer's code.
fn description(failure: &Failure<'_>) -> String {
    match failure {
        Failure::Edge(e) => cut(&e.message()).to_owned(),
        Failure::Code(code) => format!("JSON-RPC error {code}"),
        Failure::ToolError => "the tool reported an error".to_owned(),
        Failure::Cancelled => "cancelled".to_owned(),
        Failure::Status(s) => format!("the member answered {s}"),
    }
}

/// A legacy client's `MCP-Protocol-Version` header, when it is a plausible revision.
fn legacy_version(req: &RequestHeader) -> Option<String> {
    let v = req.headers.get(crate::mcp::headers::PROTOCOL_VERSION)?;
    let v = v.to_str().ok()?;
    (v.len() <= 16 && v.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'))
        .then(|| v.to_owned())
}

/// `ConnectRefused` as `connect_refused`.
fn snake(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 4);
    for (i, c) in name.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// At most [`MAX_TEXT`] bytes of `text`, cut at a character boundary.
fn cut(text: &str) -> &str {
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
        assert_eq!(snake("TLSHandshakeFailure"), "t_l_s_handshake_failure");
        let long = "é".repeat(200);
        assert!(cut(&long).len() <= MAX_TEXT && long.starts_with(cut(&long)));
    }

    #[test]
    fn the_member_gets_the_client_span_and_its_state() {
        let mut head = RequestHeader::build("POST", b"/mcp", None).unwrap();
        head.insert_header(
            "traceparent",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        )
        .unwrap();
        head.insert_header("tracestate", "vendor=1").unwrap();
        let sc = remote_parent(&head).unwrap();
        assert_eq!(sc.trace_state().header(), "vendor=1");
        let ours = SpanContext::new(
            sc.trace_id(),
            opentelemetry::trace::SpanId::from_hex("00f067aa0ba902b7").unwrap(),
            TraceFlags::default(),
            false,
            Default::default(),
        );
        inject(&mut head, &ours).unwrap();
        assert_eq!(
            head.headers.get("traceparent").unwrap(),
            "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-00"
        );
        assert!(
            head.headers.get("tracestate").is_none(),
            "no state: none sent"
        );
        head.insert_header(
            "traceparent",
            "00-00000000000000000000000000000000-b7ad6b7169203331-01",
        )
        .unwrap();
        assert!(
            remote_parent(&head).is_none(),
            "an all-zero trace id is no parent"
        );
    }
}
