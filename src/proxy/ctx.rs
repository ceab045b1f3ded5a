//! Per-request state, and what each phase may rely on.
//!
//! - `snapshot` is taken once, when the request starts, and used to its end: a reload
//!   mid-request changes nothing for it.
//! - `admitted` exists only once admission passed every check: the hooks after
//!   `request_filter` read the route, the request's id and its legacy session from it.
//! - `labels` is filled in step by step, so a rejected request is still logged and counted
//!   with what the edge knew when it refused it.

use std::sync::Arc;
use std::time::Instant;

use serde_json::Value;

use super::limits::Slot;
use super::replay::{Handback, Stored};
use crate::budget::Reservation;
use crate::error::EdgeError;
use crate::mcp::{self, rules::Verdict};
use crate::metrics::EraLabel;
use crate::routing::Member;
use crate::runtime::{EndpointKind, Route, Runtime};
use crate::session::affinity::Sticky;
use crate::sse::EndpointRewriter;

/// Pingora keeps the context for the whole exchange, an idle event stream's included: the
/// parts only some requests use (the endpoint rewriter, the bridge conversion, the task-id
/// scan, the principal) are boxed, so that the others do not carry their room (952 bytes
/// unboxed, 576 boxed). The proxy boxes the whole context too (`ProxyHttp::CTX`).
pub struct Ctx {
    pub started: Instant,
    pub snapshot: Arc<Runtime>,
    pub admitted: Option<Admitted>,
    pub labels: Labels,
    pub upstream: Upstream,
    /// The HTTP+SSE stream whose `endpoint` event is being rewritten.
    pub rewriter: Option<Box<EndpointRewriter>>,
    /// The edge error this request ended with, once the error boundary recorded it.
    pub error: Option<EdgeError>,
    /// Where the real client session comes back (see [`super::replay`]).
    pub handback: Option<Handback>,
    /// The request body until the upstream has it.
    pub body: Stored,
    /// Held for the request's lifetime (released on drop).
    pub slots: Vec<Slot>,
    /// A response event stream's memory, when admission did not take a stream slot.
    pub stream_room: Option<Reservation>,
    /// The edge answered `Expect: 100-continue` itself.
    pub answered_continue: bool,
    /// The response is an event stream (counted in `mcp_edge_active_sse_streams`).
    pub sse: bool,
    /// A bridged answer's conversion to the client's revision (see [`super::bridge`]), and
    /// the memory it may hold.
    pub convert: Option<Box<super::rewrite::Rewrite>>,
    pub convert_room: Option<Reservation>,
    /// The scan swapping task ids in the response (see [`super::tasks`]).
    pub tasks: Option<Box<(super::tasks::Scan, super::tasks::Sealed)>>,
    /// The origin this request's responses grant (CORS; see [`super::cors`]).
    pub cors: Option<http::HeaderValue>,
    /// The edge answered the request itself (a CORS preflight, a bridged legacy message).
    pub answered: bool,
    /// The listener speaks TLS.
    pub tls: bool,
    /// Who calls, on a route with `auth` (see [`crate::identity`]).
    pub principal: Option<Box<crate::identity::Principal>>,
    /// What the caller may see, on a route with a policy (list answers are filtered).
    pub grant: Option<crate::identity::policy::Grant>,
    /// The id of a list request (`tools/list`, …) on a route with a policy.
    pub answering_list: Option<Value>,
    /// A legacy event stream on a route with a policy: its list answers are filtered.
    pub filter_stream: bool,
    /// A hidden name was replaced in this request: the answer gets it back.
    pub restore_hidden: bool,
}

impl Ctx {
    pub fn new(snapshot: Arc<Runtime>) -> Ctx {
        Ctx {
            started: Instant::now(),
            snapshot,
            admitted: None,
            labels: Labels::default(),
            upstream: Upstream::default(),
            rewriter: None,
            error: None,
            handback: None,
            body: Stored::default(),
            slots: Vec::new(),
            stream_room: None,
            answered_continue: false,
            sse: false,
            tasks: None,
            convert: None,
            convert_room: None,
            cors: None,
            answered: false,
            tls: false,
            principal: None,
            grant: None,
            answering_list: None,
            filter_stream: false,
            restore_hidden: false,
        }
    }

    /// The JSON-RPC id an edge error answers.
    pub fn request_id(&self) -> Option<&Value> {
        self.admitted.as_ref().and_then(|a| a.id.as_ref())
    }
}

/// What admission established about a request it let through.
pub struct Admitted {
    pub route: Arc<Route>,
    pub endpoint: EndpointKind,
    /// The JSON-RPC id, when the body had one.
    pub id: Option<Value>,
    /// Set for legacy (2024/2025) requests only.
    pub legacy: Option<Legacy>,
    /// What a modern request has to do with tasks (see [`super::tasks`]).
    pub task: Option<super::tasks::TaskRole>,
    /// A bridged legacy request, forwarded as a 2026-07-28 one (see [`super::bridge`]).
    pub bridge: Option<Box<super::bridge::Forward>>,
    /// The body was rewritten to this length (a hidden entry renamed, see
    /// [`super::access::Policed::Disguise`]).
    pub body_len: Option<usize>,
}

/// A legacy request's session state.
pub struct Legacy {
    /// Digest of the client's `Authorization`, bound into tokens sealed for it.
    pub credential: Option<[u8; 16]>,
    /// The session the request belongs to, from its token.
    pub session: Option<Sticky>,
}

impl Admitted {
    pub fn session(&self) -> Option<&Sticky> {
        self.legacy.as_ref().and_then(|l| l.session.as_ref())
    }
    pub fn credential(&self) -> Option<[u8; 16]> {
        self.legacy.as_ref().and_then(|l| l.credential)
    }
}

/// Bounded labels for metrics and the access log.
pub struct Labels {
    pub route: Option<Arc<Route>>,
    pub method: &'static str,
    pub era: EraLabel,
    /// The `Mcp-Name` subject (tool, prompt, resource, task), for the access log only.
    pub name: Option<String>,
}

impl Default for Labels {
    fn default() -> Self {
        Labels {
            route: None,
            method: mcp::method_label(None),
            era: EraLabel::Unknown,
            name: None,
        }
    }
}

impl Labels {
    pub fn route(&self) -> &str {
        self.route.as_ref().map_or("none", |r| r.name.as_str())
    }

    /// Take what a checked body says: the method label and era; the name moves here.
    pub fn record(&mut self, verdict: &mut Verdict) {
        self.method = mcp::method_label(verdict.method.as_deref());
        self.era = verdict.era.label();
        self.name = verdict.name.take();
    }
}

/// The members tried for this request, in order; the last one is the current one.
#[derive(Default)]
pub struct Upstream {
    pub tried: Vec<Arc<Member>>,
    pub started: Option<Instant>,
    pub status: Option<u16>,
}

impl Upstream {
    pub fn member(&self) -> Option<&Arc<Member>> {
        self.tried.last()
    }
}
