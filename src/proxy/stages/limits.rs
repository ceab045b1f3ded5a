//! `limits.max_concurrent_requests`, `limits.max_streams` and the memory budget: process-wide
//! counters shared by every listener, and the slots a request holds until its context drops.
//!
//! - [`Requests`] (first of all): a slot in `max_concurrent_requests`, else 503 `overloaded`.
//! - [`Streams`] (once the body named the method): a long-lived stream (`subscriptions/listen`,
//!   a legacy GET stream) takes a slot in `max_streams` and its memory in the budget; a POST
//!   the member answers with an event stream has its memory counted when the answer starts.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use http::Method;
use pingora::http::{RequestHeader, ResponseHeader};

use crate::error::{EdgeError, Rejection};
use crate::net::budget::{Budget, Holder, Reservation, STREAM_COST};
use crate::proxy::ctx::Ctx;
use crate::proxy::edge::Edge;
use crate::proxy::stage::{Admission, Flow, Stage};
use crate::runtime::{EndpointKind, Limits};

/// The slots and memory one request holds (given back when its context drops).
#[derive(Default)]
pub struct State {
    request: Option<Slot>,
    stream: Option<Slot>,
    /// A response event stream's memory, when the request took no stream slot.
    stream_room: Option<Reservation>,
}

impl State {
    /// The request is a long-lived stream (it holds a slot in `limits.max_streams`): its
    /// operation is opening the stream, over once the member's head arrives.
    pub fn long_lived(&self) -> bool {
        self.stream.is_some()
    }
}

pub struct Requests;

impl Stage for Requests {
    const NAME: &'static str = "requests";

    async fn request(a: &mut Admission<'_>) -> Result<Flow, Rejection> {
        let slot = a.edge.load.request(&a.ctx.snapshot.limits);
        a.ctx.stages.limits.request = Some(slot?);
        Ok(Flow::Next)
    }
}

pub struct Streams;

impl Stage for Streams {
    const NAME: &'static str = "streams";

    async fn request(a: &mut Admission<'_>) -> Result<Flow, Rejection> {
        let Some(endpoint) = &a.ctx.request.endpoint else {
            return Ok(Flow::Next);
        };
        if !is_stream(a.session.req_header(), endpoint.kind, a.ctx.labels.method) {
            return Ok(Flow::Next);
        }
        let slot = a.edge.load.stream(&a.ctx.snapshot.limits).await;
        let slot = slot.map_err(|e| Rejection::with_id(e, a.ctx.request_id().cloned()))?;
        a.ctx.stages.limits.stream = Some(slot);
        Ok(Flow::Next)
    }

    fn response(_head: &mut ResponseHeader, ctx: &mut Ctx, edge: &Edge) -> pingora::Result<()> {
        let limits = &mut ctx.stages.limits;
        if ctx.response.is_event_stream() && limits.stream.is_none() && limits.stream_room.is_none()
        {
            // A POST answered with an event stream lives as long as the upstream keeps it:
            // count what it holds.
            limits.stream_room = Some(edge.load.budget.force(Holder::Stream, STREAM_COST));
        }
        Ok(())
    }
}

/// Requests in flight, long-lived streams open, and the memory budget.
#[derive(Clone)]
pub struct Load {
    requests: Arc<AtomicUsize>,
    streams: Arc<AtomicUsize>,
    pub budget: Arc<Budget>,
}

impl Load {
    pub fn new(budget: Arc<Budget>) -> Load {
        Load {
            requests: Arc::default(),
            streams: Arc::default(),
            budget,
        }
    }

    /// A slot for one more request in flight, or 503 `overloaded`.
    pub fn request(&self, limits: &Limits) -> Result<Slot, EdgeError> {
        Slot::take(&self.requests, limits.max_concurrent_requests).ok_or(EdgeError::Overloaded {
            limit: "concurrent requests",
        })
    }

    /// A slot for one more long-lived stream and the memory it holds, or 503 `overloaded`.
    pub async fn stream(&self, limits: &Limits) -> Result<Slot, EdgeError> {
        let mut slot = Slot::take(&self.streams, limits.max_streams)
            .ok_or(EdgeError::Overloaded { limit: "streams" })?;
        let room = self.budget.reserve(Holder::Stream, STREAM_COST).await;
        slot._room = Some(room.ok_or(EdgeError::Overloaded {
            limit: "memory budget",
        })?);
        Ok(slot)
    }
}

/// Is this request a long-lived stream (counted against `limits.max_streams`)?
fn is_stream(req: &RequestHeader, kind: EndpointKind, method: &str) -> bool {
    match kind {
        EndpointKind::SseStream => true,
        EndpointKind::Streamable if req.method == Method::GET => true,
        _ => method == "subscriptions/listen",
    }
}

/// A slot in a bounded counter (and, for streams, its memory), released when dropped.
pub struct Slot {
    counter: Arc<AtomicUsize>,
    /// Held while the slot is (dropped with it).
    _room: Option<Reservation>,
}

impl Slot {
    fn take(counter: &Arc<AtomicUsize>, limit: usize) -> Option<Slot> {
        let previous = counter.fetch_add(1, Ordering::AcqRel);
        // Built before the check so that a refused take is given back on drop too.
        let slot = Slot {
            counter: counter.clone(),
            _room: None,
        };
        (previous < limit).then_some(slot)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.counter.fetch_sub(1, Ordering::AcqRel);
    }
}
