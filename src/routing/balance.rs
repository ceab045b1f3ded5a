//! How a pool spreads requests over its members, and how much it gives each one.
//!
//! - **Policy** (`balance`): `round_robin` (the default) takes the members in turn;
//!   `least_request` takes the one with the fewest requests in flight for its weight (all
//!   members compared in a pool of up to [`SCAN_ALL`], the better of two at random above:
//!   Envoy's and linkerd's power of two choices). Static members may carry a `weight`.
//! - **Per-member limits**: with `max_in_flight` (requests) or `max_streams_per_member`
//!   (long-lived streams, counted apart) a member never holds more than that; a request that
//!   finds every eligible member full waits in the pool's FIFO [`Queue`] (`queue_depth`,
//!   `queue_ms`). A slot a request gives back goes straight to the first waiter that can use
//!   it, so newcomers never overtake the queue. With `limits_scope = "fleet"` each replica
//!   holds the limit divided by the live replicas.
//! - **Slow start** (`slow_start_ms`): a member that joined, or came back from an ejection
//!   or failed checks, gets a share that grows linearly from 10 % to its whole weight.
//! - Outlier ejection lives with health ([`super::Member::record_failure`]).
//!
//! Requests pinned to a member (a legacy session's, a task's) go there whatever the policy:
//! they only wait for room on it.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;

use super::{now_ms, Member};

mod queue;

use queue::Waiter;
pub use queue::{Queue, Slot, Ticket};

/// Pools this small compare every member for `least_request`; larger ones two at random.
pub const SCAN_ALL: usize = 8;
/// The smallest share of a member in slow start (of its weight).
const RAMP_FLOOR: f32 = 0.1;

/// `balance`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Policy {
    #[default]
    RoundRobin,
    LeastRequest,
}

/// `limits_scope`: whose limit `max_in_flight` and `max_streams_per_member` are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Scope {
    /// Each replica's own.
    #[default]
    Replica,
    /// The fleet's: each replica holds its share (the limit divided by the live replicas).
    Fleet,
}

/// A pool's balancing settings.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Settings {
    pub policy: Policy,
    pub max_in_flight: Option<u32>,
    pub max_streams: Option<u32>,
    pub queue_depth: usize,
    pub queue_wait: Duration,
    pub scope: Scope,
    pub slow_start: Duration,
}

impl Settings {
    /// This replica's limit for `kind`, with `replicas` live in the fleet.
    pub fn cap(&self, kind: Kind, replicas: usize) -> Option<u32> {
        let cap = match kind {
            Kind::Request => self.max_in_flight,
            Kind::Stream => self.max_streams,
        }?;
        Some(match self.scope {
            Scope::Replica => cap,
            // Never above the fleet's limit in sum; at least one each, so a member is never
            // unreachable from a replica (a fleet larger than the limit may then exceed it).
            Scope::Fleet => (cap / replicas.max(1) as u32).max(1),
        })
    }
}

/// What a slot counts against: a request in flight, or a long-lived stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Request,
    Stream,
}

/// A member's load and its share: what the policies read, what the slots count.
#[derive(Debug)]
pub struct Load {
    in_flight: AtomicU32,
    streams: AtomicU32,
    /// Static `weight` (1 unless configured).
    pub(super) weight: AtomicU32,
    /// Slow start runs from here (ms on the routing clock, 0: not at all): when the member
    /// joined or came back.
    pub(super) ramp_from_ms: AtomicU64,
    /// Smooth weighted round-robin's running score (nginx's algorithm).
    current: AtomicI64,
}

impl Default for Load {
    fn default() -> Self {
        Load {
            in_flight: AtomicU32::new(0),
            streams: AtomicU32::new(0),
            weight: AtomicU32::new(1),
            ramp_from_ms: AtomicU64::new(now_ms().max(1)),
            current: AtomicI64::new(0),
        }
    }
}

impl Load {
    fn counter(&self, kind: Kind) -> &AtomicU32 {
        match kind {
            Kind::Request => &self.in_flight,
            Kind::Stream => &self.streams,
        }
    }

    /// Requests (or streams) it holds now.
    pub fn held(&self, kind: Kind) -> u32 {
        self.counter(kind).load(Ordering::Relaxed)
    }

    /// Its weight as slow start has it now.
    fn share(&self, slow_start: Duration) -> f32 {
        let weight = self.weight.load(Ordering::Relaxed) as f32;
        let ramp = slow_start.as_millis() as u64;
        if ramp == 0 {
            return weight;
        }
        let from = self.ramp_from_ms.load(Ordering::Relaxed);
        let since = now_ms().saturating_sub(from);
        if from == 0 || since >= ramp {
            return weight;
        }
        weight * (since as f32 / ramp as f32).max(RAMP_FLOOR)
    }
}

/// Where a request may go.
pub enum Want<'a> {
    /// Any healthy member but these (tried already).
    Any(&'a [Arc<Member>]),
    /// This member and no other (it holds the request's state).
    Pinned(&'a Arc<Member>),
}

/// What a request got.
pub enum Acquired {
    Slot(Slot),
    /// Every eligible member is full: the request waits its turn.
    Queued(Ticket),
    /// Every eligible member is full and so is the queue.
    QueueFull,
    /// Healthy members exist, but this request tried every one.
    AllTried,
    /// No member is healthy (or the pool is empty).
    NoneHealthy,
}

/// The members a request may take and which of them has room.
enum Choice {
    Member(Arc<Member>),
    /// Eligible members exist; none has room.
    Busy,
    AllTried,
    NoneHealthy,
}

/// Balancing over one member set: the pool's settings, cursor and queue.
pub struct Balancer<'a> {
    pub settings: &'a Settings,
    pub members: &'a [Arc<Member>],
    pub cursor: &'a std::sync::atomic::AtomicUsize,
    pub queue: &'a Arc<Queue>,
    /// Members weigh the same and none is in slow start: plain turns.
    pub uniform: bool,
}

impl Balancer<'_> {
    /// Room for a request (or stream) on a member `want` allows: at once, a place in the
    /// queue, or why neither.
    pub fn acquire(&self, want: Want<'_>, kind: Kind, replicas: usize) -> Acquired {
        self.queue
            .replicas
            .store(replicas.max(1) as u32, Ordering::Relaxed);
        let cap = self.settings.cap(kind, replicas);
        self.queue.set_cap(kind, cap);
        let Some(cap) = cap else {
            // No limit: nothing waits, nothing needs the queue's lock.
            return match self.choose(&want, kind, None) {
                Choice::Member(m) => Acquired::Slot(Slot::take(m, kind, None)),
                Choice::Busy => Acquired::QueueFull,
                Choice::AllTried => Acquired::AllTried,
                Choice::NoneHealthy => Acquired::NoneHealthy,
            };
        };
        // Under the lock, so that room given back is either seen here or passed to us; the
        // waiters first, so a newcomer never takes room one of them could use.
        let mut waiters = self.queue.lock();
        if !waiters.is_empty() {
            self.serve(&mut waiters);
        }
        match self.choose(&want, kind, Some(cap)) {
            Choice::Member(m) => Acquired::Slot(Slot::take(m, kind, Some(self.queue.clone()))),
            Choice::AllTried => Acquired::AllTried,
            Choice::NoneHealthy => Acquired::NoneHealthy,
            Choice::Busy if waiters.len() >= self.settings.queue_depth => Acquired::QueueFull,
            Choice::Busy => {
                let (tx, rx) = oneshot::channel();
                let id = self.queue.next_id.fetch_add(1, Ordering::Relaxed);
                let (pinned, tried) = match want {
                    Want::Pinned(m) => (Some(m.clone()), Vec::new()),
                    Want::Any(tried) => (None, tried.to_vec()),
                };
                waiters.push_back(Waiter {
                    id,
                    kind,
                    pinned,
                    tried,
                    tx,
                });
                Acquired::Queued(Ticket {
                    id,
                    queue: self.queue.clone(),
                    rx,
                })
            }
        }
    }

    /// Serve waiters that room appeared for without a slot given back (an ejection over, a
    /// member healthy again or new, a limit raised by a reload, a larger fleet share).
    pub fn kick(&self) {
        // The limits in force now (a reload may have changed them).
        let replicas = self.queue.replicas.load(Ordering::Relaxed).max(1) as usize;
        for kind in [Kind::Request, Kind::Stream] {
            self.queue.set_cap(kind, self.settings.cap(kind, replicas));
        }
        self.serve(&mut self.queue.lock());
    }

    /// Room for the waiters, oldest first, wherever there is some.
    fn serve(&self, waiters: &mut VecDeque<Waiter>) {
        // Once a waiter that may take any member (and tried none) finds no room, no later
        // such waiter of its kind will.
        let mut full = [false; 2];
        let mut i = 0;
        while i < waiters.len() {
            let w = &waiters[i];
            let plain = w.pinned.is_none() && w.tried.is_empty();
            if plain && full[w.kind as usize] {
                i += 1;
                continue;
            }
            let want = match &w.pinned {
                Some(m) => Want::Pinned(m),
                None => Want::Any(&w.tried),
            };
            let cap = self.queue.cap(w.kind);
            let Choice::Member(m) = self.choose(&want, w.kind, cap) else {
                if plain {
                    full[w.kind as usize] = true;
                }
                i += 1;
                continue;
            };
            let Some(w) = waiters.remove(i) else {
                break;
            };
            let slot = Slot::take(m, w.kind, Some(self.queue.clone()));
            if let Err(mut unused) = w.tx.send(slot) {
                // Its ticket is being dropped: give the room back without passing it on
                // (the lock is ours).
                unused.armed = false;
                unused
                    .member
                    .load
                    .counter(w.kind)
                    .fetch_sub(1, Ordering::Relaxed);
            }
        }
    }

    fn choose(&self, want: &Want<'_>, kind: Kind, cap: Option<u32>) -> Choice {
        let room = |m: &Member| cap.is_none_or(|c| m.load.held(kind) < c);
        let tried = match want {
            Want::Pinned(m) if room(m) => return Choice::Member((*m).clone()),
            Want::Pinned(_) => return Choice::Busy,
            Want::Any(tried) => *tried,
        };
        let eligible = |m: &Arc<Member>| m.is_healthy() && !tried.iter().any(|t| Arc::ptr_eq(t, m));
        let picked = match self.settings.policy {
            Policy::RoundRobin => self.round_robin(&eligible, &room),
            Policy::LeastRequest => self.least_request(kind, &eligible, &room),
        };
        if let Some(m) = picked {
            return Choice::Member(m);
        }
        match (
            self.members.iter().any(&eligible),
            self.members.iter().any(|m| m.is_healthy()),
        ) {
            (true, _) => Choice::Busy,
            (false, true) => Choice::AllTried,
            (false, false) => Choice::NoneHealthy,
        }
    }

    /// The next member in turn that may take the request; with weights or slow start, by
    /// smooth weighted round-robin (each member's turns in proportion to its share, spread
    /// out; concurrent picks may bend it slightly, never lock).
    fn round_robin(
        &self,
        eligible: &impl Fn(&Arc<Member>) -> bool,
        room: &impl Fn(&Member) -> bool,
    ) -> Option<Arc<Member>> {
        let ok = |m: &Arc<Member>| eligible(m) && room(m);
        if self.uniform {
            return self.in_turn(&ok);
        }
        self.weighted(self.members.iter().filter(|m| ok(m)))
    }

    /// Smooth weighted round-robin over `candidates` (each one's turns in proportion to its
    /// share, spread out; concurrent picks may bend it slightly, never lock).
    fn weighted<'m>(
        &self,
        candidates: impl Iterator<Item = &'m Arc<Member>>,
    ) -> Option<Arc<Member>> {
        let slow = self.settings.slow_start;
        let mut total = 0_i64;
        let mut best: Option<(&Arc<Member>, i64)> = None;
        for m in candidates {
            let share = (m.load.share(slow) * 1000.0) as i64;
            total += share;
            let current = m.load.current.fetch_add(share, Ordering::Relaxed) + share;
            if best.is_none_or(|(_, b)| current > b) {
                best = Some((m, current));
            }
        }
        let (m, _) = best?;
        m.load.current.fetch_sub(total, Ordering::Relaxed);
        Some(m.clone())
    }

    /// The next usable member in turn: the turns go round the usable members only, so a
    /// member out of the pool (ejected, full) leaves its share to all the others, not to the
    /// one after it.
    fn in_turn(&self, ok: &impl Fn(&Arc<Member>) -> bool) -> Option<Arc<Member>> {
        const MOST: usize = 64;
        let n = self.members.len();
        let start = self.cursor.fetch_add(1, Ordering::Relaxed);
        let mut usable = [0_u8; MOST];
        let mut k = 0;
        if n <= MOST {
            for (i, m) in self.members.iter().enumerate() {
                if ok(m) {
                    usable[k] = i as u8;
                    k += 1;
                }
            }
            if k == n || k == 0 {
                // All usable (the common case) or none: plain turns.
                return (k > 0).then(|| self.members[start % n].clone());
            }
            return Some(self.members[usize::from(usable[start % k])].clone());
        }
        (0..n)
            .map(|j| &self.members[(start + j) % n])
            .find(|m| ok(m))
            .cloned()
    }

    /// The member with the fewest requests in flight for its share (ties: the next in turn).
    fn least_request(
        &self,
        kind: Kind,
        eligible: &impl Fn(&Arc<Member>) -> bool,
        room: &impl Fn(&Member) -> bool,
    ) -> Option<Arc<Member>> {
        let n = self.members.len();
        let slow = self.settings.slow_start;
        let ok = |m: &Arc<Member>| eligible(m) && room(m);
        // Lower is better: held / share.
        let score =
            |m: &Member| m.load.held(kind) as f32 / m.load.share(slow).max(f32::MIN_POSITIVE);
        if n > SCAN_ALL {
            let (i, mut j) = (fastrand::usize(..n), fastrand::usize(..n - 1));
            if j >= i {
                j += 1;
            }
            let (a, b) = (&self.members[i], &self.members[j]);
            match (ok(a), ok(b)) {
                (true, true) => return Some(if score(b) < score(a) { b } else { a }.clone()),
                (true, false) => return Some(a.clone()),
                (false, true) => return Some(b.clone()),
                // Both unusable: look at all of them.
                (false, false) => {}
            }
        }
        // The least loaded; among equals, by turn (weights and slow start: in proportion to
        // their shares), so an idle pool is round-robin and a skipped member's turns go to
        // all the others.
        const MOST: usize = 64;
        let mut best = f32::MAX;
        let mut tied = [0_u8; MOST];
        let mut k = 0;
        for (i, m) in self.members.iter().enumerate().take(MOST) {
            if !ok(m) {
                continue;
            }
            let s = score(m);
            if s < best {
                best = s;
                k = 0;
            }
            if s == best {
                tied[k] = i as u8;
                k += 1;
            }
        }
        let tied = &tied[..k];
        match tied.len() {
            0 => None,
            1 => Some(self.members[usize::from(tied[0])].clone()),
            k if self.uniform => {
                let start = self.cursor.fetch_add(1, Ordering::Relaxed);
                Some(self.members[usize::from(tied[start % k])].clone())
            }
            _ => self.weighted(tied.iter().map(|&i| &self.members[usize::from(i)])),
        }
    }
}
