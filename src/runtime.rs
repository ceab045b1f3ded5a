//! The validated runtime snapshot: everything the request path reads, built from the
//! configuration file by [`crate::config`] and swapped whole on reload (`arc-swap`).
//! Nothing here knows the file format.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
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
    /// `Access-Control-Max-Age` of the edge's preflight answers (`cors_max_age_seconds`).
    pub cors_max_age: u64,
    /// Legacy clients are bridged to the 2026-07-28 members (`bridge_legacy`).
    pub bridge: bool,
    /// The public HTTP+SSE messages path (prefix included), when the route has one.
    pub messages_path: Option<String>,
    /// Who may call, what they may use, how often (see [`crate::identity`]).
    pub access: crate::identity::Access,
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
    /// A `[[passthrough]]` route: any method, forwarded as it is, no MCP checks.
    Passthrough,
}

#[derive(Debug, Clone)]
pub struct Endpoint {
    pub route: Arc<Route>,
    pub kind: EndpointKind,
    /// The stages that can act on its requests ([`Plan`]).
    pub plan: Plan,
}

impl Endpoint {
    pub fn new(route: Arc<Route>, kind: EndpointKind) -> Endpoint {
        Endpoint {
            route,
            kind,
            plan: Plan::ALL,
        }
    }
}

/// Which stages of each phase can act on a request: one bit per stage, in the order of the
/// phase's list in `proxy/pipeline.rs`, which compiles each endpoint's plan when a snapshot
/// is loaded ([`Runtime::compile`]) and each listener's. A request calls only the stages
/// whose bit is set; before its endpoint is known, its listener's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    pub request: u32,
    pub admitted: u32,
    pub attempt: u32,
    pub attempt_failed: u32,
    pub upstream_request: u32,
    pub response: u32,
    pub response_body: u32,
    pub answer: u32,
    pub logging: u32,
}

impl Plan {
    /// Every stage (nothing compiled yet).
    pub const ALL: Plan = Plan {
        request: u32::MAX,
        admitted: u32::MAX,
        attempt: u32::MAX,
        attempt_failed: u32::MAX,
        upstream_request: u32::MAX,
        response: u32::MAX,
        response_body: u32::MAX,
        answer: u32::MAX,
        logging: u32::MAX,
    };

    /// The stages both plans call.
    pub fn and(self, other: Plan) -> Plan {
        Plan {
            request: self.request & other.request,
            admitted: self.admitted & other.admitted,
            attempt: self.attempt & other.attempt,
            attempt_failed: self.attempt_failed & other.attempt_failed,
            upstream_request: self.upstream_request & other.upstream_request,
            response: self.response & other.response,
            response_body: self.response_body & other.response_body,
            answer: self.answer & other.answer,
            logging: self.logging & other.logging,
        }
    }
}

/// `[forwarding]`: the headers that tell upstreams who the client is.
#[derive(Debug, Clone, Default)]
pub struct Forwarding {
    pub x_forwarded: bool,
    pub forwarded: bool,
    /// Peers whose forwarding headers are kept (and appended to).
    pub trusted: Vec<ipnet::IpNet>,
}

impl Forwarding {
    pub fn trusts(&self, peer: std::net::IpAddr) -> bool {
        self.trusted.iter().any(|n| n.contains(&peer))
    }
}

/// A pass-through `prefix` covers `path` at a segment boundary (`/a` covers `/a` and `/a/b`,
/// not `/ab`), and only a path an upstream cannot resolve elsewhere: no `.` or `..` segment,
/// no percent-encoded `.`, `/` or backslash, no backslash (the edge forwards paths as sent, and a server
/// that normalises them would otherwise serve `/prefix/../mcp` as `/mcp`).
pub fn covers(prefix: &str, path: &str) -> bool {
    let Some(rest) = path.strip_prefix(prefix) else {
        return false;
    };
    let boundary = prefix.ends_with('/') || rest.is_empty() || rest.starts_with('/');
    let lower = path.to_ascii_lowercase();
    let clean = !path.split('/').any(|seg| seg == "." || seg == "..")
        && !["%2e", "%2f", "%5c", "\\"]
            .iter()
            .any(|bad| lower.contains(bad));
    boundary && clean
}

/// One immutable snapshot of everything the request path reads.
#[derive(Debug)]
pub struct Runtime {
    pub endpoints: HashMap<String, Endpoint>,
    /// `[[passthrough]] path_prefix` routes, longest prefix first.
    pub prefixes: Vec<(String, Endpoint)>,
    pub forwarding: Forwarding,
    pub pools: HashMap<String, Arc<Pool>>,
    pub limits: Limits,
    pub timeouts: Timeouts,
    pub sessions: Option<Arc<Sessions>>,
    /// `[access_log]`'s reloadable part.
    pub access_log: AccessLog,
    /// The tool names the MCP operation metric keeps (`metrics.tool_names`).
    pub tool_names: Vec<String>,
    /// `[identity]`: how credentials become principals.
    pub identity: Option<Arc<crate::identity::Identity>>,
    /// `[fleet]`: the edge's own replicas.
    pub fleet: Option<Arc<crate::fleet::Fleet>>,
    /// `[rate_limits]`: the store rate limits share across the fleet.
    pub rate_store: Option<Arc<crate::identity::rate::shared::Store>>,
    /// `[assertions]`: the keys identity assertions are signed with, published as a JWKS on
    /// the admin listener.
    pub assertions: Option<Arc<crate::identity::assertion::Signer>>,
}

/// What the access log writes (`access_log.enabled`, `access_log.argument_names`).
#[derive(Debug, Clone, Copy, Default)]
pub struct AccessLog {
    pub enabled: bool,
    pub argument_names: bool,
}

impl Runtime {
    /// The endpoint serving `path`: an exact path, else the longest pass-through prefix that
    /// covers it (see [`covers`]).
    pub fn endpoint(&self, path: &str) -> Option<&Endpoint> {
        self.endpoints.get(path).or_else(|| {
            self.prefixes
                .iter()
                .find(|(prefix, _)| covers(prefix, path))
                .map(|(_, e)| e)
        })
    }

    /// Give every endpoint its plan: `plan` is the pipeline's (`proxy::pipeline::plan`,
    /// which this layer cannot name); called once the snapshot is complete (after
    /// [`Runtime::inherit`] on a reload), before any request reads it.
    pub fn compile(&mut self, plan: fn(&Endpoint, &Runtime) -> Plan) {
        let exact: Vec<(String, Plan)> = self
            .endpoints
            .iter()
            .map(|(path, e)| (path.clone(), plan(e, self)))
            .collect();
        let prefixed: Vec<Plan> = self.prefixes.iter().map(|(_, e)| plan(e, self)).collect();
        for (path, p) in exact {
            if let Some(e) = self.endpoints.get_mut(&path) {
                e.plan = p;
            }
        }
        for ((_, e), p) in self.prefixes.iter_mut().zip(prefixed) {
            e.plan = p;
        }
    }

    /// Carry member sets and health over from the snapshot this one replaces (reload), so a
    /// reload neither forgets discovered members nor resets health; the fleet's replicas and
    /// the rate-limit store's connection (same settings) go on too.
    pub fn inherit(&mut self, old: &Runtime) {
        if let (Some(new), Some(old)) = (&self.fleet, &old.fleet) {
            new.inherit(old);
        }
        if let Some(store) = &self.rate_store {
            if let Some(kept) =
                crate::identity::rate::shared::reuse(old.rate_store.as_ref(), &store.settings)
            {
                self.rate_store = Some(kept);
            }
        }
        for (name, pool) in &self.pools {
            if let Some(previous) = old.pools.get(name) {
                pool.inherit(previous);
            }
        }
        let jwks = |r: &Runtime| {
            r.identity
                .as_ref()
                .and_then(|i| i.jwt.as_ref())
                .map(|j| j.jwks.clone())
        };
        if let (Some(new), Some(old)) = (jwks(self), jwks(old)) {
            new.inherit(&old);
        }
    }

    /// Start what this snapshot needs that the one it replaces did not hand over: a group
    /// for every stdio pool, and the connection of the rate-limit store.
    pub fn start(&self) {
        self.start_stdio();
        if let Some(store) = &self.rate_store {
            store.connect();
        }
        // The fallback gauge is the store in use's (a new one, or none, is not falling back).
        let falling_back = self.rate_store.as_ref().is_some_and(|s| s.falling_back());
        crate::metrics::rate_fallback(falling_back);
    }

    /// A group for every stdio pool (its member is the group's local address).
    fn start_stdio(&self) {
        for pool in self.pools.values() {
            let crate::routing::Source::Stdio(spec) = &pool.source else {
                continue;
            };
            let least = pool.balance.policy == crate::routing::balance::Policy::LeastRequest;
            if let Some(group) = pool.stdio.get() {
                // Handed over by a reload: the policy is the new configuration's.
                group.least_request.store(least, Ordering::Relaxed);
                continue;
            }
            match crate::stdio::launch(&pool.name, spec.clone()) {
                Ok(group) => {
                    group.least_request.store(least, Ordering::Relaxed);
                    pool.set_members(&[group.addr]);
                    let _ = pool.stdio.set(group);
                }
                Err(e) => log::error!("stdio pool {}: cannot start: {e}", pool.name),
            }
        }
    }

    /// The session key ring, for what must seal (bridged clients' sessions and streams).
    pub fn ring(&self) -> Result<&Sessions, crate::error::EdgeError> {
        self.sessions
            .as_deref()
            .ok_or(crate::error::EdgeError::Internal {
                detail: "bridging needs the session key ring".into(),
            })
    }

    /// Ready: every pool has at least one healthy member.
    pub fn ready(&self) -> bool {
        self.pools.values().all(|p| p.ready())
    }
}

#[cfg(test)]
mod tests {
    use super::covers;

    #[test]
    fn prefixes_cover_whole_segments_of_clean_paths() {
        let p = "/.well-known/oauth-protected-resource";
        assert!(covers(p, p));
        assert!(covers(p, "/.well-known/oauth-protected-resource/mcp"));
        assert!(!covers(p, "/.well-known/oauth-protected-resourceX"));
        assert!(!covers(
            p,
            "/.well-known/oauth-protected-resource/../../mcp"
        ));
        assert!(!covers(p, "/.well-known/oauth-protected-resource/./x"));
        assert!(!covers(
            p,
            "/.well-known/oauth-protected-resource/%2e%2E/mcp"
        ));
        assert!(!covers(p, "/.well-known/oauth-protected-resource/..%2Fmcp"));
        assert!(!covers(p, "/.well-known/oauth-protected-resource/..\\mcp"));
        assert!(covers("/docs/", "/docs/a"));
        assert!(!covers("/docs/", "/docs"));
        assert!(!covers("/docs", "/doc"));
    }
}
