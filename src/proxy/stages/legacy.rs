//! Legacy sessions on the way through: the token a request carries is opened on the way in
//! and the upstream's own identifier restored; identifiers the upstream mints are sealed into
//! tokens on the way out (`Mcp-Session-Id`, the HTTP+SSE `endpoint` event).
//!
//! - In: a legacy request (not one the bridge serves) binds the caller (principal, else the
//!   credential's digest) and opens the token it names (`Mcp-Session-Id`, or the session query
//!   parameter on the HTTP+SSE messages endpoint, required there): every failure is a 404 the
//!   client answers by re-initialising; the session's member is pinned
//!   (`ctx.request.pinned`). The member gets its own session id back; a token (or anything
//!   else) in `Mcp-Session-Id` of any other request means nothing upstream and goes.
//! - Out: a member's `Mcp-Session-Id` becomes a token (or the client's own, when the member
//!   repeats the id the client's token carries); without a key ring it never leaves. The
//!   HTTP+SSE `endpoint` event's URL gets a token in place of the member's session id.

use std::sync::Arc;

use bytes::Bytes;
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::{Error, ErrorType};

use crate::error::{EdgeError, Rejection};
use crate::mcp::headers::{self, SESSION_ID};
use crate::mcp::query;
use crate::mcp::rules::Era;
use crate::mcp::sse::{self, EndpointRewriter};
use crate::metrics::{self, TokenFailure, TokenOp};
use crate::proxy::ctx::{Ctx, Holds, Pinned};
use crate::proxy::edge::Edge;
use crate::proxy::stage::{Admission, Flow, Outbound, Phase, Site, Stage};
use crate::routing::{Member, Pool};
use crate::runtime::{Endpoint, EndpointKind};
use crate::session::{self, Kind, Sessions};

/// A legacy request's session, and the rewrite of an HTTP+SSE stream's `endpoint` event.
#[derive(Default)]
pub struct State {
    /// The caller's binding, bound into tokens sealed for it.
    credential: Option<[u8; 16]>,
    /// The session the request belongs to, from its token.
    session: Option<Sticky>,
    rewriter: Option<EndpointRewriter>,
}

/// Where a legacy request with a session must go, and what to restore on the way.
#[derive(Debug, Clone)]
struct Sticky {
    /// The upstream's own session identifier.
    upstream_id: String,
    /// The token the client sent (echoed back when the upstream repeats its identifier).
    token: String,
}

/// The member's own id of the legacy session a request belongs to (never the token the
/// client holds, which opens it).
pub fn upstream_session(ctx: &Ctx) -> Option<&str> {
    let state = ctx.stages.legacy.as_deref()?;
    state.session.as_ref().map(|s| s.upstream_id.as_str())
}

pub struct Legacy;

impl Stage for Legacy {
    const NAME: &'static str = "legacy";

    /// The member's head of any request but a pass-through one.
    fn serves(site: &Site<'_>, phase: Phase) -> bool {
        phase != Phase::UpstreamRequest || site.endpoint.kind != EndpointKind::Passthrough
    }

    async fn request(a: &mut Admission<'_>) -> Result<Flow, Rejection> {
        let request = &a.ctx.request;
        let Some(endpoint) = &request.endpoint else {
            return Ok(Flow::Next);
        };
        // A bridged route's legacy clients are the bridge's (`bridge.rs`, `sse_bridge.rs`).
        if request.era != Some(Era::Legacy) || endpoint.route.bridge {
            return Ok(Flow::Next);
        }
        let req = a.session.req_header();
        let credential = session::binding(req, request.principal.as_deref());
        let reject = |e| Rejection::with_id(e, a.ctx.request_id().cloned());
        let token = token_of(req, endpoint).map_err(reject)?;
        let mut state = State {
            credential,
            ..State::default()
        };
        if let Some(token) = token {
            let sessions = a.ctx.snapshot.sessions.as_deref();
            let (member, sticky) =
                resolve(sessions, &endpoint.route.pool, token, credential).map_err(reject)?;
            state.session = Some(sticky);
            a.ctx.request.pinned = Some(Pinned {
                member,
                holds: Holds::Session,
            });
        }
        a.ctx.stages.legacy = Some(Box::new(state));
        Ok(Flow::Next)
    }

    fn upstream_request(o: &mut Outbound<'_>) -> pingora::Result<()> {
        let endpoint = o.ctx.endpoint()?;
        if endpoint.kind == EndpointKind::Passthrough {
            return Ok(());
        }
        let sticky = o
            .ctx
            .stages
            .legacy
            .as_ref()
            .and_then(|s| s.session.as_ref());
        match (sticky, endpoint.kind) {
            (Some(sticky), EndpointKind::Streamable) => {
                o.head
                    .insert_header(SESSION_ID, sticky.upstream_id.as_str())?;
            }
            // Most requests carry none: looked up by a name parsed once, not at each request.
            _ if o.head.headers.contains_key(&SESSION_ID_NAME) => {
                o.head.remove_header(&SESSION_ID_NAME);
            }
            _ => {}
        }
        match sticky {
            Some(sticky) if endpoint.kind == EndpointKind::Messages => {
                restore_query(o.head, &endpoint.route.session_params, &sticky.upstream_id)
            }
            _ => Ok(()),
        }
    }

    fn response(head: &mut ResponseHeader, ctx: &mut Ctx, _edge: &Edge) -> pingora::Result<()> {
        if ctx.request.bridged {
            // A bridged client's session is the bridge's.
            return Ok(());
        }
        seal_session_header(head, ctx)?;
        let stream = ctx.endpoint()?.kind == EndpointKind::SseStream;
        if stream && ctx.response.is_event_stream() {
            // The endpoint event changes length; let Pingora re-frame the stream.
            head.remove_header(&http::header::CONTENT_LENGTH);
            let state = ctx.stages.legacy.get_or_insert_with(Box::default);
            state.rewriter = Some(EndpointRewriter::new());
        }
        Ok(())
    }

    fn response_body(body: &mut Option<Bytes>, end: bool, ctx: &mut Ctx) -> pingora::Result<()> {
        rewrite_sse_chunk(body, end, ctx)
    }
}

/// The token a request carries: `Mcp-Session-Id` on the Streamable HTTP endpoint, the
/// session query parameter on the HTTP+SSE messages endpoint (required there).
pub(crate) fn token_of<'r>(
    req: &'r RequestHeader,
    endpoint: &Endpoint,
) -> Result<Option<&'r str>, EdgeError> {
    match endpoint.kind {
        EndpointKind::Streamable => match headers::single(&req.headers, SESSION_ID) {
            Ok(v) => Ok(v.map(|v| std::str::from_utf8(v).unwrap_or("\u{fffd}"))),
            Err(_) => Err(EdgeError::SessionUnknown {
                reason: "Mcp-Session-Id appears more than once",
            }),
        },
        EndpointKind::Messages => {
            let q = req.uri.query().unwrap_or("");
            let names = &endpoint.route.session_params;
            if query::count_session_params(q, names) > 1 {
                return Err(EdgeError::InvalidRequest {
                    detail: "more than one session parameter".into(),
                });
            }
            match query::find_query_param(q, names) {
                Some((_, v)) => Ok(Some(v)),
                None => Err(EdgeError::SessionMissing),
            }
        }
        EndpointKind::SseStream | EndpointKind::Passthrough => Ok(None),
    }
}

fn refuse(reason: TokenFailure, error: EdgeError) -> EdgeError {
    metrics::get().token_failure(reason);
    error
}

/// Open `token` for a route served by `pool`. Every failure is a 404 the client answers by
/// re-initialising; the member must be in the pool now.
fn resolve(
    sessions: Option<&Sessions>,
    pool: &Pool,
    token: &str,
    credential: Option<[u8; 16]>,
) -> Result<(Arc<Member>, Sticky), EdgeError> {
    let Some(s) = sessions else {
        return Err(refuse(
            TokenFailure::UnknownKey,
            EdgeError::SessionUnknown {
                reason: "this edge holds no session keys",
            },
        ));
    };
    let claims = session::open_session(s, &pool.name, token, credential, Kind::Session)?;
    let Some(member) = pool.find(&claims.member) else {
        return Err(refuse(
            TokenFailure::MemberGone,
            EdgeError::SessionMemberGone {
                member: claims.member,
            },
        ));
    };
    metrics::get().token(TokenOp::Opened);
    let sticky = Sticky {
        upstream_id: claims.upstream_id,
        token: token.to_string(),
    };
    Ok((member, sticky))
}

/// The session query parameter of an HTTP+SSE messages POST carries the member's own id.
fn restore_query(
    head: &mut RequestHeader,
    params: &[String],
    upstream_id: &str,
) -> pingora::Result<()> {
    let Some(q) = head.uri.query() else {
        return Ok(());
    };
    let Some((name, _)) = query::find_query_param(q, params) else {
        return Ok(());
    };
    let target = head.uri.path_and_query().map_or("", |p| p.as_str());
    let target = query::replace_query_param(target, name, upstream_id);
    super::route::set_target(head, &target)
}

/// `Mcp-Session-Id`, parsed at compile time for lookups.
const SESSION_ID_NAME: http::HeaderName = http::HeaderName::from_static(SESSION_ID);

/// Replace a member's `Mcp-Session-Id` with a token (or the client's own token, when the
/// member repeats the identifier the client's token carries).
fn seal_session_header(resp: &mut ResponseHeader, ctx: &Ctx) -> pingora::Result<()> {
    let Some(raw) = resp
        .headers
        .get(&SESSION_ID_NAME)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
    else {
        return Ok(());
    };
    let state = ctx.stages.legacy.as_deref();
    let token = match state.and_then(|s| s.session.as_ref()) {
        Some(sticky) if sticky.upstream_id == raw => sticky.token.clone(),
        _ => {
            let (Some(member), Some(sessions)) =
                (ctx.upstream.member(), ctx.snapshot.sessions.as_deref())
            else {
                // No key ring (a modern-only route): never let the raw identifier out.
                resp.remove_header(SESSION_ID);
                return Ok(());
            };
            let pool = &ctx.endpoint()?.route.pool;
            let credential = state.and_then(|s| s.credential);
            let held = session::Held {
                pool: &pool.name,
                member: &member.label,
                upstream_id: &raw,
                owner: owner(ctx, pool),
            };
            session::seal_session(sessions, Kind::Session, held, credential)
                .map_err(edge_failure)?
        }
    };
    resp.insert_header(SESSION_ID, token)?;
    Ok(())
}

/// The replica a session of `pool` lives in, named in its token: this one, when the session
/// lives inside the replica (a stdio pool's) and replicas hand requests to each other.
fn owner<'c>(ctx: &'c Ctx, pool: &Pool) -> Option<&'c session::Owner> {
    owner_of(ctx.snapshot.fleet.as_deref(), pool)
}

fn owner_of<'f>(fleet: Option<&'f crate::fleet::Fleet>, pool: &Pool) -> Option<&'f session::Owner> {
    pool.stdio.get()?;
    fleet?.this()
}

/// Feed one upstream chunk of an HTTP+SSE stream through the endpoint rewriter. A token that
/// cannot be sealed ends the stream: the upstream's raw identifier never reaches the client.
fn rewrite_sse_chunk(body: &mut Option<Bytes>, end: bool, ctx: &mut Ctx) -> pingora::Result<()> {
    let (Some(endpoint), Some(member), Some(sessions), Some(state)) = (
        ctx.request.endpoint.as_ref(),
        ctx.upstream.member(),
        ctx.snapshot.sessions.as_deref(),
        ctx.stages.legacy.as_deref_mut(),
    ) else {
        return Ok(());
    };
    let Some(rewriter) = state.rewriter.as_mut() else {
        return Ok(());
    };
    if rewriter.is_done() && !end {
        return Ok(());
    }
    let route = &endpoint.route;
    let credential = state.credential;
    let owner = owner_of(ctx.snapshot.fleet.as_deref(), &route.pool);
    let mut failure = None;
    let mut swap = |url: &str| {
        sse::rewrite_endpoint_url(url, &route.prefix, &route.session_params, &mut |sid| {
            let held = session::Held {
                pool: &route.pool.name,
                member: &member.label,
                upstream_id: sid,
                owner,
            };
            session::seal_session(sessions, Kind::Session, held, credential)
                .map_err(|e| failure = Some(e))
                .ok()
        })
    };
    let mut out = match body.take() {
        Some(chunk) => rewriter.feed(&chunk, &mut swap).to_vec(),
        None => Vec::new(),
    };
    if let Some(e) = failure {
        return Err(edge_failure(e));
    }
    if end {
        out.extend_from_slice(&rewriter.finish());
    }
    // An empty chunk holds back a partial event; `None` would mean end of body.
    *body = Some(Bytes::from(out));
    Ok(())
}

/// An edge error inside a Pingora error, so it reaches the error boundary with its kind.
fn edge_failure(e: EdgeError) -> Box<Error> {
    Error::because(ErrorType::InternalError, "sealing a session token", e)
}
