//! The edge's own replicas (`[fleet]`): who they are and how many are alive now.
//!
//! A replica learns its peers the way it learns a pool's members: from DNS (a headless
//! Service of the edge itself, re-resolved every `interval_ms`; the deploy's lists every
//! running pod, ready or not) or from a static list; each is then asked for a TCP connection (its listener), and
//! the ones that accept are live. This replica is one of them (it is in its own Service), and
//! never fewer than one is counted.
//!
//! What uses it: a fleet-wide rate limit that has to decide locally (its store is down) gives
//! each replica the limit divided by the live replicas ([`crate::identity::rate`]); with
//! `handoff_listen`, a request for state another replica holds goes to that replica
//! ([`handoff`], signed by [`hop`]). Membership changes are logged and exported
//! (`mcp_edge_fleet_replicas{state}`).

pub mod handoff;
pub mod hop;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::routing::Member;
use crate::session::Owner;
pub use handoff::Handoff;

/// Rounds a new live count must hold before it is the fleet's: a replica that answers one
/// round and not the next does not resize every share (and refill every bucket) each time.
const SETTLE: usize = 2;
/// Replicas remembered as having been in the fleet.
const MOST_REMEMBERED: usize = 1024;

/// Where the replicas come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Peers {
    /// `host:port`, re-resolved.
    Dns(String),
    Static(Vec<SocketAddr>),
}

/// `[fleet]`, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    pub peers: Peers,
    pub interval: Duration,
    pub timeout: Duration,
    /// Replicas hand requests to each other (`handoff_listen`): the peers are their
    /// hand-off listeners, this replica one of them.
    pub handoff: Option<Handoff>,
}

#[derive(Debug)]
pub struct Fleet {
    pub settings: Settings,
    /// The replicas known now (resolved), and which of them answered.
    known: Mutex<Vec<SocketAddr>>,
    /// Every replica known at some time (the latest [`MOST_REMEMBERED`]): one no longer
    /// known has left; one never known may be too new to be resolved yet.
    ever: Mutex<Vec<SocketAddr>>,
    /// The live count the fleet goes by (settled), the replicas it counts, and the last
    /// rounds' answers.
    live: AtomicUsize,
    members: Mutex<Vec<SocketAddr>>,
    seen: Mutex<Vec<Vec<SocketAddr>>>,
    /// This replica as its tokens name it (with `handoff`).
    this: Option<Owner>,
    /// The other replicas as the request path reaches them (made once each).
    replicas: Mutex<Vec<Arc<Member>>>,
    /// A round is running (rounds never overlap).
    busy: AtomicBool,
    /// Said that only this replica is known (once per episode).
    alone: AtomicBool,
}

impl Fleet {
    pub fn new(settings: Settings) -> Fleet {
        // Until the first round: a static list is taken as it is; a name, as this replica.
        let known = match &settings.peers {
            Peers::Static(list) => list.clone(),
            Peers::Dns(_) => Vec::new(),
        };
        let live = known.len().max(1);
        let this = settings.handoff.as_ref().map(Handoff::owner);
        Fleet {
            settings,
            members: Mutex::new(known.clone()),
            ever: Mutex::new(known.clone()),
            known: Mutex::new(known),
            live: AtomicUsize::new(live),
            seen: Mutex::new(Vec::new()),
            busy: AtomicBool::new(false),
            alone: AtomicBool::new(false),
            this,
            replicas: Mutex::new(Vec::new()),
        }
    }

    /// This replica, as tokens name it, when replicas hand requests to each other.
    pub fn this(&self) -> Option<&Owner> {
        self.this.as_ref()
    }

    /// The live replicas the fleet goes by (settled), this one always among them.
    pub fn live_replicas(&self) -> Vec<SocketAddr> {
        let mut live = lock(&self.members).clone();
        if let Some(h) = &self.settings.handoff {
            if !live.contains(&h.advertise) {
                live.push(h.advertise);
            }
        }
        live
    }

    /// `addr` is a replica of this fleet now (known: resolved or listed).
    pub fn knows(&self, addr: SocketAddr) -> bool {
        self.lock().contains(&addr)
    }

    /// `addr` was a replica of this fleet at some time.
    pub fn knew(&self, addr: SocketAddr) -> bool {
        lock(&self.ever).contains(&addr)
    }

    /// The replica at `addr` as a member the request path can go to (one per address).
    pub fn replica(&self, addr: SocketAddr) -> Arc<Member> {
        let mut replicas = lock(&self.replicas);
        if let Some(m) = replicas.iter().find(|m| m.addr == addr) {
            return m.clone();
        }
        let mut member = Member::new(addr);
        member.label = format!("replica {addr}");
        let member = Arc::new(member);
        replicas.push(member.clone());
        // A fleet's replicas are few; forget ones long gone rather than grow.
        if replicas.len() > 256 {
            replicas.remove(0);
        }
        member
    }

    /// Replicas alive now (at least one: this one).
    pub fn live(&self) -> usize {
        self.live.load(Ordering::Relaxed).max(1)
    }

    /// A reload keeps what the fleet it replaces knew (same peers).
    pub fn inherit(&self, old: &Fleet) {
        if old.settings.peers == self.settings.peers {
            *self.lock() = old.lock().clone();
            *lock(&self.ever) = lock(&old.ever).clone();
            *lock(&self.members) = lock(&old.members).clone();
            *lock(&self.seen) = lock(&old.seen).clone();
            self.live
                .store(old.live.load(Ordering::Relaxed), Ordering::Relaxed);
        }
    }

    /// One round: resolve (a name), then ask each replica for a connection. A round that
    /// finds the previous one still running does nothing.
    pub async fn refresh(&self) {
        if self.busy.swap(true, Ordering::AcqRel) {
            return;
        }
        // Released however the round ends (a dropped future included).
        struct Busy<'a>(&'a AtomicBool);
        impl Drop for Busy<'_> {
            fn drop(&mut self) {
                self.0.store(false, Ordering::Release);
            }
        }
        let _busy = Busy(&self.busy);
        self.round().await;
    }

    async fn round(&self) {
        let known = match &self.settings.peers {
            Peers::Static(list) => list.clone(),
            Peers::Dns(name) => self.resolve(name).await,
        };
        let timeout = self.settings.timeout;
        let answers = futures::future::join_all(known.iter().map(|addr| async move {
            matches!(
                tokio::time::timeout(timeout, tokio::net::TcpStream::connect(addr)).await,
                Ok(Ok(_))
            )
        }))
        .await;
        let answered: Vec<SocketAddr> = known
            .iter()
            .zip(&answers)
            .filter(|(_, ok)| **ok)
            .map(|(a, _)| *a)
            .collect();
        let before = std::mem::replace(&mut *self.lock(), known.clone());
        {
            let mut ever = lock(&self.ever);
            for addr in &known {
                if !ever.contains(addr) {
                    ever.push(*addr);
                }
            }
            let over = ever.len().saturating_sub(MOST_REMEMBERED);
            ever.drain(..over);
        }
        let live = self.settle(answered);
        let was = self.live.swap(live, Ordering::Relaxed);
        if before != known || was != live {
            log::info!(
                "fleet: {} replicas known, {live} live ({})",
                known.len(),
                known
                    .iter()
                    .zip(&answers)
                    .map(|(a, ok)| format!("{a}{}", if *ok { "" } else { " down" }))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        crate::metrics::fleet(known.len(), live);
    }

    /// The count the fleet goes by: how many `answered` once as many did [`SETTLE`] rounds
    /// in a row. The members (whom hand-off chooses among) are the ones that answered once
    /// the same ones did; the first answer is taken at once (until then only this replica
    /// was known).
    fn settle(&self, answered: Vec<SocketAddr>) -> usize {
        let mut seen = lock(&self.seen);
        seen.push(answered.clone());
        if seen.len() > SETTLE {
            seen.remove(0);
        }
        let full = seen.len() == SETTLE;
        let mut members = lock(&self.members);
        if members.is_empty() || (full && seen.iter().all(|n| *n == answered)) {
            *members = answered.clone();
        }
        if full && seen.iter().all(|n| n.len() == answered.len()) {
            answered.len()
        } else {
            self.live.load(Ordering::Relaxed)
        }
    }

    /// The name's addresses, within the round's timeout (a failed or empty answer keeps
    /// what was known; only this replica found is said once: a `dns` that names a
    /// ClusterIP Service, not the headless one, finds one address).
    async fn resolve(&self, name: &str) -> Vec<SocketAddr> {
        let lookup = tokio::net::lookup_host(name);
        let found = match tokio::time::timeout(self.settings.timeout, lookup).await {
            Ok(Ok(found)) => {
                // One family: a dual-stack name lists each replica twice.
                let family = self
                    .settings
                    .handoff
                    .as_ref()
                    .map(|h| h.advertise.is_ipv4());
                let mut found: Vec<SocketAddr> = found
                    .filter(|a| family.is_none_or(|v4| a.is_ipv4() == v4))
                    .collect();
                found.sort();
                found.dedup();
                found
            }
            Ok(Err(e)) => {
                log::warn!("fleet: resolving {name} failed: {e}; keeping what was known");
                return self.lock().clone();
            }
            Err(_) => {
                log::warn!("fleet: resolving {name} took too long; keeping what was known");
                return self.lock().clone();
            }
        };
        let alone = found.len() <= 1;
        if alone && !self.alone.swap(true, Ordering::Relaxed) {
            log::warn!(
                "fleet: {name} names {} address(es): only this replica is known (a headless Service lists every ready pod; a ClusterIP Service gives one address)",
                found.len()
            );
        } else if !alone {
            self.alone.store(false, Ordering::Relaxed);
        }
        if found.is_empty() {
            return self.lock().clone();
        }
        found
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<SocketAddr>> {
        lock(&self.known)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn live_replicas_are_the_ones_that_answer_and_never_fewer_than_one() {
        let up = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let down = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap()
        };
        let fleet = Fleet::new(Settings {
            peers: Peers::Static(vec![up.local_addr().unwrap(), down]),
            interval: Duration::from_secs(1),
            timeout: Duration::from_millis(500),
            handoff: None,
        });
        assert_eq!(fleet.live(), 2, "a static list is taken as it is at first");
        fleet.refresh().await;
        assert_eq!(fleet.live(), 2, "one round is not enough to change it");
        fleet.refresh().await;
        assert_eq!(fleet.live(), 1);
        drop(up);
        fleet.refresh().await;
        fleet.refresh().await;
        assert_eq!(fleet.live(), 1, "this replica, at least");
    }
}
