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

use std::borrow::Cow;
use std::sync::Arc;
use std::time::SystemTime;

use opentelemetry::trace::{SpanContext, SpanKind, TraceState};
use pingora::http::ResponseHeader;
use pingora::proxy::Session;

use super::outcome::Failure;
use crate::config::TraceContext;
use crate::error::Rejection;
use crate::ops::tracing::{Attribute, Parent, Span, Tracing};
use crate::proxy::ctx::Ctx;
use crate::proxy::edge::{Edge, Listening};
use crate::proxy::stage::{Admission, Flow, Outbound, Stage};

mod attributes;
mod context;

pub use attributes::http_method;
use attributes::{
    connection, cut, decisions, description, legacy_version, member, operation, outcome, snake,
    span_name, target,
};
use context::inject;
pub use context::{remote_parent, span_hex, trace_hex};

/// A traced request's spans.
pub struct State {
    tracing: Arc<Tracing>,
    /// Until it ends.
    server: Option<Span>,
    /// The current try's span.
    client: Option<Span>,
    /// The SERVER span's ids (for the access log, also once it ended).
    ids: SpanContext,
    /// The HTTP method, as the conventions bound it (`_OTHER` for one not in HTTP's list).
    http_method: &'static str,
    /// The current try failed (its span has its error already).
    client_failed: bool,
    /// A legacy client's `MCP-Protocol-Version` header.
    legacy_version: Option<String>,
    /// The operation's name and target, once built (both spans carry them; their text is
    /// shared).
    target: Option<(Cow<'static, str>, Vec<Attribute>)>,
    /// Both spans ended (at a long-lived stream's head).
    ended: bool,
}

/// A request dropped before its logging phase (a task cancelled at shutdown) still exports
/// the spans it started, as they stand.
impl Drop for State {
    fn drop(&mut self) {
        if let Some(client) = self.client.take() {
            self.tracing.end(client);
        }
        if let Some(server) = self.server.take() {
            self.tracing.end(server);
        }
    }
}

pub struct Trace;

impl Stage for Trace {
    const NAME: &'static str = "trace";

    /// A listener with a tracer (`[tracing]`).
    fn listens(listening: &Listening) -> bool {
        listening.tracing.is_some()
    }

    async fn request(a: &mut Admission<'_>) -> Result<Flow, Rejection> {
        let Some(tracing) = &a.edge.tracing else {
            return Ok(Flow::Next);
        };
        let req = a.session.req_header();
        // Only a request that carries one pays for reading it.
        let remote = remote_parent(req);
        let http_method = http_method(&req.method);
        let start = SystemTime::now() - a.ctx.started.elapsed();
        let (parent, link) = match (a.edge.trace_context, &remote) {
            (TraceContext::Continue, Some(sc)) => (Parent::Remote(sc), None),
            // The client's span, not its state: nothing of the client's is exported.
            (TraceContext::Link, Some(sc)) => (
                Parent::Root,
                Some(SpanContext::new(
                    sc.trace_id(),
                    sc.span_id(),
                    sc.trace_flags(),
                    true,
                    TraceState::NONE,
                )),
            ),
            (_, None) => (Parent::Root, None),
        };
        let mut server = tracing.span(parent, SpanKind::Server, http_method, start);
        if server.is_recording() {
            server.link = link;
            server.attributes = connection(a.session, a.ctx);
        }
        a.ctx.stages.trace = Some(Box::new(State {
            tracing: tracing.clone(),
            ids: server.context.clone(),
            server: Some(server),
            client: None,
            http_method,
            client_failed: false,
            legacy_version: legacy_version(req),
            target: None,
            ended: false,
        }));
        Ok(Flow::Next)
    }

    fn attempt(ctx: &mut Ctx, _edge: &Edge) {
        let Some(state) = ctx.stages.trace.as_deref_mut() else {
            return;
        };
        if let Some(previous) = state.client.take() {
            state.tracing.end(previous);
        }
        state.client_failed = false;
        if !state.ids.is_sampled() {
            // Not recorded: the try's span only carries its ids to the member.
            let client = state.tracing.span(
                Parent::Local(&state.ids),
                SpanKind::Client,
                "",
                SystemTime::now(),
            );
            state.client = Some(client);
            return;
        }
        let (http_method, built) = (state.http_method, state.target.take());
        // Admission is over: what the request is, is known.
        let (name, target) = built.unwrap_or_else(|| (span_name(ctx, http_method), target(ctx)));
        let mut attributes = member(ctx);
        attributes.extend(target.iter().cloned());
        let Some(state) = ctx.stages.trace.as_deref_mut() else {
            return;
        };
        let mut client = state.tracing.span(
            Parent::Local(&state.ids),
            SpanKind::Client,
            name.clone(),
            SystemTime::now(),
        );
        client.attributes = attributes;
        state.client = Some(client);
        state.target = Some((name, target));
    }

    fn attempt_failed(ctx: &mut Ctx, error: &pingora::Error) {
        let Some(state) = ctx.stages.trace.as_deref_mut() else {
            return;
        };
        // The client going away is no failure of the try (the SERVER span says cancelled).
        if error.esource() == &pingora::ErrorSource::Downstream {
            return;
        }
        if let Some(client) = state.client.as_mut().filter(|c| c.is_recording()) {
            client.set("error.type", snake(error.etype().as_str()));
            client.fail(cut(&error.to_string()).to_owned());
            state.client_failed = true;
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
        if o.ctx.endpoint()?.route.pool.stdio.get().is_some() {
            o.head.insert_header(crate::stdio::TRACED_HEADER, "1")?;
        }
        inject(o.head, &client.context)
    }

    fn response(head: &mut ResponseHeader, ctx: &mut Ctx, _edge: &Edge) -> pingora::Result<()> {
        // A 1xx head is not the answer.
        let informational = head.status.is_informational();
        if !informational && ctx.stages.limits.long_lived() && ctx.stages.trace.is_some() {
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

/// End the spans with what the request became; `status`: the HTTP status sent.
fn finish(ctx: &mut Ctx, status: Option<u16>) {
    let Some(mut state) = ctx.stages.trace.take() else {
        return;
    };
    state.ended = true;
    if !state.ids.is_sampled() {
        // Nothing recorded, nothing to export.
        state.server = None;
        state.client = None;
        ctx.stages.trace = Some(state);
        return;
    }
    let failure = Failure::of(ctx);
    let outcome = failure.as_ref().map(outcome).unwrap_or_default();
    if let Some(mut client) = state.client.take() {
        if let Some(s) = ctx.upstream.status {
            client.set("http.response.status_code", i64::from(s));
        }
        // A failed try has its error; the last one's answer is the try's outcome.
        if !state.client_failed {
            if let Some(f) = failure.filter(|f| *f != Failure::Cancelled) {
                client.extend(outcome.iter().cloned());
                client.fail(description(&f));
            }
        }
        state.tracing.end(client);
    }
    if let Some(mut server) = state.server.take() {
        let (name, target) = match state.target.take() {
            Some(built) => built,
            None => (span_name(ctx, state.http_method), target(ctx)),
        };
        server.name = name;
        server.extend(target);
        server.extend(operation(ctx, state.legacy_version.as_deref()));
        server.extend(outcome);
        server.extend(decisions(ctx, status));
        // The MCP conventions: ERROR whenever `error.type` is set (a refusal too), its
        // description the error's message.
        if let Some(f) = failure {
            server.fail(description(&f));
        }
        state.tracing.end(server);
    }
    ctx.stages.trace = Some(state);
}
