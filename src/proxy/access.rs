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
/// `[identity] authorization_servers` are configured: the edge's own document, readable by
/// any page (it is public), for a `Host` the route serves.
pub fn metadata(
    req: &RequestHeader,
    snapshot: &Runtime,
    tls: bool,
) -> Result<Option<Answer>, EdgeError> {
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
    super::admit::check_host(req, &endpoint.route)?;
    let scheme = if tls { "https" } else { "http" };
    let doc = identity.metadata_document(scheme, host(req), route_path);
    Ok(Some(Answer {
        public: true,
        ..Answer::json(200, Bytes::from(doc))
    }))
}

/// What the policy and the rate limit need from a request.
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
    /// The request's body, when it has one.
    pub body: Option<&'a [u8]>,
    /// The request's head (its `Accept`, `Mcp-Session-Id` and `X-Forwarded-For` are read
    /// only when a rate limit or policy needs them).
    pub req: &'a RequestHeader,
    /// The message has an `id`, readable or not.
    pub has_id: bool,
    /// A legacy request bridged to a 2026-07-28 member.
    pub bridged: bool,
}

/// What the policy makes of a request.
pub enum Policed {
    Pass,
    /// The edge answers for the server (a hidden entry).
    Answer(Answer),
    /// The request goes on with this body: an HTTP+SSE POST naming a hidden entry renamed
    /// (see [`policy::disguise`]), a `subscriptions/listen` without hidden URIs.
    Replace(Vec<u8>),
}

/// The rate limit, then the policy.
pub fn police(
    ctx: &mut Ctx,
    route: &Route,
    client: Option<IpAddr>,
    named: Named<'_>,
) -> Result<Policed, Rejection> {
    let access = &route.access;
    if access.rate.is_none() && access.policy.is_none() {
        return Ok(Policed::Pass);
    }
    let reject = |e| Rejection::with_id(e, named.id.cloned());
    let grant = access
        .policy
        .as_ref()
        .map(|p| p.grant(ctx.principal.as_deref()));
    if let Some(limiter) = &access.rate {
        // A tool's bucket only for a name the caller may use; every request also draws
        // from the caller's.
        let tool = named
            .target
            .filter(|_| named.method == Some("tools/call"))
            .map(|t| t.value.as_str())
            .filter(|name| name.len() <= 128)
            .filter(|name| {
                grant
                    .as_ref()
                    .is_none_or(|g| g.allows(policy::Kind::Tool, name))
            });
        let caller = caller_address(ctx, client, named.req);
        if let Err(wait) = limiter.check(ctx.principal.as_deref(), caller, tool) {
            metrics::get()
                .rate_limited
                .with_label_values(&[route.name.as_str()])
                .inc();
            return Err(reject(EdgeError::RateLimited {
                retry_after: rate::retry_after(wait),
            }));
        }
    }
    let Some(grant) = grant else {
        return Ok(Policed::Pass);
    };
    if named.batch {
        return Err(reject(EdgeError::BatchRefused));
    }
    if let Some(method) = named.method {
        // (Over HTTP+SSE the answer comes on the stream, filtered there.)
        if LIST_METHODS.contains(&method) && !named.messages {
            // Filtered whatever the id (one too long to read is answered as `null`).
            ctx.answering_list = Some(named.id.cloned().unwrap_or(Value::Null));
        }
    }
    ctx.filter_stream = named.stream;
    let policed = match (named.target, named.method) {
        (Some(target), Some(method)) if !grant.allows(target.kind, &target.value) => {
            metrics::get()
                .policy_refusals
                .with_label_values(&[route.name.as_str(), grant.rule()])
                .inc();
            hidden(ctx, &named, access.absent_as, method, target)?
        }
        (_, Some("subscriptions/listen")) => {
            match named
                .body
                .map(|b| policy::filter_subscriptions(b, &grant))
                .transpose()
            {
                Ok(Some(Some(body))) => Policed::Replace(body),
                Ok(_) => Policed::Pass,
                Err(policy::Ambiguous) => {
                    return Err(reject(EdgeError::InvalidRequest {
                        detail: "a key appears more than once in the subscriptions".into(),
                    }))
                }
            }
        }
        _ => Policed::Pass,
    };
    ctx.grant = Some(grant);
    Ok(policed)
}

/// A request naming a hidden entry: answered as the server answers an absent one. Where
/// the edge cannot give that answer exactly (an HTTP+SSE POST, whose answer belongs on a
/// stream another replica may hold; a legacy request with an id too long to echo, or whose
/// `Accept` a server refuses), it goes on with the name replaced by one no server has, the
/// server answers for it and runs nothing, and the edge puts the name back in that answer.
fn hidden(
    ctx: &mut Ctx,
    named: &Named<'_>,
    style: policy::AbsentAs,
    method: &str,
    target: &Target,
) -> Result<Policed, Rejection> {
    let modern = matches!(named.era, Some(Era::Modern(_)));
    let exact = match named.id {
        _ if named.bridged => true,
        Some(_) => modern || (accepts_sse(named.req) && !named.messages),
        None => false,
    };
    if !exact && (named.has_id || named.messages) {
        return match named.body.and_then(|b| policy::disguise(b, method)) {
            Some(body) => {
                ctx.restore_hidden = true;
                Ok(Policed::Replace(body))
            }
            None => Err(Rejection::with_id(
                EdgeError::InvalidRequest {
                    detail: "params do not name what the method needs".into(),
                },
                named.id.cloned(),
            )),
        };
    }
    let Some(id) = named.id else {
        // A notification: accepted, as a server accepts one, and dropped.
        return Ok(Policed::Answer(Answer::json(202, Bytes::new())));
    };
    if named.bridged {
        // What a bridged member's answer becomes: 2026-07-28 JSON in the legacy shape, with
        // no session header (the bridge's own token is the client's session).
        let (_, json) = policy::absent_answer(style, true, method, target, id);
        let json = json.replace(",\"resultType\":\"complete\"", "");
        return Ok(Policed::Answer(Answer::json(200, Bytes::from(json))));
    }
    let (status, json) = policy::absent_answer(style, modern, method, target, id);
    if modern {
        return Ok(Policed::Answer(Answer::json(status, Bytes::from(json))));
    }
    // Legacy servers answer a POST that accepts an event stream with one (Python with CRLF
    // line ends), echoing the session.
    let end = if style == policy::AbsentAs::Python {
        "\r\n"
    } else {
        "\n"
    };
    let event = format!("event: message{end}data: {json}{end}{end}");
    Ok(Policed::Answer(Answer {
        content_type: "text/event-stream",
        session: named
            .req
            .headers
            .get(crate::mcp::headers::SESSION_ID)
            .cloned(),
        ..Answer::json(status, Bytes::from(event))
    }))
}

/// Who an anonymous caller is: its address, or behind a trusted proxy the client the proxy
/// names (the rightmost `X-Forwarded-For` entry that is not a trusted proxy).
fn caller_address(ctx: &Ctx, peer: Option<IpAddr>, req: &RequestHeader) -> Option<IpAddr> {
    let peer = peer.map(|ip| ip.to_canonical())?;
    let forwarding = &ctx.snapshot.forwarding;
    if ctx.principal.is_some() || !forwarding.trusts(peer) {
        return Some(peer);
    }
    // Every `X-Forwarded-For` line, in order, as one list.
    let lines: Vec<&str> = req
        .headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect();
    let forwarded = lines.join(",");
    // From the right: each trusted hop vouches for the entry to its left. An entry that is
    // not an address ends the walk at the last hop that was vouched for (never further
    // left, where a client writes what it likes).
    let mut caller = peer;
    for entry in forwarded.rsplit(',') {
        let Some(ip) = address(entry.trim()) else {
            break;
        };
        caller = ip;
        if !forwarding.trusts(ip) {
            break;
        }
    }
    Some(caller)
}

/// The request accepts an event stream (legacy servers answer a POST with one).
fn accepts_sse(req: &RequestHeader) -> bool {
    req.headers.get_all(http::header::ACCEPT).iter().any(|v| {
        v.as_bytes()
            .windows(17)
            .any(|w| w.eq_ignore_ascii_case(b"text/event-stream"))
    })
}

/// An `X-Forwarded-For` entry's address: `ip`, `ip:port`, `[v6]` or `[v6]:port`.
fn address(entry: &str) -> Option<IpAddr> {
    if let Ok(ip) = entry.parse::<IpAddr>() {
        return Some(ip.to_canonical());
    }
    if let Some(rest) = entry.strip_prefix('[') {
        return rest
            .split(']')
            .next()?
            .parse::<IpAddr>()
            .ok()
            .map(|ip| ip.to_canonical());
    }
    let (host, port) = entry.rsplit_once(':')?;
    port.parse::<u16>().ok()?;
    host.parse::<std::net::Ipv4Addr>().ok().map(IpAddr::V4)
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
    if ctx.answering_list.is_none() && !(ctx.filter_stream && ctx.sse) && !ctx.restore_hidden {
        return Ok(());
    }
    let encoded = resp
        .headers
        .get_all(http::header::CONTENT_ENCODING)
        .iter()
        .any(|v| !v.as_bytes().eq_ignore_ascii_case(b"identity"));
    let unfilterable = |detail: &str| {
        pingora::Error::because(
            pingora::ErrorType::HTTPStatus(502),
            "filtering a list answer",
            EdgeError::UpstreamError {
                detail: detail.into(),
            },
        )
    };
    if encoded {
        // Asked without Accept-Encoding, and compressed anyway: it cannot be filtered.
        return Err(unfilterable(
            "the server compressed an answer the route's policy must filter",
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
    let answering = filter.answering.is_some();
    match ctx.convert.as_mut() {
        Some(rewrite) => rewrite.set_filter(filter),
        None => {
            ctx.convert = Rewrite::new(content_type.as_deref(), None, Some(filter)).map(Box::new)
        }
    }
    if ctx.convert.is_none() && answering && resp.status == http::StatusCode::OK {
        // Neither JSON nor an event stream: not something the edge can filter.
        return Err(unfilterable(
            "the server answered a list request with a body the edge cannot filter",
        ));
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

#[cfg(test)]
mod tests {
    use super::address;

    #[test]
    fn forwarded_entries_are_addresses_with_or_without_a_port() {
        let ip = |s: &str| s.parse::<std::net::IpAddr>().ok();
        assert_eq!(address("10.0.0.1"), ip("10.0.0.1"));
        assert_eq!(address("10.0.0.1:8443"), ip("10.0.0.1"));
        assert_eq!(address("[2001:db8::1]:443"), ip("2001:db8::1"));
        assert_eq!(address("[2001:db8::1]"), ip("2001:db8::1"));
        assert_eq!(address("::ffff:10.0.0.1"), ip("10.0.0.1"));
        assert_eq!(address("unknown"), None);
        assert_eq!(address("10.0.0.1:x"), None);
    }
}
