//! The request's head and the route it names.
//!
//! - [`Head`]: client connections stay open `timeouts.idle_ms` between requests; a head over
//!   `limits.max_header_bytes` is refused (431).
//! - [`Route`]: the path names an endpoint of a route, or the edge has nothing there (404
//!   `no_route`); the member gets the path without the route's public prefix.
//! - [`Host`]: the `Host` (or HTTP/2 `:authority`) must be on the route's allowlist when it
//!   has one (403: DNS rebinding).

use pingora::http::RequestHeader;

use crate::error::{EdgeError, Rejection};
use crate::proxy::stage::{Admission, Flow, Outbound, Phase, Site, Stage};
use crate::runtime::{Endpoint, EndpointKind, Runtime};

pub struct Head;

impl Stage for Head {
    const NAME: &'static str = "head";

    async fn request(a: &mut Admission<'_>) -> Result<Flow, Rejection> {
        let snapshot = &a.ctx.snapshot;
        let idle = snapshot.timeouts.idle.as_secs().max(1);
        a.session.downstream_session.set_keepalive(Some(idle));
        check_head_size(a.session.req_header(), snapshot)?;
        Ok(Flow::Next)
    }
}

pub struct Route;

impl Stage for Route {
    const NAME: &'static str = "route";

    /// The member's path where the route has a prefix to take off (not a pass-through).
    fn serves(site: &Site<'_>, phase: Phase) -> bool {
        let e = site.endpoint;
        phase != Phase::UpstreamRequest
            || (e.kind != EndpointKind::Passthrough && !e.route.prefix.is_empty())
    }

    async fn request(a: &mut Admission<'_>) -> Result<Flow, Rejection> {
        let path = a.session.req_header().uri.path();
        let endpoint = a.ctx.snapshot.endpoint(path).cloned();
        let endpoint = endpoint.ok_or_else(|| EdgeError::NoRoute {
            path: path.chars().take(200).collect(),
        })?;
        a.ctx.plan = a.ctx.plan.and(endpoint.plan);
        a.ctx.request.endpoint = Some(endpoint);
        Ok(Flow::Next)
    }

    /// The member's path: the public one without the route's prefix (a pass-through request
    /// goes as it is: the URL a DPoP proof or a metadata document names).
    fn upstream_request(o: &mut Outbound<'_>) -> pingora::Result<()> {
        let endpoint = o.ctx.endpoint()?;
        let prefix = endpoint.route.prefix.as_str();
        if endpoint.kind == EndpointKind::Passthrough || prefix.is_empty() {
            return Ok(());
        }
        let path = o.head.uri.path();
        let mut target = path.strip_prefix(prefix).unwrap_or(path).to_string();
        if let Some(q) = o.head.uri.query() {
            target = format!("{target}?{q}");
        }
        set_target(o.head, &target)
    }
}

/// Point the member's request at `target` (a path and query).
pub fn set_target(head: &mut RequestHeader, target: &str) -> pingora::Result<()> {
    let uri = target.parse::<http::Uri>().map_err(|e| {
        pingora::Error::because(
            pingora::ErrorType::InternalError,
            "rewriting the upstream target",
            e,
        )
    })?;
    head.set_uri(uri);
    Ok(())
}

pub struct Host;

impl Stage for Host {
    const NAME: &'static str = "host";

    /// A route with a `Host` allowlist.
    fn serves(site: &Site<'_>, phase: Phase) -> bool {
        phase != Phase::Request || !site.endpoint.route.hosts.is_empty()
    }

    async fn request(a: &mut Admission<'_>) -> Result<Flow, Rejection> {
        if let Some(endpoint) = &a.ctx.request.endpoint {
            check_host(a.session.req_header(), &endpoint.route)?;
        }
        Ok(Flow::Next)
    }
}

fn check_head_size(req: &RequestHeader, snapshot: &Runtime) -> Result<(), EdgeError> {
    let limit = snapshot.limits.max_header_bytes;
    // The request target as sent (origin-form: path and query; else the whole URI).
    let size = req.uri.path_and_query().map_or(0, |p| p.as_str().len())
        + req.uri.authority().map_or(0, |a| a.as_str().len())
        + req
            .headers
            .iter()
            .map(|(k, v)| k.as_str().len() + v.len() + 4)
            .sum::<usize>();
    if size > limit {
        return Err(EdgeError::HeadersTooLarge { limit });
    }
    Ok(())
}

/// The host the client asked for: `Host`, else HTTP/2's `:authority`.
pub fn request_host(req: &RequestHeader) -> Option<&str> {
    req.headers
        .get(http::header::HOST)
        .and_then(|h| h.to_str().ok())
        .or_else(|| req.uri.authority().map(|a| a.as_str()))
}

/// The `Host` (or HTTP/2 `:authority`) must be on the route's allowlist when it has one.
pub fn check_host(req: &RequestHeader, route: &crate::runtime::Route) -> Result<(), EdgeError> {
    if route.hosts.is_empty() {
        return Ok(());
    }
    let host = request_host(req).unwrap_or("").trim().to_ascii_lowercase();
    let bare = host
        .rsplit_once(':')
        .filter(|(_, p)| p.bytes().all(|b| b.is_ascii_digit()))
        .map_or(host.as_str(), |(h, _)| h);
    if route.hosts.iter().any(|a| *a == host || *a == bare) {
        Ok(())
    } else {
        Err(EdgeError::HostRejected {
            host: host.chars().take(200).collect(),
        })
    }
}

/// The `Allow` header of a 405: what this endpoint serves.
pub fn allowed_methods(endpoint: &Endpoint) -> &'static str {
    match endpoint.kind {
        EndpointKind::Streamable if endpoint.route.versions.accepts_legacy() => {
            "GET, POST, DELETE, OPTIONS"
        }
        EndpointKind::Streamable | EndpointKind::Messages => "POST, OPTIONS",
        EndpointKind::SseStream => "GET, OPTIONS",
        EndpointKind::Passthrough => "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS",
    }
}
