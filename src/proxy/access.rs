//! Admission steps for identity (see [`crate::identity`]): who calls, before the body is
//! read (401); the edge's Protected Resource Metadata document; then, once the body named
//! its method and entry, the rate limit (429) and the route's policy (a hidden entry is
//! answered as an absent one, and never forwarded).

use std::net::IpAddr;

use bytes::Bytes;
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::proxy::Session;
use serde_json::Value;

use super::bridge::Answer;
use super::ctx::Ctx;
use super::rewrite::{ListFilter, Rewrite};
use crate::error::{EdgeError, Rejection};
use crate::identity::policy::{self, Target};
use crate::identity::{rate, AuthMode, Principal, Refusal, METADATA_PREFIX};
use crate::mcp::rules::Era;
use crate::metrics;
use crate::runtime::{Endpoint, EndpointKind, Route, Runtime};

/// The caller's principal on a route with `auth` (`None`: anonymous, or a route without
/// `auth`, whose credentials the edge does not look at).
pub async fn identify(
    session: &Session,
    ctx: &Ctx,
    endpoint: &Endpoint,
) -> Result<Option<Principal>, EdgeError> {
    let route = &endpoint.route;
    if route.access.auth == AuthMode::None || endpoint.kind == EndpointKind::Passthrough {
        return Ok(None);
    }
    let Some(identity) = ctx.snapshot.identity.as_deref() else {
        return Err(EdgeError::Internal {
            detail: "the route has auth but the edge has no [identity]".into(),
        });
    };
    let req = session.req_header();
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
        .auth
        .with_label_values(&[route.name.as_str(), result])
        .inc();
    outcome.map_err(|refusal| {
        let scheme = if ctx.tls { "https" } else { "http" };
        EdgeError::Unauthorized {
            challenge: identity.challenge(refusal, scheme, host(req), &route.name),
            reason: refusal.description(),
        }
    })
}

fn host(req: &RequestHeader) -> Option<&str> {
    req.headers
        .get(http::header::HOST)
        .and_then(|h| h.to_str().ok())
        .or_else(|| req.uri.authority().map(|a| a.as_str()))
}

/// `GET /.well-known/oauth-protected-resource<route path>` for a route with `auth`, when
/// `[identity] authorization_servers` are configured: the edge's own document.
pub fn metadata(req: &RequestHeader, snapshot: &Runtime, tls: bool) -> Option<Answer> {
    let identity = snapshot.identity.as_deref()?;
    if identity.authorization_servers.is_empty()
        || !matches!(req.method, http::Method::GET | http::Method::HEAD)
    {
        return None;
    }
    let route_path = req.uri.path().strip_prefix(METADATA_PREFIX)?;
    let endpoint = snapshot.endpoints.get(route_path)?;
    if endpoint.kind != EndpointKind::Streamable || endpoint.route.access.auth == AuthMode::None {
        return None;
    }
    let scheme = if tls { "https" } else { "http" };
    let doc = identity.metadata_document(scheme, host(req), route_path);
    Some(Answer {
        status: 200,
        body: Bytes::from(doc),
    })
}

/// What the policy and the rate limit need from a POST.
pub struct Named<'a> {
    pub era: Option<&'a Era>,
    pub method: Option<&'a str>,
    pub id: Option<&'a Value>,
    pub target: Option<&'a Target>,
    pub batch: bool,
    /// A GET: a legacy event stream, where HTTP+SSE answers (lists too) arrive.
    pub stream: bool,
    /// An HTTP+SSE messages POST: its answer travels on the event stream.
    pub messages: bool,
}

/// What the policy makes of a request.
pub enum Policed {
    Pass,
    /// The edge answers for the server (a hidden entry).
    Answer(Answer),
    /// An HTTP+SSE POST naming a hidden entry: forwarded under a name no server has (see
    /// [`policy::disguise`]), for this method.
    Disguise(String),
}

/// The rate limit, then the policy.
pub fn police(
    ctx: &mut Ctx,
    route: &Route,
    client: Option<IpAddr>,
    named: Named<'_>,
) -> Result<Policed, Rejection> {
    let access = &route.access;
    let reject = |e| Rejection::with_id(e, named.id.cloned());
    if let Some(limiter) = &access.rate {
        let tool = named
            .target
            .filter(|_| named.method == Some("tools/call"))
            .map(|t| t.value.as_str());
        if let Err(wait) = limiter.check(ctx.principal.as_ref(), client, tool) {
            metrics::get()
                .rate_limited
                .with_label_values(&[route.name.as_str()])
                .inc();
            return Err(reject(EdgeError::RateLimited {
                retry_after: rate::retry_after(wait),
            }));
        }
    }
    let Some(policy) = &access.policy else {
        return Ok(Policed::Pass);
    };
    let grant = policy.grant(ctx.principal.as_ref());
    if named.batch {
        return Err(reject(EdgeError::BatchRefused));
    }
    if let (Some(target), Some(method)) = (named.target, named.method) {
        if !grant.allows(target.kind, &target.value) {
            metrics::get()
                .policy_refusals
                .with_label_values(&[route.name.as_str(), grant.rule()])
                .inc();
            let Some(id) = named.id else {
                // A notification: accepted, as a server accepts one, and dropped.
                return Ok(Policed::Answer(Answer {
                    status: 202,
                    body: Bytes::new(),
                }));
            };
            if named.messages {
                ctx.grant = Some(grant);
                return Ok(Policed::Disguise(method.to_owned()));
            }
            let modern = matches!(named.era, Some(Era::Modern(_)));
            let (status, body) =
                policy::absent_answer(access.absent_as, modern, method, target, id);
            return Ok(Policed::Answer(Answer {
                status,
                body: Bytes::from(body),
            }));
        }
    }
    if let (Some(method), Some(id)) = (named.method, named.id) {
        if LIST_METHODS.contains(&method) {
            ctx.answering_list = Some(id.clone());
        }
    }
    ctx.filter_stream = named.stream;
    ctx.grant = Some(grant);
    Ok(Policed::Pass)
}

/// The requests whose answers a policy filters.
const LIST_METHODS: [&str; 4] = [
    "tools/list",
    "prompts/list",
    "resources/list",
    "resources/templates/list",
];

/// On a route with a policy: the answer to a list request, and a legacy event stream
/// (where HTTP+SSE answers arrive), are filtered on their way ([`Rewrite`]).
pub fn filter_lists(resp: &mut ResponseHeader, ctx: &mut Ctx) -> pingora::Result<()> {
    let Some(grant) = ctx.grant.clone() else {
        return Ok(());
    };
    if ctx.answering_list.is_none() && !(ctx.filter_stream && ctx.sse) {
        return Ok(());
    }
    let encoded = resp
        .headers
        .get(http::header::CONTENT_ENCODING)
        .is_some_and(|v| !v.as_bytes().eq_ignore_ascii_case(b"identity"));
    if encoded {
        // Asked without Accept-Encoding, and compressed anyway: it cannot be filtered.
        return Err(pingora::Error::because(
            pingora::ErrorType::HTTPStatus(502),
            "filtering a list answer",
            EdgeError::UpstreamError {
                detail: "the server compressed an answer the route's policy must filter".into(),
            },
        ));
    }
    let content_type = resp
        .headers
        .get(http::header::CONTENT_TYPE)
        .map(|v| v.as_bytes().to_vec());
    let filter = ListFilter {
        grant,
        answering: ctx.answering_list.clone(),
        hidden: 0,
    };
    match ctx.convert.as_mut() {
        Some(rewrite) => rewrite.filter = Some(filter),
        None => ctx.convert = Rewrite::new(content_type.as_deref(), None, Some(filter)),
    }
    if ctx.convert.is_some() {
        // Entries leave the body: let Pingora re-frame it.
        resp.remove_header(&http::header::CONTENT_LENGTH);
    }
    Ok(())
}

/// Count the entries filtering hid so far.
pub fn count_hidden(ctx: &mut Ctx) {
    let (Some(filter), Some(route)) = (
        ctx.convert.as_mut().and_then(|r| r.filter.as_mut()),
        ctx.admitted.as_ref().map(|a| &a.route),
    ) else {
        return;
    };
    if filter.hidden > 0 {
        metrics::get()
            .policy_hidden
            .with_label_values(&[route.name.as_str(), filter.grant.rule()])
            .inc_by(filter.hidden as u64);
        filter.hidden = 0;
    }
}
