//! Per-request state: the core every stage reads, and each stage's own part.
//!
//! - `snapshot` is taken once, when the request starts, and used to its end: a reload
//!   mid-request changes nothing for it.
//! - `request` is what admission learned, step by step; each of its fields is written by
//!   the one stage its doc names and read by any later one. When the request stages let a
//!   request through, `request.endpoint` is set: the hooks after `request_filter` read the
//!   route from it ([`Ctx::endpoint`]).
//! - `labels` is filled in step by step too, so a rejected request is still logged and
//!   counted with what the edge knew when it refused it.
//! - `stages` holds what one stage keeps for itself between its phases; only its own file
//!   touches it.

use std::sync::Arc;
use std::time::Instant;

use serde_json::Value;

use super::body::Body;
use super::replay::{Handback, Stored};
use super::stages;
use crate::error::EdgeError;
use crate::identity::Principal;
use crate::mcp::media::Media;
use crate::mcp::outcome::Ended;
use crate::mcp::rules::{Era, Verdict};
use crate::mcp::{self, EraLabel};
use crate::routing::Member;
use crate::runtime::{Endpoint, Plan, Route, Runtime};

/// Pingora keeps the context for the whole exchange, an idle event stream's included: the
/// parts only some requests use are boxed, so that the others do not carry their room. The
/// proxy boxes the whole context too (`ProxyHttp::CTX`).
pub struct Ctx {
    pub started: Instant,
    pub snapshot: Arc<Runtime>,
    /// The stages this request calls (see [`crate::runtime::Plan`]): its listener's, then,
    /// once the route stage found its endpoint, the endpoint's too (route).
    pub plan: Plan,
    pub request: Request,
    pub labels: Labels,
    pub upstream: Upstream,
    pub response: Response,
    /// Answers rewritten message by message (see [`super::rewrite`]).
    pub rewrite: Option<Box<Rewriting>>,
    /// Where the real client session comes back, and the body until the upstream has it
    /// (see [`super::replay`]).
    pub handback: Option<Handback>,
    pub stored: Stored,
    /// The edge answered the request itself (a CORS preflight, a bridged legacy message).
    pub answered: bool,
    /// The edge error this request ended with, once the error boundary recorded it.
    pub error: Option<EdgeError>,
    /// The client closed its connection or stream before the answer ended (no error).
    pub client_closed: bool,
    pub stages: stages::State,
}

impl Ctx {
    pub fn new(snapshot: Arc<Runtime>, plan: Plan) -> Ctx {
        Ctx {
            started: Instant::now(),
            snapshot,
            plan,
            request: Request::default(),
            labels: Labels::default(),
            upstream: Upstream::default(),
            response: Response::default(),
            rewrite: None,
            handback: None,
            stored: Stored::default(),
            answered: false,
            error: None,
            client_closed: false,
            stages: stages::State::default(),
        }
    }

    /// The route, once the route stage found it.
    pub fn route(&self) -> Option<&Arc<Route>> {
        self.request.endpoint.as_ref().map(|e| &e.route)
    }

    /// The endpoint of a request admission let through; an internal error for a hook that
    /// runs without one (it cannot, after a `request_filter` that proxies).
    pub fn endpoint(&self) -> pingora::Result<&Endpoint> {
        self.request.endpoint.as_ref().ok_or_else(|| {
            pingora::Error::explain(
                pingora::ErrorType::InternalError,
                "request was not admitted",
            )
        })
    }

    /// The JSON-RPC id an edge error answers.
    pub fn request_id(&self) -> Option<&Value> {
        self.request.message.as_ref().and_then(|m| m.id.as_ref())
    }

    /// The request goes to the replica holding its state (see `stages/handoff.rs`): the
    /// stages after admission run there, not here.
    pub fn handed_off(&self) -> bool {
        self.request
            .pinned
            .as_ref()
            .is_some_and(|p| p.holds.by_replica())
    }

    /// The route's name for metrics and logs (`none` before a route was found).
    pub fn route_name(&self) -> &str {
        self.route().map_or("none", |r| r.name.as_str())
    }
}

/// The rewrite of an answer's messages, and the memory it holds in the budget (see
/// [`super::rewrite`]).
pub struct Rewriting {
    pub engine: crate::mcp::rewrite::Rewrite,
    pub room: crate::net::budget::Reservation,
}

/// What admission learned about a request. Each field is written by the stage named.
#[derive(Default)]
pub struct Request {
    /// The endpoint the path names (route).
    pub endpoint: Option<Endpoint>,
    /// Who calls, on a route with `auth` (identity).
    pub principal: Option<Box<Principal>>,
    /// The body read whole (method), rewritten by tasks, bridge and policy through
    /// [`Body::replace`]; it moves into the replay session when admission ends.
    pub body: Option<Body>,
    /// The protocol generation (rules; method for a GET or DELETE): `None` for a preflight or
    /// a pass-through request.
    pub era: Option<Era>,
    /// What a POST's body says (rules).
    pub message: Option<Box<Verdict>>,
    /// A legacy request on a `bridge_legacy` route, served as a 2026-07-28 one (rules).
    pub bridged: bool,
    /// Where the request must go, when not round-robin (legacy: the session's member;
    /// tasks: the task's; handoff: the replica holding its state).
    pub pinned: Option<Pinned>,
    /// Another replica of the fleet handed the request here, signed (arrival).
    pub hop: Option<Box<crate::fleet::hop::Hop>>,
    /// What the route's rate limit (rate) and policy (policy) decided, for the trace and the
    /// log.
    pub decided: Decided,
    /// A bridged HTTP+SSE client's stream the request's answer goes to (sse_bridge).
    pub held_stream: Option<u64>,
    /// Who the client is, found once (forwarding's `client_address`).
    pub client: std::sync::OnceLock<Option<std::net::IpAddr>>,
    /// What the bridge decided for such a request's answer (bridge).
    pub stream_reply: Option<Box<StreamReply>>,
}

/// For a request whose answer goes to a bridged HTTP+SSE client's stream: the id the answer
/// goes with when it is not the request's own (a retry answers its first request), and the
/// request as it went to the member, kept while the member may ask the client for input.
#[derive(Debug, Default)]
pub struct StreamReply {
    pub answers: Option<String>,
    pub kept: Option<crate::session::streams::Asked>,
}

/// What admission's checks decided about a request.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Decided {
    /// The route's rate limit: `None` on a route without one.
    pub rate: Option<RateVerdict>,
    /// The route's policy: `None` on a route without one.
    pub policy: Option<PolicyVerdict>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum RateVerdict {
    Allowed,
    /// Over the limit: answered 429.
    Limited,
}

/// The policy's verdict and the rule that matched the caller (`none`: no rule did).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyVerdict {
    pub verdict: Policed,
    pub rule: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum Policed {
    /// The request goes on (a subscription perhaps without the URIs the caller may not see).
    Allowed,
    /// It names an entry the caller may not see: answered as an absent one, or sent on
    /// under a name no server has.
    Hidden,
    /// Refused: a batch (whose calls could not each be checked), or a request the policy
    /// could not check (a subscription with a repeated key).
    Refused,
}

impl Request {
    /// The body's method, for a POST the rules read.
    pub fn method(&self) -> Option<&str> {
        self.message.as_ref().and_then(|m| m.method.as_deref())
    }
}

/// A member a request must go to, and why (which decides what its failure means).
pub struct Pinned {
    pub member: Arc<Member>,
    pub holds: Holds,
}

/// What a pinned member holds for the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holds {
    /// A legacy session: a member that refuses connections has lost it (404).
    Session,
    /// A task: trouble reaching it is transient (the client polls again).
    Task,
    /// Another replica holds the request's session: one that refuses connections is gone,
    /// and the session with it (404).
    ReplicaSession,
    /// Another replica holds what the caller's requests share (a `per_principal` process):
    /// trouble reaching it is transient.
    ReplicaCaller,
}

impl Holds {
    pub fn what(self) -> &'static str {
        match self {
            Holds::Session => "session",
            Holds::Task => "task",
            Holds::ReplicaSession => "session's replica",
            Holds::ReplicaCaller => "caller's replica",
        }
    }

    /// Held by another replica: the request is handed to it.
    pub fn by_replica(self) -> bool {
        matches!(self, Holds::ReplicaSession | Holds::ReplicaCaller)
    }
}

/// Bounded labels for metrics and the access log.
pub struct Labels {
    pub method: &'static str,
    pub era: EraLabel,
}

impl Default for Labels {
    fn default() -> Self {
        Labels {
            method: mcp::method_label(None),
            era: EraLabel::Unknown,
        }
    }
}

impl Labels {
    /// What a checked body says: the method label and era.
    pub fn record(&mut self, verdict: &Verdict) {
        self.method = mcp::method_label(verdict.method.as_deref());
        self.era = verdict.era.label();
    }
}

/// The members tried for this request, in order; the last one is the current one.
#[derive(Default)]
pub struct Upstream {
    pub tried: Vec<Arc<Member>>,
    pub started: Option<Instant>,
    pub status: Option<u16>,
    /// How long the request waited for a member's room, when it had to (balance).
    pub queued: Option<std::time::Duration>,
}

impl Upstream {
    pub fn member(&self) -> Option<&Arc<Member>> {
        self.tried.last()
    }
}

/// What the member's response head says, read once before the response stages run; and
/// what its body said about how the request ended (outcome).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub media: Media,
    /// Compressed (a `Content-Encoding` other than `identity`): not read, not rewritten.
    pub encoded: bool,
    /// The JSON-RPC error code or tool error the answer carried (outcome).
    pub ended: Ended,
    /// How the request ended, recorded by the metrics stage's logging phase (read through
    /// its `outcome`).
    pub outcome: std::sync::OnceLock<crate::metrics::Outcome>,
}

impl Default for Response {
    fn default() -> Self {
        Response {
            media: Media::Other,
            encoded: false,
            ended: Ended::default(),
            outcome: Default::default(),
        }
    }
}

impl Response {
    pub fn is_event_stream(&self) -> bool {
        self.media == Media::EventStream
    }
}
