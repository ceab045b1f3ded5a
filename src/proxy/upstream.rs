//! Choosing the member a request goes to, and what happens when it fails.
//!
//! A request pinned to a member (`ctx.request.pinned`: a legacy session's, a task's) goes
//! there; every other one to the member the `balance` stage reserved for it, and a try after
//! a failed one to another member by the pool's policy, skipping members this request
//! already tried. Failures carry the edge error the client
//! will see inside Pingora's error (its cause), so the error boundary ([`super::respond`])
//! answers with the right kind.

use std::sync::Arc;
use std::time::Instant;

use pingora::prelude::HttpPeer;
use pingora::{Error, ErrorType};

use super::ctx::{Ctx, Holds};
use super::stages::balance::{self, Retry};
use crate::error::EdgeError;
use crate::metrics;
use crate::routing::Member;

/// The member for this try of the request.
pub async fn choose(ctx: &mut Ctx) -> Result<Arc<Member>, Box<Error>> {
    let caller = ctx.request.pinned.as_ref();
    if let Some(pinned) = caller.filter(|p| p.holds == Holds::ReplicaCaller) {
        // A caller's replica that refused the connection is leaving: the next one the fleet
        // will choose (nothing of the request reached the first).
        if ctx.upstream.tried.is_empty() {
            return Ok(pinned.member.clone());
        }
        return super::stages::handoff::next_replica(ctx).ok_or_else(|| {
            failed(EdgeError::ConnectFailed {
                detail: "every replica that could keep the caller's process refused".into(),
            })
        });
    }
    let tried = &ctx.upstream.tried;
    if let Some(pinned) = &ctx.request.pinned {
        // The member holding the state, and once more when a pooled connection to it was
        // found dead before the request was written.
        if tried.len() < 2 {
            return Ok(pinned.member.clone());
        }
        return Err(failed(EdgeError::ConnectFailed {
            detail: format!(
                "the {}'s member {} failed twice",
                pinned.holds.what(),
                pinned.member.label
            ),
        }));
    }
    if let Some(member) = balance::reserved(ctx) {
        return Ok(member);
    }
    let pool = ctx.endpoint()?.route.pool.clone();
    match balance::retry(ctx, &pool).await {
        Retry::Member(m) => Ok(m),
        Retry::AllTried => Err(failed(EdgeError::ConnectFailed {
            detail: format!(
                "every healthy member of pool '{}' failed to connect",
                pool.name
            ),
        })),
        // This request's own failures ejected the last members: report those.
        Retry::NoneHealthy if !ctx.upstream.tried.is_empty() => {
            Err(failed(EdgeError::ConnectFailed {
                detail: format!("every member of pool '{}' failed to connect", pool.name),
            }))
        }
        Retry::NoneHealthy => Err(failed(EdgeError::NoHealthyMember {
            pool: pool.name.clone(),
        })),
        Retry::Busy(error) => Err(failed(error)),
    }
}

/// The peer for `member`, with the configured timeouts; the try is recorded in `ctx`.
pub fn peer(ctx: &mut Ctx, member: Arc<Member>) -> Box<HttpPeer> {
    let t = ctx.snapshot.timeouts;
    let handed_off = ctx.handed_off();
    let mut peer = match ctx.route() {
        Some(route) if !handed_off => route.pool.peer(&member),
        // Another replica's hand-off listener: plain HTTP, each request signed.
        _ => HttpPeer::new(member.addr, false, String::new()),
    };
    peer.options.connection_timeout = Some(t.connect);
    // Pingora's read timeout would apply to every read, idle event streams included:
    // upstream silence is bounded by the replay session instead (`replay::Silence`).
    peer.options.read_timeout = None;
    peer.options.write_timeout = Some(t.upstream_read);
    // Shorter than the servers' own keep-alive (Node and uvicorn: 5 s), so the edge drops an
    // idle pooled connection before the server closes it under a request that then could
    // not be sent again.
    peer.options.idle_timeout = Some(t.upstream_idle);
    // A hand-off sent again after a dead pooled connection goes on a new one.
    super::stages::handoff::fresh_connection(ctx, &mut peer);
    ctx.upstream.tried.push(member);
    ctx.upstream.started = Some(Instant::now());
    Box::new(peer)
}

/// The whole body is on its way upstream, and a request is never sent twice: the edge's
/// copy can go. A forward keeps it until the answer's head (it may go once more if its
/// connection was dead: `stages::handoff::once_more`).
pub fn body_sent(ctx: &mut Ctx) {
    if !ctx.handed_off() {
        ctx.stored.release();
    }
}

/// A connection to the current member failed: nothing of the request reached it. Eject
/// the member for a while and let `choose` try another one; a session's member that refuses
/// connections has lost the session (404, the client re-initialises), while one that is
/// slow to accept is transient trouble (502, the client retries).
pub fn connect_failed(ctx: &mut Ctx, peer: &HttpPeer, mut e: Box<Error>) -> Box<Error> {
    let holds = ctx.request.pinned.as_ref().map(|p| p.holds);
    if let Some(holds) = holds.filter(|h| h.by_replica()) {
        if holds == Holds::ReplicaCaller {
            super::stages::handoff::refused(ctx);
        }
        return replica_failed(holds, peer, e);
    }
    let Some(route) = ctx.route() else {
        return e;
    };
    if let Some(member) = ctx.upstream.member() {
        eject(&route.pool, member, &e);
    }
    match holds {
        Some(Holds::Session) => {
            let member = peer._address.to_string();
            let error = if e.etype() == &ErrorType::ConnectRefused {
                EdgeError::SessionMemberGone { member }
            } else {
                EdgeError::ConnectFailed {
                    detail: format!("the session's member {member}: {}", e.etype().as_str()),
                }
            };
            e.set_cause(error);
            e.set_retry(false);
            return e;
        }
        Some(Holds::Task) => {
            // The task lives only there: transient trouble, the client polls again.
            let member = ctx
                .request
                .pinned
                .as_ref()
                .map_or("", |p| p.member.label.as_str());
            e.set_cause(EdgeError::ConnectFailed {
                detail: format!("the task's member {member}: {}", e.etype().as_str()),
            });
            e.set_retry(false);
            return e;
        }
        Some(Holds::ReplicaSession | Holds::ReplicaCaller) | None => {}
    }
    log::warn!(
        "upstream {} failed to connect: {}; trying another member",
        peer._address,
        e.etype().as_str()
    );
    e.set_retry(true);
    e
}

/// The replica holding the request's state could not be reached (nothing reached it): a
/// session's replica that refuses connections is gone, the session with it (404, as for a
/// member that left); one slow to accept is a timeout (504); anything else 502. Never sent
/// anywhere else: no other replica holds the state.
fn replica_failed(holds: Holds, peer: &HttpPeer, mut e: Box<Error>) -> Box<Error> {
    let replica = peer._address.to_string();
    metrics::get().handoff(crate::metrics::Handoff::Unreachable);
    let error = match e.etype() {
        ErrorType::ConnectRefused if holds == Holds::ReplicaSession => {
            EdgeError::SessionMemberGone { member: replica }
        }
        _ if holds == Holds::ReplicaCaller => {
            // Leaving or gone (refused, or silent: nothing of the request reached it): the
            // caller's next replica (`choose`).
            log::info!(
                "replica {replica}: {} for a caller's request; trying the next",
                e.etype().as_str()
            );
            e.set_retry(true);
            return e;
        }
        ErrorType::ConnectTimedout => EdgeError::UpstreamTimeout {
            detail: format!("the {} {replica} did not accept in time", holds.what()),
        },
        other => EdgeError::ConnectFailed {
            detail: format!("the {} {replica}: {}", holds.what(), other.as_str()),
        },
    };
    e.set_cause(error);
    e.set_retry(false);
    e
}

/// A member that refused (or could not finish a TLS handshake) gets no new traffic for a
/// while; the failure is counted.
fn eject(pool: &crate::routing::Pool, member: &Member, e: &Error) {
    member.record_connect_failure(pool.health.eject);
    let m = metrics::get();
    m.ejection(&pool.name, &member.label, metrics::Ejection::Refused);
    m.pools
        .connect_failures
        .with_label_values(&[&pool.name, &member.label])
        .inc();
    if crate::net::tls::is_handshake_failure(e) {
        m.tls
            .upstream_failures
            .with_label_values(&[&pool.name, &member.label])
            .inc();
        log::warn!(
            "pool {}: TLS handshake with {} failed: {e}",
            pool.name,
            member.label
        );
    }
}

/// The upstream failed while the request was being proxied. At most once: a request is
/// sent again (to the same member for a session, else to another) only when none of it was
/// written, that is when writing its head to a pooled connection failed at once; or when
/// it was handed to another replica on a pooled connection that turned out dead
/// ([`dead_hop`]). Any other failure may come after the member acted on the request, so the
/// client gets 502/504 and decides itself. `reused`: the connection came from the pool.
pub fn proxy_failed(ctx: &mut Ctx, e: Box<Error>, reused: bool) -> Box<Error> {
    let mut e = e;
    let again = nothing_written(&e) || dead_hop(ctx, &e, reused);
    e.set_retry(again);
    e
}

/// A forward to the replica holding the state, written to a pooled connection that failed
/// (reset, closed) before any of the answer came: the replica died while the connection sat
/// idle. It goes once more on a new connection with the same signature
/// ([`super::stages::handoff::once_more`]): the replica refuses a nonce it has seen, so
/// the forward is served at most once even if the first copy reached it; a replica that is
/// gone refuses the connection, and the client gets the 404 of a session gone (never a 502
/// for a connection that was dead before the request was written).
fn dead_hop(ctx: &mut Ctx, e: &Error, reused: bool) -> bool {
    let broke = matches!(
        e.etype(),
        ErrorType::ConnectionClosed | ErrorType::ReadError | ErrorType::WriteError
    );
    reused
        && broke
        && ctx.handed_off()
        && ctx.upstream.status.is_none()
        && super::stages::handoff::once_more(ctx)
}

/// Pingora 0.9.1 reports a failed write of the request head as `WriteError` "while writing
/// request headers" (`protocols/http/v1/client.rs`); a head is one write, so none of the
/// request can have been acted on. A timeout there may have left part of it in flight.
fn nothing_written(e: &Error) -> bool {
    e.etype() == &ErrorType::WriteError
        && e.context
            .as_ref()
            .is_some_and(|c| c.as_str().starts_with("while writing request headers"))
}
/// A Pingora error that carries `error` for the error boundary.
fn failed(error: EdgeError) -> Box<Error> {
    Error::because(
        ErrorType::ConnectError,
        "choosing an upstream member",
        error,
    )
}
