//! The validated runtime snapshot: everything the request path reads, built from the
//! configuration file by [`crate::config`] and swapped whole on reload (`arc-swap`).
//! Nothing here knows the file format.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::mcp::origin::OriginPolicy;
use crate::mcp::rules::VersionPolicy;
use crate::routing::Pool;
use crate::session::Sessions;

#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_body_bytes: usize,
    pub max_header_bytes: usize,
    /// Requests in flight (streams included) per edge process; more get 503.
    pub max_concurrent_requests: usize,
    /// Long-lived streams (`subscriptions/listen`, legacy GET streams) per process.
    pub max_streams: usize,
    /// Open client connections per listener; more are closed at once.
    pub max_connections: usize,
    /// Bytes clients may make the edge hold (connections, bodies, streams): see `budget.rs`.
    pub memory_budget: usize,
    /// Bytes per second an upload must average once `request_body` has passed.
    pub min_upload_rate: usize,
}

#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    pub connect: Duration,
    /// Upstream silence before the response head and inside an ordinary response.
    pub upstream_read: Duration,
    /// Upstream silence inside an event stream.
    pub stream_idle: Duration,
    pub idle: Duration,
    /// Idle pooled upstream connections.
    pub upstream_idle: Duration,
    pub request_body: Duration,
    /// From accept to the end of the first request head.
    pub request_head: Duration,
}

#[derive(Debug)]
pub struct Route {
    /// Public Streamable HTTP path (prefix included): the route's name in metrics and logs.
    pub name: String,
    pub prefix: String,
    pub session_params: Vec<String>,
    pub pool: Arc<Pool>,
    pub versions: VersionPolicy,
    pub origins: OriginPolicy,
    /// Lower-cased `host` / `host:port` entries; empty allows any Host.
    pub hosts: Vec<String>,
    /// Handles on this route's per-request metric series.
    pub series: crate::metrics::RouteSeries,
}

/// Which of a route's endpoints a public path is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndpointKind {
    /// The Streamable HTTP endpoint (POST, and legacy GET/DELETE).
    Streamable,
    /// Legacy HTTP+SSE: the GET stream whose `endpoint` event names the messages URL.
    SseStream,
    /// Legacy HTTP+SSE: POSTs carrying the session in a query parameter.
    Messages,
}

#[derive(Debug, Clone)]
pub struct Endpoint {
    pub route: Arc<Route>,
    pub kind: EndpointKind,
}

/// One immutable snapshot of everything the request path reads.
#[derive(Debug)]
pub struct Runtime {
    pub endpoints: HashMap<String, Endpoint>,
    pub pools: HashMap<String, Arc<Pool>>,
    pub limits: Limits,
    pub timeouts: Timeouts,
    pub sessions: Option<Arc<Sessions>>,
    /// Write one access-log line per request (`access_log.enabled`; reloadable).
    pub access_log: bool,
}

impl Runtime {
    pub fn endpoint(&self, path: &str) -> Option<&Endpoint> {
        self.endpoints.get(path)
    }

    /// Carry member sets and health over from the snapshot this one replaces (reload), so a
    /// reload neither forgets discovered members nor resets health.
    pub fn inherit(&self, old: &Runtime) {
        for (name, pool) in &self.pools {
            if let Some(previous) = old.pools.get(name) {
                pool.inherit(previous);
            }
        }
    }

    /// Ready: every pool has at least one healthy member.
    pub fn ready(&self) -> bool {
        self.pools
            .values()
            .all(|p| p.members().iter().any(|m| m.is_healthy()))
    }
}
