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
//!   hashing picks for the caller. The request is pinned to that replica
//!   (`ctx.request.pinned`) and the stages after this one run there, not here.
//! - Out (the relay, `proxy/pipeline.rs`): the request as the client sent it, signed; the
//!   answer, event streams included, comes back as the owner wrote it. Never sent twice
//!   (`proxy/upstream.rs`): a forward that may have been read is not retried.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use crate::error::{EdgeError, Rejection};
use crate::fleet::handoff::Whose;
use crate::fleet::hop::{self, Refused};
use crate::fleet::Fleet;
use crate::mcp::rules::Era;
use crate::metrics::{self, Handoff, TokenFailure};
use crate::proxy::ctx::{Ctx, Holds, Pinned};
use crate::proxy::stage::{Admission, Flow, Outbound, Stage};
use crate::routing::Member;
use crate::runtime::EndpointKind;
use crate::session::{self, token::now_secs, Caller, Kind};
use crate::stdio::Isolation;

pub struct Arrival;

impl Stage for Arrival {
    const NAME: &'static str = "arrival";

    async fn request(a: &mut Admission<'_>) -> Result<Flow, Rejection> {
        if !a.edge.handoff {
            return Ok(Flow::Next);
        }
        let verdict = match a.ctx.snapshot.sessions.as_deref() {
            Some(s) => hop::verify(&s.ring, a.session.req_header(), now_secs()),
            None => Err(Refused::UnknownKey),
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

    async fn request(a: &mut Admission<'_>) -> Result<Flow, Rejection> {
        if let Some(hop) = &a.ctx.request.hop {
            let body = a.ctx.request.body.as_ref().map_or(&[][..], |b| b.bytes());
            if hop::body_digest(body) != hop.body {
                return Err(refuse(Refused::BodyAltered));
            }
            return Ok(Flow::Next);
        }
        let Some(fleet) = a.ctx.snapshot.fleet.clone() else {
            return Ok(Flow::Next);
        };
        if fleet.this().is_none() {
            return Ok(Flow::Next);
        }
        let reject = |e| Rejection::with_id(e, a.ctx.request_id().cloned());
        match holder(a, &fleet).map_err(reject)? {
            None => Ok(Flow::Next),
            Some(Holder { first, holds, next }) => {
                a.ctx.request.pinned = Some(Pinned {
                    member: fleet.replica(first),
                    holds,
                });
                a.ctx.stages.handoff = Some(Box::new(State { next }));
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
        let client = client(o);
        let body = o.ctx.stored.bytes();
        let signature = hop::sign(
            &sessions.ring,
            o.head,
            client,
            o.edge.tls,
            &body,
            now_secs(),
        );
        o.head.insert_header(hop::HEADER, signature)
    }
}

/// Where a request handed on may go when its first choice refuses the connection.
pub struct State {
    /// A `per_principal` caller's next keepers, in order (this replica among them: through
    /// its own hand-off listener); none for a session, which only its replica holds.
    pub next: Vec<SocketAddr>,
}

/// The next replica for a request whose tries so far refused the connection.
pub fn next_replica(ctx: &Ctx, tried: &[Arc<Member>]) -> Option<Arc<Member>> {
    let state = ctx.stages.handoff.as_deref()?;
    let fleet = ctx.snapshot.fleet.as_deref()?;
    let addr = state
        .next
        .iter()
        .find(|a| !tried.iter().any(|m| m.addr == **a))?;
    Some(fleet.replica(*addr))
}

/// The replica holding the request's state, and the others it may go to.
struct Holder {
    first: SocketAddr,
    holds: Holds,
    next: Vec<SocketAddr>,
}

/// The client as the first replica saw it.
fn client(o: &Outbound<'_>) -> Option<IpAddr> {
    super::forwarding::client_address(o.session, o.ctx)
}

/// The replica holding the request's state, when it is not this one.
fn holder(a: &Admission<'_>, fleet: &Fleet) -> Result<Option<Holder>, EdgeError> {
    let request = &a.ctx.request;
    let Some(endpoint) = &request.endpoint else {
        return Ok(None);
    };
    let pool = &endpoint.route.pool;
    let Some(group) = pool.stdio.get() else {
        return Ok(None);
    };
    let bridged_route = endpoint.route.bridge && endpoint.kind == EndpointKind::Streamable;
    if request.era == Some(Era::Legacy) && !bridged_route {
        let req = a.session.req_header();
        // A token that does not open is the legacy stage's to refuse, here or there.
        if let (Ok(Some(token)), Some(sessions)) = (
            super::legacy::token_of(req, endpoint),
            a.ctx.snapshot.sessions.as_deref(),
        ) {
            let max_age = sessions.max_age_secs;
            let opened = session::open_for(
                sessions,
                token,
                Kind::Session,
                max_age,
                &pool.name,
                Caller::Any,
            );
            if let Some(owner) = opened.ok().and_then(|c| c.owner) {
                return match fleet.whose(&owner) {
                    Whose::Here => Ok(None),
                    Whose::There(first) => Ok(Some(Holder {
                        first,
                        holds: Holds::ReplicaSession,
                        next: Vec::new(),
                    })),
                    Whose::Gone => {
                        metrics::get().token_failure(TokenFailure::MemberGone);
                        Err(EdgeError::SessionMemberGone {
                            member: format!("replica {}", owner.addr),
                        })
                    }
                };
            }
            return Ok(None);
        }
    }
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
