//! `limits.max_concurrent_requests` and `limits.max_streams`: process-wide counters shared by
//! every listener, and the slots a request holds in them until its context is dropped.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use http::Method;
use pingora::http::RequestHeader;

use crate::error::EdgeError;
use crate::runtime::{EndpointKind, Limits};

/// Requests in flight and long-lived streams open.
#[derive(Clone, Default)]
pub struct Load {
    requests: Arc<AtomicUsize>,
    streams: Arc<AtomicUsize>,
}

impl Load {
    /// A slot for one more request in flight, or 503 `overloaded`.
    pub fn request(&self, limits: &Limits) -> Result<Slot, EdgeError> {
        Slot::take(&self.requests, limits.max_concurrent_requests).ok_or(EdgeError::Overloaded {
            limit: "concurrent requests",
        })
    }

    /// A slot for one more long-lived stream, or 503 `overloaded`.
    pub fn stream(&self, limits: &Limits) -> Result<Slot, EdgeError> {
        Slot::take(&self.streams, limits.max_streams)
            .ok_or(EdgeError::Overloaded { limit: "streams" })
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

/// A slot in a bounded counter, released when dropped.
pub struct Slot(Arc<AtomicUsize>);

impl Slot {
    fn take(counter: &Arc<AtomicUsize>, limit: usize) -> Option<Slot> {
        let previous = counter.fetch_add(1, Ordering::AcqRel);
        // Built before the check so that a refused take is given back on drop too.
        let slot = Slot(counter.clone());
        (previous < limit).then_some(slot)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}
