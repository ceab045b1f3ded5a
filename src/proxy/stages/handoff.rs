//! Any replica serves any client: a request for state another replica holds is handed to
//! that replica, which serves it as if it had arrived there (`[fleet] handoff_listen`).
//!
//! - `arrival` (first): on the hand-off listener, only a request another replica of the
//!   fleet signed, once, within the window ([`crate::fleet::hop`]); anything else is refused
//!   (403 `hop_refused`, counted) and never served. What the first replica saw of the client
//!   (its address, TLS) stands in for the connection's (`ctx.request.hop`).
//! - `handoff` (once the body is read and checked): a request that came by hand-off must
//!   carry the body that was signed, and is served here (one hop at most). Otherwise, on a
//!   stdio pool (whose state lives inside a replica): a legacy request whose token names
//!   another live replica goes there, one naming a replica that is gone gets the 404 of a
//!   member that left; a `per_principal` pool's request goes to the replica rendezvous
//!   hashing picks for the caller. On a bridged route, an HTTP+SSE client's POST goes to the
//!   replica holding its stream (`sse_bridge.rs`), named in its token the same way. The request is pinned to that replica
//!   (`ctx.request.pinned`) and the stages after this one run there, not here.
//! - Out (the relay, `proxy/pipeline.rs`): the request as the client sent it, signed; the
//!   answer, event streams included, comes back as the owner wrote it. Never served twice:
//!   a forward that may have been read is retried only where the owner's nonce check
//!   makes a second copy harmless (a pooled connection found dead before any answer,
//!   `proxy/upstream.rs`): once, on a new connection, with the same signature; the edge's
//!   copy of the body is kept until the answer's head for it.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use pingora::http::ResponseHeader;

use crate::config::TraceContext;
use crate::error::{EdgeError, Rejection};
use crate::fleet::handoff::Whose;
use crate::fleet::hop::{self, Refused};
use crate::fleet::Fleet;
use crate::mcp::rules::Era;
use crate::metrics::{self, Handoff, TokenFailure};
use crate::proxy::ctx::{Ctx, Holds, Pinned};
use crate::proxy::edge::{Edge, Listening};
use crate::proxy::stage::{Admission, Flow, Outbound, Phase, Site, Stage};
use crate::routing::Member;
use crate::runtime::EndpointKind;
use crate::session::{self, token::now_secs, Caller, Kind};
use crate::stdio::Isolation;

pub struct Arrival;

impl Stage for Arrival {
    const NAME: &'static str = "arrival";

    /// Only the hand-off listener's requests are forwards.
    fn listens(listening: &Listening) -> bool {
        listening.handoff
    }

    async fn request(a: &mut Admission<'_>) -> Result<Flow, Rejection> {
        if !a.edge.handoff {
            return Ok(Flow::Next);
        }
        let snapshot = &a.ctx.snapshot;
        let me = snapshot
            .fleet
            .as_deref()
            .and_then(|f| f.settings.handoff.as_ref());
        let verdict = match (snapshot.sessions.as_deref(), me) {
            (Some(s), Some(me)) => {
                hop::verify(&s.ring, a.session.req_header(), me.advertise, now_secs())
            }
            _ => Err(Refused::UnknownKey),
        };
        match verdict {
            Ok(hop) => {
                metrics::get().handoff(Handoff::Received);
                a.ctx.request.hop = Some(Box::new(hop));
                Ok(Flow::Next)
            }
            Err(reason) => Err(refuse(reason)),
        }
    }
}

pub struct HandOff;

impl Stage for HandOff {
    const NAME: &'static str = "handoff";

    /// A fleet that hands requests to the replica holding their state.
    fn serves(site: &Site<'_>, _phase: Phase) -> bool {
        site.runtime
            .fleet
            .as_ref()
            .is_some_and(|f| f.this().is_some())
    }

    async fn request(a: &mut Admission<'_>) -> Result<Flow, Rejection> {
        // Most requests: no fleet that hands requests on, none handed here.
        let handing = a.ctx.snapshot.fleet.as_ref().filter(|f| f.this().is_some());
        let Some(fleet) = handing.cloned() else {
            return Ok(Flow::Next);
        };
        if let Some(hop) = &a.ctx.request.hop {
            let body = a.ctx.request.body.as_ref().map_or(&[][..], |b| b.bytes());
            if hop::body_digest(body) != hop.body {
                return Err(refuse(Refused::BodyAltered));
            }
            // Served here, one hop at most; a session this replica does not hold (a replica
            // restarted at the address the sender knew) is gone.
            return match session_owner(a).map(|(o, _)| fleet.whose(&o)) {
                None | Some(Whose::Here) => Ok(Flow::Next),
                Some(_) => Err(Rejection::with_id(gone(), a.ctx.request_id().cloned())),
            };
        }
        let reject = |e: Miss| Rejection::with_id(e.into(), a.ctx.request_id().cloned());
        let holder = holder(a, &fleet).map_err(reject)?;
        match holder {
            None => Ok(Flow::Next),
            Some(Holder { first, holds, next }) => {
                a.ctx.request.pinned = Some(Pinned {
                    member: fleet.replica(first),
                    holds,
                });
                a.ctx.stages.handoff = Some(Box::new(State {
                    next,
                    refused: false,
                    signed: None,
                    redo: false,
                }));
                metrics::get().handoff(Handoff::Sent);
                Ok(Flow::HandOff)
            }
        }
    }

    /// The relay's last step: the request as the client sent it (the route's prefix, its
    /// token), signed for the replica holding its state.
    fn upstream_request(o: &mut Outbound<'_>) -> pingora::Result<()> {
        let Some(sessions) = o.ctx.snapshot.sessions.as_deref() else {
            return Ok(());
        };
        if o.head.headers.get(http::header::HOST).is_none() {
            // An HTTP/2 client's `:authority`, as the Host an HTTP/1.1 hop needs.
            if let Some(authority) = o.session.req_header().uri.authority() {
                let authority = authority.as_str().to_string();
                o.head.insert_header(http::header::HOST, authority)?;
            }
        }
        o.head.remove_header(hop::HEADER);
        // The owner's trace stage says whether its member gets the edge's span.
        o.head.remove_header(crate::stdio::TRACED_HEADER);
        if o.ctx.stages.trace.is_none() && o.edge.trace_context == TraceContext::Link {
            // No span of this replica's to continue, and this listener only links to a
            // client's trace: the owner (which continues what it is handed) must not
            // continue the client's.
            o.head.remove_header("traceparent");
            o.head.remove_header("tracestate");
        }
        let Some(to) = o.ctx.upstream.member().map(|m| m.addr) else {
            return Ok(());
        };
        if let Some(signature) = signed_for(o.ctx, to) {
            // The same forward again (its connection was dead): the same nonce, so the
            // replica serves it at most once, whatever reached it.
            return o.head.insert_header(hop::HEADER, signature);
        }
        let body = o.ctx.stored.bytes();
        let forward = hop::Forward {
            to,
            client: client(o),
            tls: o.edge.tls,
            body: &body,
        };
        let signature = hop::sign(&sessions.ring, o.head, forward, now_secs());
        if let Some(state) = o.ctx.stages.handoff.as_deref_mut() {
            state.signed = Some((to, signature.clone()));
        }
        o.head.insert_header(hop::HEADER, signature)
    }

    /// (relay response) The head of the answer a request handed on got: passed as it is,
    /// unless the replica refused the signed request (the fleet's key rings or clocks
    /// disagree: the client is not at fault, and gets 502).
    fn response(head: &mut ResponseHeader, ctx: &mut Ctx, _edge: &Edge) -> pingora::Result<()> {
        answered(head, ctx)
    }
}

/// The signature this request's forward to `to` already carries, if it was signed.
fn signed_for(ctx: &Ctx, to: SocketAddr) -> Option<String> {
    let (signed_to, signature) = ctx.stages.handoff.as_deref()?.signed.as_ref()?;
    (*signed_to == to).then(|| signature.clone())
}

/// Where a request handed on may go when its first choice refuses the connection.
pub struct State {
    /// A `per_principal` caller's next keepers, in order (this replica among them: through
    /// its own hand-off listener); none for a session, which only its replica holds.
    pub next: Vec<SocketAddr>,
    /// The last try's replica refused the connection (it is leaving): the next try goes to
    /// the next keeper, not to it again.
    pub refused: bool,
    /// The replica and signature of the forward (sent again, it is signed the same).
    pub signed: Option<(SocketAddr, String)>,
    /// The forward goes once more, on a new connection: its pooled one was dead.
    pub redo: bool,
}

/// A pooled connection to the replica holding the state failed before any of the answer
/// came (the replica died while it sat idle: a reset, a close): the forward may go once
/// more, to the same replica, on a new connection, signed the same (`true`). Only once,
/// and only for a forward signed already (its nonce is what makes a second copy harmless).
pub fn once_more(ctx: &mut Ctx) -> bool {
    let Some(state) = ctx.stages.handoff.as_deref_mut() else {
        return false;
    };
    if state.redo || state.signed.is_none() {
        return false;
    }
    state.redo = true;
    log::info!("a pooled hand-off connection was dead; sending the forward once more on a new one");
    true
}

/// The peer of a forward sent once more gets a connection of its own: a pool key no other
/// request has, so Pingora connects anew rather than reuse another pooled connection to a
/// replica that may be gone.
pub fn fresh_connection(ctx: &Ctx, peer: &mut pingora::prelude::HttpPeer) {
    static KEY: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    if ctx.stages.handoff.as_deref().is_some_and(|s| s.redo) {
        peer.group_key = KEY.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// The replica for another try of a caller's request: the next keeper after a refused
/// connection, else (a pooled connection found dead before anything was written) the same.
pub fn next_replica(ctx: &mut Ctx) -> Option<Arc<Member>> {
    let tried = &ctx.upstream.tried;
    let state = ctx.stages.handoff.as_deref_mut()?;
    if !std::mem::take(&mut state.refused) {
        // Once more at most, as for any member holding state.
        let last = tried.last()?;
        let tries = tried.iter().filter(|m| m.addr == last.addr).count();
        return (tries < 2).then(|| last.clone());
    }
    let fleet = ctx.snapshot.fleet.as_deref()?;
    let addr = state
        .next
        .iter()
        .find(|a| !tried.iter().any(|m| m.addr == **a))?;
    Some(fleet.replica(*addr))
}

/// The last try's replica could not be connected to (nothing of the request reached it).
pub fn refused(ctx: &mut Ctx) {
    if let Some(state) = ctx.stages.handoff.as_deref_mut() {
        state.refused = true;
    }
}

/// The replica holding the request's state, and the others it may go to.
struct Holder {
    first: SocketAddr,
    holds: Holds,
    next: Vec<SocketAddr>,
}

/// See [`HandOff`]'s relay response.
fn answered(head: &ResponseHeader, ctx: &mut Ctx) -> pingora::Result<()> {
    ctx.upstream.status = Some(head.status.as_u16());
    // The forward will not be sent again: the edge's copy of the body can go.
    ctx.stored.release();
    let refused = head.status == http::StatusCode::FORBIDDEN
        && head
            .headers
            .get(crate::error::ERROR_HEADER)
            .is_some_and(|v| v.as_bytes() == b"hop_refused");
    if !refused {
        return Ok(());
    }
    metrics::get().handoff(Handoff::Refused);
    Err(pingora::Error::because(
        pingora::ErrorType::HTTPStatus(502),
        "the replica holding the state refused the hand-off",
        EdgeError::UpstreamError {
            detail: "the replica holding the request's state refused it (hop_refused: the replicas' key rings or clocks disagree)".into(),
        },
    ))
}

/// The client as the first replica saw it.
fn client(o: &Outbound<'_>) -> Option<IpAddr> {
    super::forwarding::client_address(o.session, o.ctx)
}

/// Why a request's holder is not found: the session's replica is gone, or not known yet.
enum Miss {
    Gone,
    Unknown,
}

impl From<Miss> for EdgeError {
    fn from(m: Miss) -> EdgeError {
        match m {
            Miss::Gone => gone(),
            Miss::Unknown => EdgeError::ReplicaUnknown,
        }
    }
}

/// A session whose replica is gone (counted): 404, the client initialises again.
fn gone() -> EdgeError {
    metrics::get().token_failure(TokenFailure::MemberGone);
    EdgeError::SessionMemberGone {
        member: "the replica that held it".into(),
    }
}

/// The replica a legacy request's token names (a stdio pool's session, a bridged HTTP+SSE
/// client's stream), when it opens, and when the token was sealed. A token that does not
/// open is the legacy (or the bridge) stage's to refuse, here or there.
fn session_owner(a: &Admission<'_>) -> Option<(crate::session::Owner, u64)> {
    let request = &a.ctx.request;
    let endpoint = request.endpoint.as_ref()?;
    let pool = &endpoint.route.pool;
    if request.era != Some(Era::Legacy) {
        return None;
    }
    let kind = match (endpoint.route.bridge, endpoint.kind) {
        (true, EndpointKind::Messages) => Kind::Stream,
        (false, _) if pool.stdio.get().is_some() => Kind::Session,
        _ => return None,
    };
    let token = super::legacy::token_of(a.session.req_header(), endpoint).ok()??;
    let sessions = a.ctx.snapshot.sessions.as_deref()?;
    let max_age = sessions.max_age_secs;
    let claims = session::open_for(sessions, token, kind, max_age, &pool.name, Caller::Any).ok()?;
    Some((claims.owner?, claims.issued_at))
}

/// How long a replica can be in the fleet before every other replica has resolved it: a
/// token naming one never known that is older than this names one that left before this
/// replica looked.
fn resolvable(fleet: &Fleet) -> u64 {
    (3 * fleet.settings.interval.as_secs()).max(60)
}

/// The replica holding the request's state, when it is not this one.
fn holder(a: &Admission<'_>, fleet: &Fleet) -> Result<Option<Holder>, Miss> {
    let request = &a.ctx.request;
    let Some(endpoint) = &request.endpoint else {
        return Ok(None);
    };
    if let Some((owner, issued)) = session_owner(a) {
        return match fleet.whose(&owner) {
            Whose::Here => Ok(None),
            Whose::There(first) => Ok(Some(Holder {
                first,
                holds: Holds::ReplicaSession,
                next: Vec::new(),
            })),
            Whose::Gone => Err(Miss::Gone),
            // Too new to have been resolved here yet (the next round will), or one that left
            // before this replica looked.
            Whose::Unknown(_) if now_secs().saturating_sub(issued) <= resolvable(fleet) => {
                Err(Miss::Unknown)
            }
            Whose::Unknown(_) => Err(Miss::Gone),
        };
    }
    let Some(group) = endpoint.route.pool.stdio.get() else {
        return Ok(None);
    };
    if group.spec.isolation != Isolation::PerPrincipal {
        return Ok(None);
    }
    let principal = request.principal.as_deref();
    let binding = session::binding(a.session.req_header(), principal).unwrap_or_default();
    let Some(mut ranked) = fleet.keepers(&binding) else {
        return Ok(None);
    };
    let first = ranked.remove(0);
    Ok(Some(Holder {
        first,
        holds: Holds::ReplicaCaller,
        next: ranked,
    }))
}

fn refuse(reason: Refused) -> Rejection {
    metrics::get().hop_refused(reason);
    Rejection::with_id(
        EdgeError::HopRefused {
            reason: metrics::label(reason),
        },
        None,
    )
}
