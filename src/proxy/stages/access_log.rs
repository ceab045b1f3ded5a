//! One JSON access-log line per request, handed to the writer
//! ([`crate::ops::access_log`]), which adds the timestamp and writes it off the request path.

use pingora::proxy::Session;
use serde::Serialize;

use crate::proxy::ctx::Ctx;
use crate::proxy::stage::Stage;

pub struct AccessLog;

impl Stage for AccessLog {
    const NAME: &'static str = "access_log";

    fn logging(session: &Session, ctx: &mut Ctx) {
        if ctx.snapshot.access_log {
            log_line(session, ctx);
        }
    }
}

/// One JSON object per request, handed to the writer (`crate::ops::access_log`), which adds the
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

fn log_line(session: &Session, ctx: &Ctx) {
    let principal = ctx.request.principal.as_deref();
    let line = Line {
        route: ctx.route_name(),
        http_method: session.req_header().method.as_str(),
        method: (ctx.labels.method != "none").then_some(ctx.labels.method),
        name: ctx.request.message.as_ref().and_then(|m| m.name.as_deref()),
        era: ctx.labels.era.into(),
        member: ctx.upstream.member().map(|m| m.label.as_str()),
        status: session.response_written().map(|r| r.status.as_u16()),
        outcome: super::metrics::outcome(ctx).into(),
        error: ctx.error.as_ref().map(|e| e.kind().as_str()),
        duration_ms: ctx.started.elapsed().as_secs_f64() * 1000.0,
        bytes_sent: session.body_bytes_sent(),
        principal: principal.map(|p| p.subject.as_str()),
        tenant: principal.and_then(|p| p.tenant.as_deref()),
    };
    let mut json = Vec::with_capacity(320);
    // Serializing borrowed strings and numbers into a Vec cannot fail.
    if serde_json::to_writer(&mut json, &line).is_ok() {
        crate::ops::access_log::submit(json);
    }
}
