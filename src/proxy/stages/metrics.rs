//! Every request's metrics: its member's response (status class, time to the response head)
//! and the open event streams as they start; at the end, the request by route, method, era
//! and outcome, and its duration.

use std::sync::LazyLock;

use pingora::http::ResponseHeader;
use pingora::proxy::Session;

use super::outcome::Failure;
use crate::error::EdgeError;
use crate::metrics::{self, Outcome, RouteSeries};
use crate::proxy::ctx::Ctx;
use crate::proxy::edge::Edge;
use crate::proxy::stage::Stage;

/// Handles for requests that never matched a route.
static NO_ROUTE: LazyLock<RouteSeries> = LazyLock::new(RouteSeries::default);

#[derive(Default)]
pub struct State {
    /// The response is an event stream counted in `mcp_edge_active_sse_streams`.
    streaming: bool,
    /// The MCP operation's duration was recorded (a long-lived stream's, at its head).
    operation: bool,
}

pub struct Metrics;

impl Stage for Metrics {
    const NAME: &'static str = "metrics";

    fn response(head: &mut ResponseHeader, ctx: &mut Ctx, _edge: &Edge) -> pingora::Result<()> {
        let status = head.status.as_u16();
        ctx.upstream.status = Some(status);
        // A long-lived stream's operation is over once it opened (a 1xx head is not that).
        let opened = !head.status.is_informational() && ctx.stages.limits.long_lived();
        if opened && !ctx.stages.metrics.operation {
            operation(ctx);
        }
        if ctx.response.is_event_stream() && !ctx.stages.metrics.streaming {
            ctx.stages.metrics.streaming = true;
            metrics::get().sse_streams(ctx.labels.era, 1);
        }
        let (Some(route), Some(member)) = (ctx.route(), ctx.upstream.member()) else {
            return Ok(());
        };
        let pool = &route.pool;
        if let Some(t) = ctx.upstream.started {
            pool.latency
                .get_or_init(|| {
                    metrics::get()
                        .upstream_latency
                        .with_label_values(&[pool.name.as_str()])
                })
                .observe(t.elapsed().as_secs_f64());
        }
        member.series.response(&pool.name, &member.label, status);
        Ok(())
    }

    fn logging(_session: &Session, ctx: &mut Ctx) {
        if ctx.handed_off() && ctx.error.is_none() {
            // Counted where it was served (`mcp_edge_handoffs_total{outcome="sent"}` here).
            return;
        }
        let seconds = ctx.started.elapsed().as_secs_f64();
        let outcome = *ctx.response.outcome.get_or_init(|| ended(ctx));
        let l = &ctx.labels;
        // A request refused before a route was found counts under `route="none"`.
        let (series, route) = match ctx.route() {
            Some(route) => (&route.series, route.name.as_str()),
            None => (&*NO_ROUTE, ctx.route_name()),
        };
        series.finished(route, l.method, l.era, outcome, seconds);
        if !ctx.stages.metrics.operation {
            operation(ctx);
        }
        if ctx.stages.metrics.streaming {
            metrics::get().sse_streams(ctx.labels.era, -1);
        }
    }
}

/// `mcp_server_operation_duration_seconds`: an MCP request from its arrival to its answer
/// (a long-lived stream: to its opening).
fn operation(ctx: &mut Ctx) {
    ctx.stages.metrics.operation = true;
    let method = ctx.labels.method;
    if method == crate::mcp::method_label(None) {
        return;
    }
    let seconds = ctx.started.elapsed().as_secs_f64();
    let error = Failure::of(ctx).map(|f| f.label()).unwrap_or_default();
    let tool = tool_label(ctx);
    match ctx.route() {
        Some(route) => route
            .series
            .operation(&route.name, method, &error, tool, seconds),
        None => NO_ROUTE.operation(ctx.route_name(), method, &error, tool, seconds),
    }
}

/// The `gen_ai_tool_name` label: a tool call's tool when `metrics.tool_names` lists it, else
/// `_OTHER`; empty for other methods.
fn tool_label(ctx: &Ctx) -> &str {
    let Some(message) = ctx.request.message.as_deref() else {
        return "";
    };
    if message.method.as_deref() != Some("tools/call") {
        return "";
    }
    let name = message.target.as_ref().map(|t| t.value.as_str());
    match name {
        Some(name) if ctx.snapshot.tool_names.iter().any(|n| n == name) => name,
        _ => "_OTHER",
    }
}

/// How the request ended: as this stage's logging phase recorded it, once it has run (before
/// that, as it stands: a long-lived stream's spans end when it opens).
pub fn outcome(ctx: &Ctx) -> Outcome {
    ctx.response
        .outcome
        .get()
        .copied()
        .unwrap_or_else(|| ended(ctx))
}

fn ended(ctx: &Ctx) -> Outcome {
    match (&ctx.error, ctx.upstream.status) {
        (None, _) if ctx.client_closed => Outcome::ClientClosed,
        (None, Some(_)) => Outcome::Forwarded,
        (None, None) if ctx.answered => Outcome::Answered,
        (Some(EdgeError::ClientError { .. }), _) => Outcome::ClientError,
        (Some(e), _) if e.status() < 500 => Outcome::Rejected,
        _ => Outcome::Failed,
    }
}
