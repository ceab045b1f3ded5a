//! `limits.max_concurrent_requests`, `limits.max_streams` and the memory budget: the slots a
//! request holds in the process-wide counters every listener shares ([`crate::net::load`])
//! until its context drops.
//!
//! - [`Requests`] (first of all): a slot in `max_concurrent_requests`, else 503 `overloaded`.
//! - [`Streams`] (once the body named the method): a long-lived stream (`subscriptions/listen`,
//!   a legacy GET stream) takes a slot in `max_streams` and its memory in the budget; a POST
//!   the member answers with an event stream has its memory counted when the answer starts.

use http::Method;
use pingora::http::{RequestHeader, ResponseHeader};

use crate::error::Rejection;
use crate::net::budget::{Holder, Reservation, STREAM_COST};
use crate::net::load::Slot;
use crate::proxy::ctx::Ctx;
use crate::proxy::edge::Edge;
use crate::proxy::stage::{Admission, Flow, Stage};
use crate::runtime::EndpointKind;

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

/// Is this request a long-lived stream (counted against `limits.max_streams`)?
fn is_stream(req: &RequestHeader, kind: EndpointKind, method: &str) -> bool {
    match kind {
        EndpointKind::SseStream => true,
        EndpointKind::Streamable if req.method == Method::GET => true,
        _ => method == "subscriptions/listen",
    }
}
