//! Choosing the member a request goes to, and what happens when it fails.
//!
//! Modern requests (and legacy ones without a session) go round-robin over the healthy
//! members of the route's pool, skipping members this request already tried; a legacy
//! request with a session goes to the member its token names. Failures carry the edge error
//! the client will see inside Pingora's error (its cause), so the error boundary
//! ([`super::respond`]) answers with the right kind.

use std::sync::Arc;
use std::time::Instant;

use pingora::prelude::HttpPeer;
use pingora::{Error, ErrorType};

use super::ctx::{Admitted, Ctx};
use crate::error::EdgeError;
use crate::metrics;
use crate::routing::{Member, Pick};

/// The member for this try of the request.
pub fn choose(ctx: &Ctx, admitted: &Admitted) -> Result<Arc<Member>, Box<Error>> {
    let tried = &ctx.upstream.tried;
    if let Some(sticky) = admitted.session() {
        // The session's member, and once more after a failed pooled connection.
        if tried.len() < 2 {
            return Ok(sticky.member.clone());
        }
        return Err(failed(EdgeError::SessionMemberGone {
            member: sticky.member.label.clone(),
        }));
    }
    let pool = &admitted.route.pool;
    match pool.pick(tried) {
        Pick::Member(m) => Ok(m),
        Pick::AllTried => Err(failed(EdgeError::ConnectFailed {
            detail: format!(
                "every healthy member of pool '{}' failed to connect",
                pool.name
            ),
        })),
        // This request's own failures ejected the last members: report those.
        Pick::NoneHealthy if !tried.is_empty() => Err(failed(EdgeError::ConnectFailed {
            detail: format!("every member of pool '{}' failed to connect", pool.name),
        })),
        Pick::NoneHealthy => Err(failed(EdgeError::NoHealthyMember {
            pool: pool.name.clone(),
        })),
    }
}

/// The peer for `member`, with the configured timeouts; the try is recorded in `ctx`.
pub fn peer(ctx: &mut Ctx, member: Arc<Member>) -> Box<HttpPeer> {
    let t = ctx.snapshot.timeouts;
    let mut peer = HttpPeer::new(member.addr, false, String::new());
    peer.options.connection_timeout = Some(t.connect);
    // Applies to every upstream read: bounds time to the response header and silence
    // inside a stream (SSE keep-alives reset it).
    peer.options.read_timeout = Some(t.upstream_read);
    peer.options.write_timeout = Some(t.upstream_read);
    peer.options.idle_timeout = Some(t.idle);
    ctx.upstream.tried.push(member);
    ctx.upstream.started = Some(Instant::now());
    Box::new(peer)
}

/// A connection to the current member failed: eject it for a while, and either let
/// `choose` try another member (nothing reached this one) or, for a session's member,
/// answer that the session is gone.
pub fn connect_failed(ctx: &Ctx, peer: &HttpPeer, mut e: Box<Error>) -> Box<Error> {
    let Some(admitted) = &ctx.admitted else {
        return e;
    };
    let pool = &admitted.route.pool;
    if let Some(member) = ctx.upstream.member() {
        member.record_connect_failure(pool.health.eject);
        metrics::get()
            .connect_failures
            .with_label_values(&[&pool.name, &member.label])
            .inc();
    }
    if admitted.session().is_some() {
        e.set_cause(EdgeError::SessionMemberGone {
            member: peer._address.to_string(),
        });
        e.set_retry(false);
        return e;
    }
    log::warn!(
        "upstream {} failed to connect: {}; trying another member",
        peer._address,
        e.etype().as_str()
    );
    e.set_retry(true);
    e
}

/// The upstream failed while the request was being proxied: decide whether Pingora may try
/// again (`choose` picks the member).
pub fn proxy_failed(
    ctx: &Ctx,
    peer: &HttpPeer,
    response_started: bool,
    mut e: Box<Error>,
    client_reused: bool,
) -> Box<Error> {
    // Pingora marks "a reused upstream connection failed before any response" as
    // retryable only on reuse: the member closed an idle pooled connection, so the request
    // never reached it. That is safe to send elsewhere even for a POST (the stored body is
    // replayed), unless the request belongs to a legacy session, whose member is fixed.
    let before_response = !response_started && ctx.upstream.status.is_none();
    let sticky = ctx.admitted.as_ref().and_then(Admitted::session).is_some();
    if !before_response {
        e.set_retry(false);
    } else if sticky {
        // A legacy session's member is fixed: try it once more on a fresh connection when
        // a pooled one failed; `choose` turns a second failure into 404.
        e.set_retry(client_reused || e.etype() == &ErrorType::WriteError);
        if !e.retry() {
            e.set_cause(EdgeError::SessionMemberGone {
                member: peer._address.to_string(),
            });
        }
    } else if e.etype() == &ErrorType::WriteError {
        // The member took less than the whole request (it closed or died): it cannot
        // have acted on it.
        e.set_retry(true);
    } else {
        e.retry.decide_reuse(client_reused);
    }
    e
}

/// A Pingora error that carries `error` for the error boundary.
fn failed(error: EdgeError) -> Box<Error> {
    Error::because(
        ErrorType::ConnectError,
        "choosing an upstream member",
        error,
    )
}
