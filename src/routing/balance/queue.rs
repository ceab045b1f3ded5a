//! Room on members and the requests waiting for it: a [`Slot`] holds a member's room and gives
//! it back (or hands it to the first waiter that can use it) when dropped; a [`Ticket`] is a
//! request's place in a pool's FIFO [`Queue`], and leaves it when dropped.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::oneshot;

use super::Kind;
use crate::routing::Member;

/// A member's room for one request or stream, given back (or passed to the first waiter that
/// can use it) when dropped.
pub struct Slot {
    pub(super) member: Arc<Member>,
    pub(super) kind: Kind,
    pub(super) queue: Option<Arc<Queue>>,
    pub(super) armed: bool,
}

impl Slot {
    pub(super) fn take(member: Arc<Member>, kind: Kind, queue: Option<Arc<Queue>>) -> Slot {
        member.load.counter(kind).fetch_add(1, Ordering::Relaxed);
        Slot {
            member,
            kind,
            queue,
            armed: true,
        }
    }

    pub fn member(&self) -> &Arc<Member> {
        &self.member
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let counter = self.member.load.counter(self.kind);
        let Some(queue) = &self.queue else {
            counter.fetch_sub(1, Ordering::Relaxed);
            return;
        };
        let mut waiters = queue.lock();
        // A reload may have lowered the limit: then the room is not passed on.
        let over = queue
            .cap(self.kind)
            .is_some_and(|cap| counter.load(Ordering::Relaxed) > cap);
        if over || !self.pass_on(queue, &mut waiters) {
            counter.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

impl Slot {
    /// Hand this room to the first waiter that can use it; false when none could.
    pub(super) fn pass_on(&self, queue: &Arc<Queue>, waiters: &mut VecDeque<Waiter>) -> bool {
        while let Some(i) = waiters
            .iter()
            .position(|w| w.kind == self.kind && w.accepts(&self.member))
        {
            let Some(waiter) = waiters.remove(i) else {
                break;
            };
            let passed = Slot {
                member: self.member.clone(),
                kind: self.kind,
                queue: Some(queue.clone()),
                armed: true,
            };
            match waiter.tx.send(passed) {
                Ok(()) => return true,
                // Gone already (its ticket is being dropped): the next one.
                Err(mut unused) => unused.armed = false,
            }
        }
        false
    }
}

/// A pool's waiting requests, oldest first. It outlives a reload that keeps the pool's
/// members, so requests waiting under the old configuration are served under the new one.
#[derive(Default)]
pub struct Queue {
    pub(super) waiters: Mutex<VecDeque<Waiter>>,
    /// This replica's limits now (0: none), for the slots that hand room on.
    pub(super) caps: [AtomicU32; 2],
    /// The live replicas the last request saw (for a fleet-wide limit).
    pub(super) replicas: AtomicU32,
    pub(super) next_id: AtomicU64,
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Queue({} waiting)", self.len())
    }
}

pub(super) struct Waiter {
    pub(super) id: u64,
    pub(super) kind: Kind,
    /// The member it must have, when pinned.
    pub(super) pinned: Option<Arc<Member>>,
    /// Members it must not have (tried already).
    pub(super) tried: Vec<Arc<Member>>,
    pub(super) tx: oneshot::Sender<Slot>,
}

impl Waiter {
    pub(super) fn accepts(&self, member: &Arc<Member>) -> bool {
        match &self.pinned {
            Some(p) => Arc::ptr_eq(p, member),
            None => {
                !member.has_left()
                    && member.is_healthy()
                    && !self.tried.iter().any(|t| Arc::ptr_eq(t, member))
            }
        }
    }
}

/// A request's place in the queue; dropping it (the client left, the wait ran out) leaves
/// the queue, and a slot passed to it meanwhile goes on to the next waiter.
pub struct Ticket {
    pub(super) id: u64,
    pub(super) queue: Arc<Queue>,
    pub(super) rx: oneshot::Receiver<Slot>,
}

impl Ticket {
    /// Wait for a member's room.
    pub async fn granted(&mut self) -> Option<Slot> {
        (&mut self.rx).await.ok()
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.queue.lock().retain(|w| w.id != self.id);
        // A slot sent before it left: given back (or on) as it drops.
        self.rx.close();
        drop(self.rx.try_recv());
    }
}

impl Queue {
    pub(super) fn lock(&self) -> MutexGuard<'_, VecDeque<Waiter>> {
        self.waiters.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn cap(&self, kind: Kind) -> Option<u32> {
        let cap = self.caps[kind as usize].load(Ordering::Relaxed);
        (cap > 0).then_some(cap)
    }

    pub(super) fn set_cap(&self, kind: Kind, cap: Option<u32>) {
        self.caps[kind as usize].store(cap.unwrap_or(0), Ordering::Relaxed);
    }

    /// Requests waiting now.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
