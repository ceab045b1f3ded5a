//! Outlier ejection: a member that fails `consecutive_failures` requests in a row (a refused
//! or failed connection, a 5xx it wrote, no response head in time; never a JSON-RPC error
//! inside a 200) gets no new traffic for `eject_ms`, doubled with each ejection that follows
//! (up to `max_eject_ms`), while `max_ejection_percent` of the pool at most is ejected that
//! way. A member that serves well for as long as its last ejection lasted starts again from
//! `eject_ms`. Requests pinned to it (sessions, tasks) still go there.
//!
//! A refused connection ejects at once (for `eject_ms`; [`super::Member::record_connect_failure`]),
//! since such a member cannot serve anything; an active check that passes ends that ejection
//! early. An outlier ejection ends early only on a strict `mcp` check (set in the
//! configuration), since the default check takes any HTTP answer, a 500 included.

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::time::Duration;

use super::{now_ms, Member, Pool};
use crate::metrics::{self, Ejection};

/// Why a request to a member counted against it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// A connection that could not be made (other than refused) or broke before the head.
    Connect,
    /// A 5xx the member wrote.
    ServerError,
    /// No response head within `timeouts.upstream_read_ms`.
    Timeout,
}

impl Failure {
    fn ejection(self) -> Ejection {
        match self {
            Failure::Connect => Ejection::ConnectError,
            Failure::ServerError => Ejection::ServerError,
            Failure::Timeout => Ejection::Timeout,
        }
    }
}

/// A member's record of failures and ejections.
#[derive(Debug, Default)]
pub struct Record {
    failures: AtomicU32,
    ejections: AtomicU32,
    /// The last outlier ejection's length and end (ms), to know when it has been forgiven
    /// (a check or a refused connection may change when the member is back; not this).
    last_ms: AtomicU64,
    until_ms: AtomicU64,
    /// Why the member is ejected now: [`REFUSED`] or [`OUTLIER`].
    pub(super) cause: AtomicU8,
}

pub(super) const REFUSED: u8 = 0;
pub(super) const OUTLIER: u8 = 1;

/// Does this status count against the member? 5xx but 501 and 505 (what the request asked
/// for, not how the member is).
pub fn is_failure_status(status: u16) -> bool {
    (500..600).contains(&status) && status != 501 && status != 505
}

impl Pool {
    /// A request the member served (its head below 500).
    pub fn record_success(&self, member: &Member) {
        let r = &member.outliers;
        if r.failures.load(Ordering::Relaxed) != 0 {
            r.failures.store(0, Ordering::Relaxed);
        }
        if r.ejections.load(Ordering::Relaxed) != 0 {
            let until = r.until_ms.load(Ordering::Relaxed);
            let forgiven = until.saturating_add(r.last_ms.load(Ordering::Relaxed));
            if now_ms() >= forgiven {
                r.ejections.store(0, Ordering::Relaxed);
            }
        }
    }

    /// A request the member failed; ejects it when that makes `consecutive_failures` in a row
    /// and the pool can spare it. Returns how long it is ejected.
    pub fn record_failure(&self, member: &Member, failure: Failure) -> Option<Duration> {
        let h = &self.health;
        if h.consecutive_failures == 0 || !member.is_healthy() {
            return None;
        }
        let r = &member.outliers;
        let n = r.failures.fetch_add(1, Ordering::Relaxed) + 1;
        if n < h.consecutive_failures {
            return None;
        }
        let _one_at_a_time = self.ejecting.lock().unwrap_or_else(|e| e.into_inner());
        if !member.is_healthy() {
            // Another failure ejected it meanwhile.
            return None;
        }
        if !self.may_eject() {
            log::warn!(
                "pool {}: {} failed {n} requests in a row but is not ejected: max_ejection_percent ({}) of the pool is out already, or it is the last healthy member",
                self.name,
                member.label,
                h.max_ejection_percent
            );
            return None;
        }
        r.failures.store(0, Ordering::Relaxed);
        let k = r.ejections.fetch_add(1, Ordering::Relaxed).min(20);
        let base = h.eject.as_millis() as u64;
        let ms = base
            .saturating_mul(1 << k)
            .min(h.max_eject.as_millis() as u64);
        r.last_ms.store(ms, Ordering::Relaxed);
        r.cause.store(OUTLIER, Ordering::Relaxed);
        let until = now_ms().saturating_add(ms);
        r.until_ms.store(until, Ordering::Relaxed);
        member.ejected_until_ms.store(until, Ordering::Relaxed);
        member.load.ramp_from_ms.store(until, Ordering::Relaxed);
        metrics::get().ejection(&self.name, &member.label, failure.ejection());
        log::warn!(
            "pool {}: {} ejected for {ms} ms after {n} failed requests in a row (last: {failure:?})",
            self.name,
            member.label
        );
        Some(Duration::from_millis(ms))
    }

    /// One more outlier ejection keeps a healthy member in the pool and the pool within
    /// `max_ejection_percent` (one member of a pool of two or more may always be out).
    fn may_eject(&self) -> bool {
        let members = self.members();
        let n = members.len();
        let healthy = members.iter().filter(|m| m.is_healthy()).count();
        if n < 2 || healthy < 2 {
            return false;
        }
        let ejected = members
            .iter()
            .filter(|m| m.passes_checks() && !m.is_healthy())
            .count();
        let allowed = (n * usize::from(self.health.max_ejection_percent) / 100).max(1);
        ejected < allowed
    }
}
