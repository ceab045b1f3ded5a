//! Legacy sessions on the way through: the token a request carries is opened on the way in
//! (admission) and the upstream's own identifier restored; identifiers the upstream mints
//! are sealed into tokens on the way out (`Mcp-Session-Id`, the HTTP+SSE `endpoint` event).

use bytes::Bytes;
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::{Error, ErrorType, Result};

use super::ctx::{Admitted, Ctx, Legacy};
use crate::error::EdgeError;
use crate::mcp::headers::{self, SESSION_ID};
use crate::runtime::{Endpoint, EndpointKind, Runtime};
use crate::session::affinity;
use crate::sse;

/// Admission's step for a legacy request: bind the credential and open the session token
/// the request names, if any.
pub fn admit(
    req: &RequestHeader,
    snapshot: &Runtime,
    endpoint: &Endpoint,
    credential: Option<[u8; 16]>,
) -> std::result::Result<Legacy, EdgeError> {
    let session = match token_of(req, endpoint)? {
        None => None,
        Some(token) => Some(affinity::resolve(
            snapshot.sessions.as_deref(),
            &endpoint.route.pool,
            &token,
            credential,
        )?),
    };
    Ok(Legacy {
        credential,
        session,
    })
}

/// The token a request carries: `Mcp-Session-Id` on the Streamable HTTP endpoint, the
/// session query parameter on the HTTP+SSE messages endpoint (required there).
fn token_of(
    req: &RequestHeader,
    endpoint: &Endpoint,
) -> std::result::Result<Option<String>, EdgeError> {
    match endpoint.kind {
        EndpointKind::Streamable => match headers::single(&req.headers, SESSION_ID) {
            Ok(v) => Ok(v.map(|v| String::from_utf8_lossy(v).into_owned())),
            Err(_) => Err(EdgeError::SessionUnknown {
                reason: "Mcp-Session-Id appears more than once",
            }),
        },
        EndpointKind::Messages => {
            let query = req.uri.query().unwrap_or("");
            let names = &endpoint.route.session_params;
            if sse::count_session_params(query, names) > 1 {
                return Err(EdgeError::InvalidRequest {
                    detail: "more than one session parameter".into(),
                });
            }
            match sse::find_query_param(query, names) {
                Some((_, v)) => Ok(Some(v.to_string())),
                None => Err(EdgeError::SessionMissing),
            }
        }
        EndpointKind::SseStream | EndpointKind::Passthrough => Ok(None),
    }
}

/// Upstream request target: strip the route's public prefix; put the upstream's own session
/// identifier back where the client sent the token.
pub fn restore_upstream_target(upstream: &mut RequestHeader, admitted: &Admitted) -> Result<()> {
    if admitted.endpoint == EndpointKind::Passthrough {
        // Forwarded as it is: the URL a DPoP proof or a metadata document names.
        return Ok(());
    }
    let route = &admitted.route;
    let sticky = admitted.session();
    match (sticky, admitted.endpoint) {
        (Some(sticky), EndpointKind::Streamable) => {
            upstream.insert_header(SESSION_ID, sticky.upstream_id.as_str())?;
        }
        // A token (or anything else) in this header means nothing upstream here: a modern
        // request, a preflight, a request without a session.
        _ => {
            upstream.remove_header(SESSION_ID);
        }
    }
    let sticky_query = sticky.filter(|_| admitted.endpoint == EndpointKind::Messages);
    if route.prefix.is_empty() && sticky_query.is_none() {
        return Ok(());
    }
    let path = upstream.uri.path();
    let mut target = path
        .strip_prefix(route.prefix.as_str())
        .unwrap_or(path)
        .to_string();
    if let Some(q) = upstream.uri.query() {
        target = format!("{target}?{q}");
    }
    if let Some(sticky) = sticky_query {
        let query = upstream.uri.query().unwrap_or("");
        if let Some((name, _)) = sse::find_query_param(query, &route.session_params) {
            target = sse::replace_query_param(&target, name, &sticky.upstream_id);
        }
    }
    let uri = target.parse::<http::Uri>().map_err(|e| {
        Error::because(ErrorType::InternalError, "rewriting the upstream target", e)
    })?;
    upstream.set_uri(uri);
    Ok(())
}

/// Replace an upstream `Mcp-Session-Id` with a token (or the client's own token, when the
/// upstream repeats the identifier the client's token carries).
pub fn seal_session_header(resp: &mut ResponseHeader, ctx: &Ctx) -> Result<()> {
    let Some(raw) = resp
        .headers
        .get(SESSION_ID)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
    else {
        return Ok(());
    };
    let Some(admitted) = &ctx.admitted else {
        resp.remove_header(SESSION_ID);
        return Ok(());
    };
    let token = match admitted.session() {
        Some(sticky) if sticky.upstream_id == raw => sticky.token.clone(),
        _ => {
            let (Some(member), Some(sessions)) =
                (ctx.upstream.member(), ctx.snapshot.sessions.as_deref())
            else {
                // No key ring (a modern-only route): never let the raw identifier out.
                resp.remove_header(SESSION_ID);
                return Ok(());
            };
            let pool = &admitted.route.pool.name;
            affinity::seal(sessions, pool, &member.label, &raw, admitted.credential())
                .map_err(edge_failure)?
        }
    };
    resp.insert_header(SESSION_ID, token)?;
    Ok(())
}

/// Feed one upstream chunk of an HTTP+SSE stream through the endpoint rewriter. A token that
/// cannot be sealed ends the stream: the upstream's raw identifier never reaches the client.
pub fn rewrite_sse_chunk(body: &mut Option<Bytes>, end: bool, ctx: &mut Ctx) -> Result<()> {
    let (Some(admitted), Some(member), Some(sessions)) = (
        ctx.admitted.as_ref(),
        ctx.upstream.member(),
        ctx.snapshot.sessions.as_deref(),
    ) else {
        return Ok(());
    };
    let Some(rewriter) = ctx.rewriter.as_mut() else {
        return Ok(());
    };
    let route = &admitted.route;
    let credential = admitted.credential();
    let mut failure = None;
    let mut swap = |url: &str| {
        sse::rewrite_endpoint_url(url, &route.prefix, &route.session_params, &mut |sid| {
            affinity::seal(sessions, &route.pool.name, &member.label, sid, credential)
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
