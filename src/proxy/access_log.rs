//! The end of every request: its metrics and one JSON access-log line.

use pingora::proxy::Session;

use super::ctx::Ctx;
use crate::error::EdgeError;
use crate::metrics;

/// Record a finished request (forwarded, rejected or failed).
pub fn finish(session: &Session, ctx: &Ctx) {
    let outcome = outcome(ctx);
    let m = metrics::get();
    let (route, era) = (ctx.labels.route(), ctx.labels.era.into());
    m.requests
        .with_label_values(&[route, ctx.labels.method, era, outcome])
        .inc();
    m.request_duration
        .with_label_values(&[route, era])
        .observe(ctx.started.elapsed().as_secs_f64());
    if ctx.sse {
        m.sse_streams(ctx.labels.era, -1);
    }
    log_line(session, ctx, outcome);
}

fn outcome(ctx: &Ctx) -> &'static str {
    match (&ctx.error, ctx.upstream.status) {
        (None, Some(_)) => "forwarded",
        (Some(EdgeError::ClientError { .. }), _) => "client_error",
        (Some(e), _) if e.status() < 500 => "rejected",
        _ => "failed",
    }
}

/// One JSON line per request. Never logs Authorization, session ids or tokens.
fn log_line(session: &Session, ctx: &Ctx, outcome: &str) {
    if !log::log_enabled!(target: "access", log::Level::Info) {
        return;
    }
    let status = session.response_written().map(|r| r.status.as_u16());
    let era: &'static str = ctx.labels.era.into();
    let line = serde_json::json!({
        "route": ctx.labels.route(),
        "http_method": session.req_header().method.as_str(),
        "method": (ctx.labels.method != "none").then_some(ctx.labels.method),
        "name": ctx.labels.name.as_deref(),
        "era": era,
        "member": ctx.upstream.member().map(|m| m.label.as_str()),
        "status": status,
        "outcome": outcome,
        "error": ctx.error.as_ref().map(|e| e.kind().as_str()),
        "duration_ms": ctx.started.elapsed().as_secs_f64() * 1000.0,
        "bytes_sent": session.body_bytes_sent(),
    });
    log::info!(target: "access", "{line}");
}
