//! Who calls (see [`crate::identity`]).
//!
//! - [`Metadata`]: `GET /.well-known/oauth-protected-resource<route path>` for a route with
//!   `auth`, when `[identity] authorization_servers` are configured: the edge's own Protected
//!   Resource Metadata document, readable by any page (it is public), for a `Host` the route
//!   serves.
//! - [`Identify`]: on a route with `auth`, the bearer credential becomes the principal
//!   (`ctx.request.principal`) before the body is read; a missing one (`auth = "required"`) or
//!   an invalid one gets 401 with `WWW-Authenticate`. The member does not get the client's
//!   `Authorization` unless the route says `forward_credential` (the token's audience is the
//!   edge, not the server: MCP security guidance).

use crate::error::{EdgeError, Rejection};
use crate::identity::{AuthMode, Refusal, METADATA_PREFIX};
use crate::metrics;
use crate::proxy::answer::Answer;
use crate::proxy::stage::{Admission, Flow, Outbound, Phase, Site, Stage};
use crate::runtime::EndpointKind;

use super::route::{check_host, request_host};

pub struct Metadata;

impl Stage for Metadata {
    const NAME: &'static str = "metadata";

    async fn request(a: &mut Admission<'_>) -> Result<Flow, Rejection> {
        let Some(doc) = metadata(a)? else {
            return Ok(Flow::Next);
        };
        super::method::discard(a).await?;
        Ok(Flow::Answer(Answer {
            public: true,
            ..Answer::json(200, doc)
        }))
    }
}

/// The metadata document a request asks for, if it is one the edge serves.
fn metadata(a: &Admission<'_>) -> Result<Option<String>, EdgeError> {
    let (req, snapshot) = (a.session.req_header(), &a.ctx.snapshot);
    let Some(identity) = snapshot.identity.as_deref() else {
        return Ok(None);
    };
    if identity.authorization_servers.is_empty()
        || !matches!(req.method, http::Method::GET | http::Method::HEAD)
    {
        return Ok(None);
    }
    let Some(route_path) = req.uri.path().strip_prefix(METADATA_PREFIX) else {
        return Ok(None);
    };
    let Some(endpoint) = snapshot.endpoints.get(route_path) else {
        return Ok(None);
    };
    if endpoint.kind != EndpointKind::Streamable || endpoint.route.access.auth == AuthMode::None {
        return Ok(None);
    }
    check_host(req, &endpoint.route)?;
    let scheme = if tls(a) { "https" } else { "http" };
    let route_scopes = endpoint.route.access.scopes.as_ref().map(|s| s.all());
    Ok(Some(identity.metadata_document(
        scheme,
        request_host(req),
        route_path,
        route_scopes.as_deref().unwrap_or_default(),
    )))
}

pub struct Identify;

impl Stage for Identify {
    const NAME: &'static str = "identity";

    /// Admission on a route with `auth` (not a pass-through); the member's head on any
    /// route that does not forward the caller's credential.
    fn serves(site: &Site<'_>, phase: Phase) -> bool {
        let (route, kind) = (&site.endpoint.route, site.endpoint.kind);
        match phase {
            Phase::Request => {
                route.access.auth != AuthMode::None && kind != EndpointKind::Passthrough
            }
            Phase::UpstreamRequest => !route.access.forward_credential,
            _ => true,
        }
    }

    async fn request(a: &mut Admission<'_>) -> Result<Flow, Rejection> {
        let Some(endpoint) = &a.ctx.request.endpoint else {
            return Ok(Flow::Next);
        };
        let route = &endpoint.route;
        if route.access.auth == AuthMode::None || endpoint.kind == EndpointKind::Passthrough {
            return Ok(Flow::Next);
        }
        let Some(identity) = a.ctx.snapshot.identity.clone() else {
            return Err(EdgeError::Internal {
                detail: "the route has auth but the edge has no [identity]".into(),
            }
            .into());
        };
        let req = a.session.req_header();
        let outcome = match identity.authenticate(&req.headers).await {
            Ok(None) if route.access.auth == AuthMode::Required => Err(Refusal::Missing),
            other => other,
        };
        let result = match &outcome {
            Ok(Some(_)) => "ok",
            Ok(None) => "anonymous",
            Err(r) => r.label(),
        };
        metrics::get()
            .access
            .auth
            .with_label_values(&[route.name.as_str(), result])
            .inc();
        let principal = outcome.map_err(|refusal| {
            let scheme = if tls(a) { "https" } else { "http" };
            EdgeError::Unauthorized {
                challenge: identity.challenge(refusal, scheme, request_host(req), &route.name),
                reason: refusal.description(),
            }
        })?;
        a.ctx.request.principal = principal.map(Box::new);
        Ok(Flow::Next)
    }

    fn upstream_request(o: &mut Outbound<'_>) -> pingora::Result<()> {
        if !o.ctx.endpoint()?.route.access.forward_credential {
            o.head.remove_header(&http::header::AUTHORIZATION);
        }
        Ok(())
    }
}

/// The client reached the edge over TLS (through another replica: that replica's listener).
pub(super) fn tls(a: &Admission<'_>) -> bool {
    a.ctx.request.hop.as_ref().map_or(a.edge.tls, |h| h.tls)
}
