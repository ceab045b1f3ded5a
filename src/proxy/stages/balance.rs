//! `balance`: room on a member for the request, by its pool's policy and limits
//! (`routing/balance.rs`), and what the member's answer says of the member (outlier
//! ejection, `routing/outliers.rs`).
//!
//! - admitted (once every request stage let the request through to a member): room at once,
//!   or after waiting in the pool's queue. A client that leaves while it waits ends the wait
//!   and the request never reaches a member; a full queue or a wait that runs out is 503
//!   `pool_busy` with `Retry-After`, and nothing reached a member either. A request pinned to
//!   a member (a session's, a task's) waits for that member.
//! - upstream_peer (`proxy/upstream.rs`): the member reserved here ([`reserved`]); a try
//!   after a failed connection takes room on another ([`retry`], waiting up to `queue_ms`
//!   without watching the client, which cannot be read then).
//! - response: the member's status, for its record; logging: a try that ended without a
//!   head (a timeout, a broken connection).
//!
//! The room is given back (or passed to the first waiter) when the request's context drops.
//! A request handed to the replica holding its state takes no room here: that replica's
//! own balancing decides.

use std::sync::Arc;
use std::time::{Duration, Instant};

use pingora::http::ResponseHeader;
use pingora::proxy::Session;

use crate::error::{EdgeError, ErrorKind, Rejection};
use crate::metrics::{self, balance::Rejection as Refused};
use crate::proxy::ctx::Ctx;
use crate::proxy::edge::Edge;
use crate::proxy::stage::{Admission, Flow, Stage};
use crate::routing::balance::{Acquired, Kind, Slot, Ticket, Want};
use crate::routing::outliers::{is_failure_status, Failure};
use crate::routing::{Member, Pool};

pub struct Balance;

/// The room the request holds, and whether its member's record has this try yet.
#[derive(Default)]
pub struct State {
    slot: Option<Slot>,
    judged: bool,
}

impl Stage for Balance {
    const NAME: &'static str = "balance";

    async fn admitted(a: &mut Admission<'_>) -> Result<Flow, Rejection> {
        if a.ctx.handed_off() {
            return Ok(Flow::Next);
        }
        let Some(route) = a.ctx.route().cloned() else {
            return Ok(Flow::Next);
        };
        let pool = &route.pool;
        let (kind, replicas) = (kind(a.ctx), replicas(a.ctx));
        let acquired = match &a.ctx.request.pinned {
            Some(p) => pool.acquire(Want::Pinned(&p.member), kind, replicas),
            None => pool.acquire(Want::Any(&[]), kind, replicas),
        };
        let slot = match acquired {
            Acquired::Slot(slot) => slot,
            Acquired::Queued(ticket) => match wait(a, pool, ticket).await? {
                Some(slot) => slot,
                // Gone while it waited: nothing to answer, nothing sent.
                None => return Ok(Flow::Written),
            },
            Acquired::QueueFull => {
                metrics::get().pool_rejection(&pool.name, Refused::QueueFull);
                return Err(busy(a.ctx, pool, Duration::ZERO));
            }
            // No member to wait for: choosing the member answers as it always has.
            Acquired::AllTried | Acquired::NoneHealthy => return Ok(Flow::Next),
        };
        a.ctx.stages.balance.slot = Some(slot);
        Ok(Flow::Next)
    }

    fn response(head: &mut ResponseHeader, ctx: &mut Ctx, _edge: &Edge) -> pingora::Result<()> {
        let status = head.status.as_u16();
        if status < 200 {
            return Ok(());
        }
        let failed = is_failure_status(status).then_some(Failure::ServerError);
        judge(ctx, failed);
        Ok(())
    }

    fn logging(_session: &Session, ctx: &mut Ctx) {
        if ctx.stages.balance.judged || ctx.client_closed {
            return;
        }
        let failure = match ctx.error.as_ref().map(EdgeError::kind) {
            Some(ErrorKind::UpstreamTimeout) => Failure::Timeout,
            Some(ErrorKind::UpstreamError) => Failure::Connect,
            _ => return,
        };
        judge(ctx, Some(failure));
    }
}

/// The member's record gets the try's outcome (once; only for a member of the route's pool
/// that this replica chose).
fn judge(ctx: &mut Ctx, failure: Option<Failure>) {
    let state = &mut ctx.stages.balance;
    let Some(slot) = &state.slot else {
        return;
    };
    if state.judged {
        return;
    }
    state.judged = true;
    let Some(route) = ctx.request.endpoint.as_ref().map(|e| &e.route) else {
        return;
    };
    let member = slot.member();
    match failure {
        None => route.pool.record_success(member),
        Some(f) => {
            route.pool.record_failure(member, f);
        }
    }
}

/// What the request counts as on its member.
fn kind(ctx: &Ctx) -> Kind {
    match ctx.stages.limits.long_lived() {
        true => Kind::Stream,
        false => Kind::Request,
    }
}

/// The live replicas sharing a fleet-wide limit.
fn replicas(ctx: &Ctx) -> usize {
    ctx.snapshot.fleet.as_ref().map_or(1, |f| f.live())
}

fn busy(ctx: &Ctx, pool: &Pool, waited: Duration) -> Rejection {
    let error = EdgeError::PoolBusy {
        pool: pool.name.clone(),
        waited_ms: waited.as_millis() as u64,
    };
    Rejection::with_id(error, ctx.request_id().cloned())
}

/// Wait in the pool's queue for room, while the client stays (`None`: it left; its
/// connection is not kept).
async fn wait(
    a: &mut Admission<'_>,
    pool: &Pool,
    mut ticket: Ticket,
) -> Result<Option<Slot>, Rejection> {
    let started = Instant::now();
    // The body was read whole: the connection can be watched for the client leaving.
    let watch = a.session.is_body_done();
    let session = &mut *a.session;
    let outcome = tokio::select! {
        slot = ticket.granted() => slot.ok_or(Refused::QueueTimeout),
        () = tokio::time::sleep(pool.balance.queue_wait) => Err(Refused::QueueTimeout),
        () = left(session), if watch => Err(Refused::ClientGone),
    };
    drop(ticket);
    let waited = started.elapsed();
    metrics::get().queue_wait(&pool.name, waited.as_secs_f64());
    a.ctx.upstream.queued = Some(waited);
    match outcome {
        Ok(slot) => Ok(Some(slot)),
        Err(reason) => {
            metrics::get().pool_rejection(&pool.name, reason);
            if reason == Refused::ClientGone {
                // Not an error: how a client gives up. No answer, and no keep-alive after a
                // read that may have taken a byte of what it sent next.
                a.session.downstream_session.set_keepalive(None);
                a.ctx.client_closed = true;
                return Ok(None);
            }
            Err(busy(a.ctx, pool, waited))
        }
    }
}

/// Resolves when the client closes (or breaks) its connection or stream. Bytes after the
/// request would be a pipelined request, which Pingora refuses the same way while proxying.
async fn left(session: &mut Session) {
    if session
        .downstream_session
        .read_body_or_idle(true)
        .await
        .is_err()
    {
        return;
    }
    std::future::pending::<()>().await
}

/// The member reserved for the request, when it has not been tried yet.
pub fn reserved(ctx: &Ctx) -> Option<Arc<Member>> {
    let member = ctx.stages.balance.slot.as_ref()?.member();
    let tried = ctx.upstream.tried.iter().any(|t| Arc::ptr_eq(t, member));
    (!tried).then(|| member.clone())
}

/// Where a try after a failed one goes.
pub enum Retry {
    Member(Arc<Member>),
    /// Every healthy member was tried.
    AllTried,
    NoneHealthy,
    /// Every untried member stayed full.
    Busy(EdgeError),
}

/// Room on a member this request has not tried (the room on the failed one given back).
pub async fn retry(ctx: &mut Ctx, pool: &Pool) -> Retry {
    drop(ctx.stages.balance.slot.take());
    ctx.stages.balance.judged = false;
    let acquired = pool.acquire(Want::Any(&ctx.upstream.tried), kind(ctx), replicas(ctx));
    let slot = match acquired {
        Acquired::Slot(slot) => slot,
        Acquired::AllTried => return Retry::AllTried,
        Acquired::NoneHealthy => return Retry::NoneHealthy,
        Acquired::QueueFull => {
            metrics::get().pool_rejection(&pool.name, Refused::QueueFull);
            return Retry::Busy(busy(ctx, pool, Duration::ZERO).error);
        }
        Acquired::Queued(mut ticket) => {
            let started = Instant::now();
            let granted = tokio::time::timeout(pool.balance.queue_wait, ticket.granted()).await;
            drop(ticket);
            metrics::get().queue_wait(&pool.name, started.elapsed().as_secs_f64());
            match granted {
                Ok(Some(slot)) => slot,
                _ => {
                    metrics::get().pool_rejection(&pool.name, Refused::QueueTimeout);
                    return Retry::Busy(busy(ctx, pool, started.elapsed()).error);
                }
            }
        }
    };
    let member = slot.member().clone();
    ctx.stages.balance.slot = Some(slot);
    Retry::Member(member)
}
