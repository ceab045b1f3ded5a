//! The edge: one per listener, and what it shares with every request (the runtime snapshot,
//! the cutoff switch for event streams, the load counters, the tracer). Its Pingora hooks are
//! in [`super`]; the stages read it from here, never from the hooks' module.

use std::sync::Arc;

use arc_swap::ArcSwap;
use pingora::proxy::Session;
use tokio::sync::watch;

use super::ctx::Ctx;
use super::replay;
use crate::config::TraceContext;
pub use crate::net::load::Load;
use crate::ops::tracing::Tracing;
use crate::runtime::{Plan, Runtime};

/// The edge: one per listener, sharing the runtime snapshot, the cutoff switch for event
/// streams, the process-wide load counters and the tracer.
pub struct Edge {
    pub(super) runtime: Arc<ArcSwap<Runtime>>,
    /// Turns `true` when the edge shuts down: open event streams end.
    pub(super) cutoff: watch::Receiver<bool>,
    pub(crate) load: Load,
    /// This listener speaks TLS (`X-Forwarded-Proto: https`).
    pub(crate) tls: bool,
    /// Spans, when `[tracing]` is configured.
    pub(crate) tracing: Option<Arc<Tracing>>,
    /// What this listener does with a client's trace context.
    pub(crate) trace_context: TraceContext,
    /// The hand-off listener: only requests other replicas signed.
    pub(crate) handoff: bool,
    /// The stages that can act on this listener's requests.
    pub(super) plan: Plan,
}

/// What an edge knows of its listener.
pub struct Listening {
    pub tls: bool,
    pub tracing: Option<Arc<Tracing>>,
    pub trace_context: TraceContext,
    pub handoff: bool,
}

impl Edge {
    pub fn new(
        runtime: Arc<ArcSwap<Runtime>>,
        cutoff: watch::Receiver<bool>,
        load: Load,
        listening: Listening,
    ) -> Self {
        let plan = super::pipeline::listener_plan(&listening);
        Edge {
            runtime,
            cutoff,
            load,
            plan,
            tls: listening.tls,
            tracing: listening.tracing,
            trace_context: listening.trace_context,
            handoff: listening.handoff,
        }
    }
}

impl Edge {
    /// The request goes to a member: its body (possibly none) into a replay session, which
    /// also bounds the member's silences and ends event streams at shutdown (`answered`: the
    /// client has its answer already, none of the member's goes to it).
    pub(super) fn install_replay(&self, session: &mut Session, ctx: &mut Ctx, answered: bool) {
        let t = ctx.snapshot.timeouts;
        let silence = replay::Silence {
            head: t.upstream_read,
            gap: t.upstream_read,
            stream_idle: t.stream_idle,
        };
        let body = ctx.request.body.take();
        let (handback, stored) =
            replay::install(session, body, self.cutoff.clone(), silence, answered);
        ctx.handback = Some(handback);
        ctx.stored = stored;
    }
}
