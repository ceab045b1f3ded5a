//! The edge's own replicas (`[fleet]`): who they are and how many are alive now.
//!
//! A replica learns its peers the way it learns a pool's members: from DNS (a headless
//! Service of the edge itself, re-resolved every `interval_ms`; Kubernetes lists only ready
//! pods) or from a static list; each is then asked for a TCP connection (its listener), and
//! the ones that accept are live. This replica is one of them (it is in its own Service), and
//! never fewer than one is counted.
//!
//! What uses it: a fleet-wide rate limit that has to decide locally (its store is down) gives
//! each replica the limit divided by the live replicas ([`crate::identity::rate`]).
//! Membership changes are logged and exported (`mcp_edge_fleet_replicas{state}`).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

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
}

#[derive(Debug)]
pub struct Fleet {
    pub settings: Settings,
    /// The replicas known now (resolved), and which of them answered.
    known: Mutex<Vec<SocketAddr>>,
    live: AtomicUsize,
}

impl Fleet {
    pub fn new(settings: Settings) -> Fleet {
        // Until the first round: a static list is taken as it is; a name, as this replica.
        let known = match &settings.peers {
            Peers::Static(list) => list.clone(),
            Peers::Dns(_) => Vec::new(),
        };
        let live = known.len().max(1);
        Fleet {
            settings,
            known: Mutex::new(known),
            live: AtomicUsize::new(live),
        }
    }

    /// Replicas alive now (at least one: this one).
    pub fn live(&self) -> usize {
        self.live.load(Ordering::Relaxed).max(1)
    }

    /// A reload keeps what the fleet it replaces knew (same peers).
    pub fn inherit(&self, old: &Fleet) {
        if old.settings.peers == self.settings.peers {
            *self.lock() = old.lock().clone();
            self.live
                .store(old.live.load(Ordering::Relaxed), Ordering::Relaxed);
        }
    }

    /// One round: resolve (a name), then ask each replica for a connection.
    pub async fn refresh(&self) {
        let known = match &self.settings.peers {
            Peers::Static(list) => list.clone(),
            Peers::Dns(name) => match tokio::net::lookup_host(name.as_str()).await {
                Ok(found) => {
                    let mut found: Vec<SocketAddr> = found.collect();
                    found.sort();
                    found.dedup();
                    found
                }
                Err(e) => {
                    log::warn!("fleet: resolving {name} failed: {e}; keeping what was known");
                    self.lock().clone()
                }
            },
        };
        let timeout = self.settings.timeout;
        let answers = futures::future::join_all(known.iter().map(|addr| async move {
            matches!(
                tokio::time::timeout(timeout, tokio::net::TcpStream::connect(addr)).await,
                Ok(Ok(_))
            )
        }))
        .await;
        let live = answers.iter().filter(|ok| **ok).count();
        let before = std::mem::replace(&mut *self.lock(), known.clone());
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

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<SocketAddr>> {
        self.known.lock().unwrap_or_else(|e| e.into_inner())
    }
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
        });
        assert_eq!(fleet.live(), 2, "a static list is taken as it is at first");
        fleet.refresh().await;
        assert_eq!(fleet.live(), 1);
        drop(up);
        fleet.refresh().await;
        assert_eq!(fleet.live(), 1, "this replica, at least");
    }
}
