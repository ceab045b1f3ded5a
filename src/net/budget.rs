//! The memory budget: one bound on what clients can make the edge hold — open connections,
//! buffered request bodies and long-lived streams — so that a replica under hostile load stays
//! inside its container's memory limit instead of meeting the OOM killer.
//!
//! Every holder takes a [`Reservation`] (released on drop) before it grows. When the budget is
//! full the edge pushes back instead of growing: it first closes the oldest *stalled* holders
//! (connections still sending their first request head, uploads that stopped making progress,
//! kept-alive connections between requests),
//! then refuses the new work (a connection is closed; a body or stream gets 503 `overloaded`
//! with `Retry-After`). Well-behaved requests finish in milliseconds, so they are rarely the
//! oldest stalled holders.
//!
//! Costs are estimates, measured on Pingora 0.9.1 (docs/security.md): a connection inside
//! Pingora's HTTP session ≈ 45 KiB, an idle event stream ≈ 70 KiB with its connection, a body
//! its bytes.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use tokio::sync::Notify;

use crate::metrics;
pub use crate::metrics::{Eviction, Holder};

/// What a client connection costs from accept to close (Pingora's HTTP session state, the
/// task, socket buffers): measured at about 45 KiB per stalled head.
pub const CONNECTION_COST: usize = 48 * 1024;
/// What an open long-lived stream costs besides its connection (the upstream connection, the
/// response body buffer): a whole idle stream measures about 70 KiB (docs/benchmarks.md, P4),
/// of which about 45 KiB is its client connection, already counted as such.
pub const STREAM_COST: usize = 32 * 1024;
/// What a TLS handshake holds besides its connection, until it completes: rustls joins a
/// handshake message of up to 64 KiB while Pingora's read buffer holds as much. Measured (the
/// debug binary, 1,000 connections each): a ClientHello claiming 64 KiB and stalled after
/// 48 KiB, 131 KB per connection; a TLS connection stalled in its first head after the
/// handshake, 39 KB (a plain one: 20 KB).
pub const TLS_HANDSHAKE_COST: usize = 96 * 1024;
/// A holder counts as stalled once it has made no progress for this long.
const STALLED_AFTER: Duration = Duration::from_millis(500);
/// How long work waits for the room closed holders give back before it is refused.
const ROOM_WAIT: Duration = Duration::from_millis(250);

/// The process-wide budget: bytes reserved, and the holders that may be closed for room.
#[derive(Default)]
pub struct Budget {
    used: AtomicUsize,
    /// The limit in force (from the runtime snapshot; a reload may change it).
    limit: AtomicUsize,
    /// Holders that may be closed for room, by registration number: oldest first.
    stalled: Mutex<BTreeMap<u64, Arc<Candidate>>>,
    next_id: AtomicU64,
    /// Signalled whenever a reservation is given back.
    released: Notify,
}

/// A holder that may be closed to make room, while it is stalled.
pub struct Candidate {
    kind: Eviction,
    since: Instant,
    /// Milliseconds since `since` of the last progress.
    progress_ms: AtomicU64,
    evicted: Notify,
    gone: std::sync::atomic::AtomicBool,
    /// Serving a request: never closed for room.
    busy: std::sync::atomic::AtomicBool,
}

impl Candidate {
    /// A request started on this holder (a kept-alive connection): not a candidate until
    /// [`Candidate::idle`].
    pub fn busy(&self) {
        self.busy.store(true, Ordering::Relaxed);
    }

    /// The request ended: the holder is idle from now on.
    pub fn idle(&self) {
        self.progressed();
        self.busy.store(false, Ordering::Relaxed);
    }

    /// The holder made progress (bytes arrived): not stalled for a while.
    pub fn progressed(&self) {
        let ms = self.since.elapsed().as_millis() as u64;
        self.progress_ms.store(ms, Ordering::Relaxed);
    }

    /// Resolves when the budget needs this holder's room: close it.
    pub async fn evicted(&self) {
        self.evicted.notified().await
    }

    fn is_stalled(&self, now: Instant) -> bool {
        if self.busy.load(Ordering::Relaxed) {
            return false;
        }
        let last = self.since + Duration::from_millis(self.progress_ms.load(Ordering::Relaxed));
        now.saturating_duration_since(last) >= STALLED_AFTER
    }
}

/// A registration as a candidate; unregisters on drop.
pub struct Watch {
    budget: Arc<Budget>,
    id: u64,
    candidate: Arc<Candidate>,
}

impl Watch {
    pub fn candidate(&self) -> &Candidate {
        &self.candidate
    }

    /// The budget told this holder to close (and it has not waited for it yet).
    pub fn is_evicted(&self) -> bool {
        futures::FutureExt::now_or_never(self.candidate.evicted()).is_some()
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.candidate.gone.store(true, Ordering::Relaxed);
        if let Ok(mut list) = self.budget.stalled.lock() {
            list.remove(&self.id);
        }
    }
}

/// Bytes held against the budget until dropped.
pub struct Reservation {
    budget: Arc<Budget>,
    bytes: usize,
    holder: Holder,
}

impl Reservation {
    /// Take `more` bytes on top of this reservation (a body growing), closing stalled holders
    /// for room if needed; false when the budget has no room (the refusal is counted).
    pub async fn grow(&mut self, more: usize) -> bool {
        if !self.budget.acquire(self.holder, more).await {
            return false;
        }
        self.bytes += more;
        true
    }
}

impl Reservation {
    /// Make this reservation exactly `bytes` without waiting (a rewrite's buffer as it grows
    /// and empties): false, and unchanged, when growing does not fit (the refusal is counted).
    pub fn try_fit(&mut self, bytes: usize) -> bool {
        if bytes == self.bytes {
            return true;
        }
        if bytes > self.bytes {
            if !self.budget.take(bytes - self.bytes) {
                metrics::get().budget_refusal(self.holder);
                return false;
            }
        } else {
            self.budget
                .used
                .fetch_sub(self.bytes - bytes, Ordering::AcqRel);
            self.budget.released.notify_waiters();
        }
        self.bytes = bytes;
        metrics::get().budget_used(self.budget.used());
        true
    }
}

/// A bridged HTTP+SSE stream's queue is counted here (see `session/streams.rs`).
impl crate::session::streams::Room for Reservation {
    fn fit(&mut self, bytes: usize) -> bool {
        self.try_fit(bytes)
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.budget.used.fetch_sub(self.bytes, Ordering::AcqRel);
        metrics::get().budget_used(self.budget.used());
        self.budget.released.notify_waiters();
    }
}

impl Budget {
    pub fn new(limit: usize) -> Arc<Budget> {
        let budget = Budget::default();
        budget.set_limit(limit);
        Arc::new(budget)
    }

    pub fn set_limit(&self, limit: usize) {
        self.limit.store(limit, Ordering::Relaxed);
        metrics::get().budget_limit(limit);
    }

    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    fn take(&self, bytes: usize) -> bool {
        let limit = self.limit.load(Ordering::Relaxed);
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                (used + bytes <= limit).then_some(used + bytes)
            })
            .is_ok()
    }

    /// Reserve `bytes` for `holder`, closing stalled holders for room if needed; `None` when
    /// even that leaves too little (the caller refuses the work; the refusal is counted).
    pub async fn reserve(self: &Arc<Self>, holder: Holder, bytes: usize) -> Option<Reservation> {
        if !self.acquire(holder, bytes).await {
            return None;
        }
        Some(Reservation {
            budget: self.clone(),
            bytes,
            holder,
        })
    }

    /// Count `bytes` that are held already, whether or not they fit (an event stream the
    /// upstream chose to answer with): later work sees the budget as it is.
    pub fn force(self: &Arc<Self>, holder: Holder, bytes: usize) -> Reservation {
        self.used.fetch_add(bytes, Ordering::AcqRel);
        metrics::get().budget_used(self.used());
        Reservation {
            budget: self.clone(),
            bytes,
            holder,
        }
    }

    /// Take `bytes`; when they do not fit, close stalled holders and wait briefly for the
    /// room they give back.
    async fn acquire(&self, holder: Holder, bytes: usize) -> bool {
        if self.take(bytes) {
            metrics::get().budget_used(self.used());
            return true;
        }
        let deadline = tokio::time::Instant::now() + ROOM_WAIT;
        self.evict_for(bytes);
        loop {
            let released = self.released.notified();
            if self.take(bytes) {
                metrics::get().budget_used(self.used());
                return true;
            }
            if tokio::time::timeout_at(deadline, released).await.is_err() {
                metrics::get().budget_refusal(holder);
                return false;
            }
        }
    }

    /// Register a holder that may be closed while it is stalled.
    pub fn watch(self: &Arc<Self>, kind: Eviction) -> Watch {
        let candidate = Arc::new(Candidate {
            kind,
            since: Instant::now(),
            progress_ms: AtomicU64::new(0),
            evicted: Notify::new(),
            gone: std::sync::atomic::AtomicBool::new(false),
            busy: std::sync::atomic::AtomicBool::new(false),
        });
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut list) = self.stalled.lock() {
            list.insert(id, candidate.clone());
        }
        Watch {
            budget: self.clone(),
            id,
            candidate,
        }
    }

    /// Tell the oldest stalled holders, enough of them to cover `bytes`, to close: their
    /// reservations come back as their tasks end.
    fn evict_for(&self, bytes: usize) {
        let now = Instant::now();
        let wanted = bytes.div_ceil(CONNECTION_COST).clamp(1, 64);
        let victims: Vec<Arc<Candidate>> = match self.stalled.lock() {
            Ok(mut list) => {
                // Registration numbers grow: the map's order is oldest first.
                let picked: Vec<u64> = list
                    .iter()
                    .filter(|(_, c)| c.is_stalled(now))
                    .map(|(id, _)| *id)
                    .take(wanted)
                    .collect();
                picked.iter().filter_map(|id| list.remove(id)).collect()
            }
            Err(_) => Vec::new(),
        };
        for victim in victims {
            if !victim.gone.load(Ordering::Relaxed) {
                metrics::get().eviction(victim.kind);
                victim.evicted.notify_one();
            }
        }
    }
}

/// The budget for a container whose memory limit is `limit_bytes`: half of it, leaving the
/// rest for the process itself, Pingora's per-request state the budget does not count, and
/// allocator slack (freed pages are returned to the system after a delay).
pub fn from_container_limit(limit_bytes: u64) -> usize {
    (limit_bytes / 2) as usize
}

/// The container's memory limit (cgroup v2 `memory.max`, else cgroup v1), if there is one.
pub fn container_limit() -> Option<u64> {
    let read = |p: &str| std::fs::read_to_string(p).ok();
    let value = read("/sys/fs/cgroup/memory.max")
        .or_else(|| read("/sys/fs/cgroup/memory/memory.limit_in_bytes"))?;
    let bytes = value.trim().parse::<u64>().ok()?;
    // cgroup v1 reports "no limit" as a huge number.
    (bytes < (1 << 60)).then_some(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn reservations_come_back_when_dropped() {
        let budget = Budget::new(100 * 1024);
        let a = budget.reserve(Holder::Body, 60 * 1024).await;
        assert!(a.is_some());
        assert_eq!(budget.used(), 60 * 1024);
        assert!(
            budget.reserve(Holder::Body, 60 * 1024).await.is_none(),
            "nothing stalled to close: refused"
        );
        drop(a);
        assert_eq!(budget.used(), 0);
        let mut b = budget.reserve(Holder::Body, 0).await.unwrap();
        assert!(b.grow(100 * 1024).await);
        assert!(!b.grow(1).await, "past the limit");
    }

    #[tokio::test(start_paused = true)]
    async fn the_oldest_stalled_holder_is_closed_for_room() {
        let budget = Budget::new(2 * CONNECTION_COST);
        let old = budget.watch(Eviction::StalledHead);
        let old_room = budget.reserve(Holder::Connection, CONNECTION_COST).await;
        tokio::time::advance(Duration::from_millis(100)).await;
        let young = budget.watch(Eviction::StalledHead);
        let young_room = budget.reserve(Holder::Connection, CONNECTION_COST).await;
        // Both stall; the young one then makes progress.
        tokio::time::advance(STALLED_AFTER + Duration::from_millis(50)).await;
        young.candidate().progressed();
        let closer = {
            let budget = budget.clone();
            tokio::spawn(async move { budget.reserve(Holder::Connection, CONNECTION_COST).await })
        };
        // The old holder is told to close, and gives its room back.
        tokio::time::timeout(Duration::from_secs(1), old.candidate().evicted())
            .await
            .expect("the oldest stalled holder was not closed");
        drop(old_room);
        drop(old);
        assert!(
            closer.await.unwrap().is_some(),
            "the room was not handed on"
        );
        drop((young, young_room));
    }
}
