//! `limits.max_concurrent_requests`, `limits.max_streams` and the memory budget: process-wide
//! counters shared by every listener, and the slots a request holds until its context drops.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use http::Method;
use pingora::http::RequestHeader;

use crate::budget::{Budget, Holder, Reservation, STREAM_COST};
use crate::error::EdgeError;
use crate::runtime::{EndpointKind, Limits};

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
        slot.room = Some(room.ok_or(EdgeError::Overloaded {
            limit: "memory budget",
        })?);
        Ok(slot)
    }
}

/// Is this request a long-lived stream (counted against `limits.max_streams`)?
pub fn is_stream(req: &RequestHeader, kind: EndpointKind, method: &str) -> bool {
    match kind {
        EndpointKind::SseStream => true,
        EndpointKind::Streamable if req.method == Method::GET => true,
        _ => method == "subscriptions/listen",
    }
}

/// A slot in a bounded counter (and, for streams, its memory), released when dropped.
pub struct Slot {
    counter: Arc<AtomicUsize>,
    room: Option<Reservation>,
}

impl Slot {
    /// A stream's slot: it holds a stream's memory in the budget.
    pub fn is_stream(&self) -> bool {
        self.room.is_some()
    }

    fn take(counter: &Arc<AtomicUsize>, limit: usize) -> Option<Slot> {
        let previous = counter.fetch_add(1, Ordering::AcqRel);
        // Built before the check so that a refused take is given back on drop too.
        let slot = Slot {
            counter: counter.clone(),
            room: None,
        };
        (previous < limit).then_some(slot)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.counter.fetch_sub(1, Ordering::AcqRel);
    }
}
