//! The edge's load, shared by every listener: requests in flight within
//! `limits.max_concurrent_requests`, long-lived streams within `limits.max_streams` (each
//! with its memory in the budget), and the slots a request holds in them, given back when
//! dropped. The `limits` stages take them (`proxy/stages/limits.rs`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use super::budget::{Budget, Holder, Reservation, STREAM_COST};
use crate::error::EdgeError;
use crate::runtime::Limits;

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
