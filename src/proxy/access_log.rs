//! The end of every request: its metrics and one JSON access-log line.

use std::sync::LazyLock;

use pingora::proxy::Session;
use serde::Serialize;

use super::ctx::Ctx;
use crate::error::EdgeError;
use crate::metrics::{self, Outcome, RouteSeries};

/// Handles for requests that never matched a route.
static NO_ROUTE: LazyLock<RouteSeries> = LazyLock::new(RouteSeries::default);

/// Record a finished request (forwarded, rejected or failed).
pub fn finish(session: &Session, ctx: &Ctx) {
    let outcome = outcome(ctx);
    let seconds = ctx.started.elapsed().as_secs_f64();
    let l = &ctx.labels;
    // A request refused before a route was found counts under `route="none"`.
    let (series, route) = match &l.route {
        Some(route) => (&route.series, route.name.as_str()),
        None => (&*NO_ROUTE, l.route()),
    };
    series.finished(route, l.method, l.era, outcome, seconds);
    if ctx.sse {
        metrics::get().sse_streams(ctx.labels.era, -1);
    }
    log_line(session, ctx, outcome);
}

fn outcome(ctx: &Ctx) -> Outcome {
    match (&ctx.error, ctx.upstream.status) {
        (None, Some(_)) => Outcome::Forwarded,
        (None, None) if ctx.answered => Outcome::Answered,
        (Some(EdgeError::ClientError { .. }), _) => Outcome::ClientError,
        (Some(e), _) if e.status() < 500 => Outcome::Rejected,
        _ => Outcome::Failed,
    }
}

/// One JSON object per request, handed to the writer (`crate::access_log`), which adds the
/// timestamp and writes it off the request path. Never carries Authorization, session ids,
/// tokens or arguments.
#[derive(Serialize)]
struct Line<'a> {
    route: &'a str,
    http_method: &'a str,
    method: Option<&'a str>,
    name: Option<&'a str>,
    era: &'static str,
    member: Option<&'a str>,
    status: Option<u16>,
    outcome: &'static str,
    error: Option<&'static str>,
    duration_ms: f64,
    bytes_sent: usize,
    /// Who called, on a route with `auth` (the principal's subject and tenant).
    #[serde(skip_serializing_if = "Option::is_none")]
    principal: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tenant: Option<&'a str>,
}

fn log_line(session: &Session, ctx: &Ctx, outcome: Outcome) {
    if !ctx.snapshot.access_log {
        return;
    }
    let line = Line {
        route: ctx.labels.route(),
        http_method: session.req_header().method.as_str(),
        method: (ctx.labels.method != "none").then_some(ctx.labels.method),
        name: ctx.labels.name.as_deref(),
        era: ctx.labels.era.into(),
        member: ctx.upstream.member().map(|m| m.label.as_str()),
        status: session.response_written().map(|r| r.status.as_u16()),
        outcome: outcome.into(),
        error: ctx.error.as_ref().map(|e| e.kind().as_str()),
        duration_ms: ctx.started.elapsed().as_secs_f64() * 1000.0,
        bytes_sent: session.body_bytes_sent(),
        principal: ctx.principal.as_deref().map(|p| p.subject.as_str()),
        tenant: ctx.principal.as_deref().and_then(|p| p.tenant.as_deref()),
    };
    let mut json = Vec::with_capacity(320);
    // Serializing borrowed strings and numbers into a Vec cannot fail.
    if serde_json::to_writer(&mut json, &line).is_ok() {
        crate::access_log::submit(json);
    }
}
