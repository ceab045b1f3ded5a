//! CORS for browser clients, on routes with `allowed_origins`.
//!
//! - A preflight (`OPTIONS` with `Origin` and `Access-Control-Request-Method`) from an
//!   allowed origin is answered by the edge (204) and never forwarded: the methods the
//!   endpoint serves, the MCP request headers (and any `Mcp-Param-*` the page asks for), and
//!   `Access-Control-Max-Age`.
//! - Every response to an allowed origin — proxied or the edge's own error — carries
//!   `Access-Control-Allow-Origin` (the origin, echoed), `Vary: Origin` and
//!   `Access-Control-Expose-Headers`, so a page can read `Mcp-Session-Id`, a 401's
//!   `WWW-Authenticate` and the edge's error marker.
//! - Other origins are refused before this (403 from the `Origin` check), with no grant.
//!
//! [`Origin`] checks the route's `Origin` allowlist (403 `origin_rejected`, see
//! [`crate::mcp::origin`]) and keeps the origin to grant; [`Preflight`] answers preflights;
//! [`Cors`] puts the grant (or, on a CORS route, at least `Vary: Origin`) on the heads of
//! members' answers and of the edge's own.

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method};
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::proxy::Session;

use crate::error::Rejection;
use crate::proxy::ctx::Ctx;
use crate::proxy::edge::Edge;
use crate::proxy::stage::{Admission, Flow, Stage};
use crate::runtime::EndpointKind;

/// The origin this request's responses grant (an allowed one, on a route that has a list).
#[derive(Default)]
pub struct State {
    origin: Option<HeaderValue>,
}

pub struct Origin;

impl Stage for Origin {
    const NAME: &'static str = "origin";

    async fn request(a: &mut Admission<'_>) -> Result<Flow, Rejection> {
        let Some(endpoint) = &a.ctx.request.endpoint else {
            return Ok(Flow::Next);
        };
        let (route, req) = (&endpoint.route, a.session.req_header());
        // A pass-through route without an origin list does not look at `Origin` (a
        // same-origin form post to an authorization server carries one).
        if endpoint.kind != EndpointKind::Passthrough || route.origins.grants_any() {
            route.origins.check(&req.headers)?;
        }
        if route.origins.grants_any() {
            a.ctx.stages.cors.origin = req.headers.get(http::header::ORIGIN).cloned();
        }
        Ok(Flow::Next)
    }
}

pub struct Preflight;

impl Stage for Preflight {
    const NAME: &'static str = "preflight";

    async fn request(a: &mut Admission<'_>) -> Result<Flow, Rejection> {
        let (Some(endpoint), Some(origin)) = (
            a.ctx.request.endpoint.clone(),
            a.ctx.stages.cors.origin.clone(),
        ) else {
            return Ok(Flow::Next);
        };
        if !is_preflight(a.session.req_header()) {
            return Ok(Flow::Next);
        }
        super::method::discard(a).await?;
        let methods = super::route::allowed_methods(&endpoint);
        let any_header = endpoint.kind == EndpointKind::Passthrough;
        let max_age = endpoint.route.cors_max_age;
        answer_preflight(a.session, a.ctx, &origin, methods, max_age, any_header).await;
        Ok(Flow::Written)
    }
}

pub struct Cors;

impl Stage for Cors {
    const NAME: &'static str = "cors";

    fn response(head: &mut ResponseHeader, ctx: &mut Ctx, _edge: &Edge) -> pingora::Result<()> {
        decorate(head, ctx)
    }

    fn answer(head: &mut ResponseHeader, _body: &mut Bytes, ctx: &mut Ctx) -> pingora::Result<()> {
        decorate(head, ctx)
    }
}

/// The grant for this request's origin on a response head; on a CORS route, a response to
/// a request without an allowed `Origin` still varies on it.
fn decorate(head: &mut ResponseHeader, ctx: &Ctx) -> pingora::Result<()> {
    match &ctx.stages.cors.origin {
        Some(origin) => apply(head, origin),
        None if ctx.route().is_some_and(|r| r.origins.grants_any()) => vary_only(head),
        None => Ok(()),
    }
}

/// Request headers an MCP client sends (lower case, as browsers compare them).
const ALLOW_HEADERS: &[&str] = &[
    "content-type",
    "accept",
    "authorization",
    "mcp-method",
    "mcp-name",
    "mcp-session-id",
    "mcp-protocol-version",
    "last-event-id",
    "dpop",
    "traceparent",
    "tracestate",
];

/// Response headers a page may read besides the CORS-safelisted ones.
const EXPOSE_HEADERS: &str =
    "mcp-session-id, mcp-protocol-version, www-authenticate, x-mcp-edge-error, retry-after, allow";

/// A CORS preflight (the edge answers it when it granted the origin).
fn is_preflight(req: &RequestHeader) -> bool {
    req.method == Method::OPTIONS
        && req.headers.contains_key(http::header::ORIGIN)
        && req
            .headers
            .contains_key(http::header::ACCESS_CONTROL_REQUEST_METHOD)
}

/// The grant on a response: allow the origin, vary on it, expose the MCP headers. An
/// upstream's own CORS headers go: the edge's policy is the route's, and an upstream's
/// `Access-Control-Allow-Credentials` must never ride on an origin the edge echoes.
fn apply(headers: &mut ResponseHeader, origin: &HeaderValue) -> pingora::Result<()> {
    strip_upstream_grant(headers);
    headers.insert_header(http::header::ACCESS_CONTROL_ALLOW_ORIGIN, origin.clone())?;
    headers.append_header(http::header::VARY, "Origin")?;
    headers.insert_header(http::header::ACCESS_CONTROL_EXPOSE_HEADERS, EXPOSE_HEADERS)?;
    Ok(())
}

/// On a CORS route, a response to a request without (an allowed) `Origin`: no grant, and
/// none of the upstream's either, but caches must still key on `Origin`.
fn vary_only(headers: &mut ResponseHeader) -> pingora::Result<()> {
    strip_upstream_grant(headers);
    headers.append_header(http::header::VARY, "Origin")?;
    Ok(())
}

fn strip_upstream_grant(headers: &mut ResponseHeader) {
    for name in [
        http::header::ACCESS_CONTROL_ALLOW_ORIGIN,
        http::header::ACCESS_CONTROL_ALLOW_CREDENTIALS,
        http::header::ACCESS_CONTROL_ALLOW_METHODS,
        http::header::ACCESS_CONTROL_ALLOW_HEADERS,
        http::header::ACCESS_CONTROL_EXPOSE_HEADERS,
        http::header::ACCESS_CONTROL_MAX_AGE,
    ] {
        headers.remove_header(&name);
    }
}

/// The edge's answer to a preflight.
fn preflight(
    req: &RequestHeader,
    origin: &HeaderValue,
    methods: &str,
    max_age: u64,
    any_header: bool,
) -> pingora::Result<ResponseHeader> {
    let mut resp = ResponseHeader::build(204, Some(7))?;
    apply(&mut resp, origin)?;
    resp.insert_header(http::header::ACCESS_CONTROL_ALLOW_METHODS, methods)?;
    resp.insert_header(
        http::header::ACCESS_CONTROL_ALLOW_HEADERS,
        allow_headers(&req.headers, any_header),
    )?;
    resp.insert_header(http::header::ACCESS_CONTROL_MAX_AGE, max_age.to_string())?;
    Ok(resp)
}

/// Write the edge's answer to a preflight (counted by route).
async fn answer_preflight(
    session: &mut Session,
    ctx: &mut Ctx,
    origin: &HeaderValue,
    methods: &str,
    max_age: u64,
    any_header: bool,
) {
    ctx.answered = true;
    crate::metrics::get()
        .access
        .cors_preflights
        .with_label_values(&[ctx.route_name()])
        .inc();
    let Ok(resp) = preflight(session.req_header(), origin, methods, max_age, any_header) else {
        return;
    };
    if session
        .write_response_header(Box::new(resp), false)
        .await
        .is_ok()
    {
        let _ = session.write_response_body(None, true).await;
    }
}

/// The MCP headers, plus the `Mcp-Param-*` names the page asked for (every name it asked
/// for with `any_header`: a pass-through route, whose headers the edge does not know).
fn allow_headers(headers: &HeaderMap, any_header: bool) -> String {
    let mut allowed: Vec<String> = ALLOW_HEADERS.iter().map(|h| h.to_string()).collect();
    let requested = headers
        .get_all(http::header::ACCESS_CONTROL_REQUEST_HEADERS)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|h| h.trim().to_ascii_lowercase());
    for name in requested {
        let wanted =
            any_header || (name.starts_with("mcp-param-") && name.len() > "mcp-param-".len());
        if wanted
            && http::HeaderName::from_bytes(name.as_bytes()).is_ok()
            && !allowed.contains(&name)
        {
            allowed.push(name);
        }
    }
    allowed.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preflight_allows_mcp_headers_and_requested_params_only() {
        let mut h = HeaderMap::new();
        h.insert(
            http::header::ACCESS_CONTROL_REQUEST_HEADERS,
            "content-type, Mcp-Param-Region, x-evil, mcp-param-"
                .parse()
                .unwrap(),
        );
        let allowed = allow_headers(&h, false);
        assert!(allowed.contains("mcp-protocol-version"), "{allowed}");
        assert!(allowed.contains("last-event-id"), "{allowed}");
        assert!(allowed.ends_with(", mcp-param-region"), "{allowed}");
        assert!(!allowed.contains("x-evil"), "{allowed}");
        assert_eq!(allowed.matches("content-type").count(), 1, "{allowed}");
        assert!(
            allow_headers(&h, true).contains("x-evil"),
            "pass-through: as asked"
        );
    }
}
