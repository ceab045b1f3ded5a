//! Pools and members: member sets that discovery can replace at run time, per-member health
//! (active checks, passive and outlier ejection: [`outliers`]), and how requests are spread
//! over the healthy members ([`balance`]).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use pingora::upstreams::peer::HttpPeer;

use crate::mcp::versions::{Speaks, Spoken};
use crate::net::tls::UpstreamTls;

pub mod balance;
pub mod health;
pub mod outliers;
mod publish;

pub use publish::{forget_pool, load as publish_load};

/// How a pool learns its members.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    Static(Vec<SocketAddr>),
    /// `host:port`, re-resolved every `interval` (a Kubernetes headless Service → pod IPs).
    Dns {
        name: String,
        interval: Duration,
    },
    /// A stdio server the edge runs; its member is the edge's local server for it.
    Stdio(Arc<crate::stdio::Spec>),
}

/// How a pool's members are checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthPolicy {
    pub check: CheckKind,
    pub interval: Duration,
    pub timeout: Duration,
    /// Consecutive failed checks before a member is marked unhealthy.
    pub unhealthy_after: u32,
    /// Consecutive good checks before it is healthy again.
    pub healthy_after: u32,
    /// A member that refused a connection gets no new traffic for this long; the first
    /// outlier ejection too (each one after it twice as long as the one before).
    pub eject: Duration,
    /// Failed requests in a row that eject a member (0: never).
    pub consecutive_failures: u32,
    /// The longest outlier ejection.
    pub max_eject: Duration,
    /// Outlier ejections leave at least this share of the pool out at most (one member of
    /// a pool of two or more may always be out).
    pub max_ejection_percent: u8,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckKind {
    None,
    /// A TCP connect.
    Tcp,
    /// An MCP `server/discover` POST to this path: `strict` (set in the configuration), any
    /// HTTP answer below 500 is healthy; the default (not set) takes any HTTP answer, as a
    /// `tcp` check takes a connect, so it is never stricter than the check it replaced.
    Mcp {
        path: String,
        strict: bool,
    },
}

static EPOCH: LazyLock<Instant> = LazyLock::new(Instant::now);

pub(crate) fn now_ms() -> u64 {
    EPOCH.elapsed().as_millis() as u64
}

/// One upstream MCP server.
#[derive(Debug)]
pub struct Member {
    pub addr: SocketAddr,
    /// Stable identity for tokens, metrics and logs (`ip:port`).
    pub label: String,
    checked_ok: AtomicBool,
    check_failures: AtomicU32,
    check_successes: AtomicU32,
    ejected_until_ms: AtomicU64,
    /// Handles on this member's response series.
    pub series: crate::metrics::MemberSeries,
    /// What its health checks learned about the revisions it speaks.
    pub speaks: Mutex<Speaks>,
    /// What it speaks and answers is being asked (rounds of checks may overlap; one asks).
    pub learning: AtomicBool,
    /// Requests and streams it holds, its weight and slow start ([`balance`]).
    pub load: balance::Load,
    /// Failures in a row and ejections ([`outliers`]).
    pub outliers: outliers::Record,
    /// It left the pool (discovery, a reload): room on it is not for requests that wait.
    left: AtomicBool,
}

impl Member {
    pub fn new(addr: SocketAddr) -> Self {
        Member {
            addr,
            label: addr.to_string(),
            checked_ok: AtomicBool::new(true),
            check_failures: AtomicU32::new(0),
            check_successes: AtomicU32::new(0),
            ejected_until_ms: AtomicU64::new(0),
            series: Default::default(),
            speaks: Mutex::default(),
            learning: AtomicBool::new(false),
            load: Default::default(),
            outliers: Default::default(),
            left: AtomicBool::new(false),
        }
    }

    /// It left the pool it was in.
    pub fn has_left(&self) -> bool {
        self.left.load(Ordering::Relaxed)
    }

    /// Its active checks pass (whatever a passive ejection says).
    pub fn passes_checks(&self) -> bool {
        self.checked_ok.load(Ordering::Relaxed)
    }

    /// What it speaks, as last learned.
    pub fn speaks(&self) -> Speaks {
        self.speaks.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Passes its active checks and is not ejected.
    pub fn is_healthy(&self) -> bool {
        self.checked_ok.load(Ordering::Relaxed)
            && now_ms() >= self.ejected_until_ms.load(Ordering::Relaxed)
    }

    /// Passive ejection: a refused connection keeps new traffic away for `eject`.
    pub fn record_connect_failure(&self, eject: Duration) {
        let until = now_ms().saturating_add(eject.as_millis() as u64);
        let current = self.ejected_until_ms.load(Ordering::Relaxed);
        if current >= until {
            // Out for longer already (an outlier ejection): that one stands.
            return;
        }
        self.outliers
            .cause
            .store(outliers::REFUSED, Ordering::Relaxed);
        self.ejected_until_ms.store(until, Ordering::Relaxed);
        self.load.ramp_from_ms.store(until, Ordering::Relaxed);
    }

    /// Record an active check; returns the new verdict.
    pub fn record_check(&self, ok: bool, policy: &HealthPolicy) -> bool {
        if ok {
            self.check_failures.store(0, Ordering::Relaxed);
            let n = self.check_successes.fetch_add(1, Ordering::Relaxed) + 1;
            if n >= policy.healthy_after {
                if !self.checked_ok.swap(true, Ordering::Relaxed) {
                    // Back from failed checks: slow start from here.
                    self.load
                        .ramp_from_ms
                        .store(now_ms().max(1), Ordering::Relaxed);
                }
                // A good check also ends a refused connection's ejection early; an outlier's
                // only when the check is strict (the default takes a 500 as an answer).
                let strict = matches!(policy.check, CheckKind::Mcp { strict: true, .. });
                let cause = self.outliers.cause.load(Ordering::Relaxed);
                let until = self.ejected_until_ms.load(Ordering::Relaxed);
                if until > now_ms() && (cause == outliers::REFUSED || strict) {
                    self.ejected_until_ms.store(0, Ordering::Relaxed);
                    self.load
                        .ramp_from_ms
                        .store(now_ms().max(1), Ordering::Relaxed);
                }
            }
        } else {
            self.check_successes.store(0, Ordering::Relaxed);
            let n = self.check_failures.fetch_add(1, Ordering::Relaxed) + 1;
            if n >= policy.unhealthy_after {
                self.checked_ok.store(false, Ordering::Relaxed);
            }
        }
        self.is_healthy()
    }
}

/// A named set of members, how requests are spread over them and the ones waiting.
#[derive(Debug)]
pub struct Pool {
    pub name: String,
    pub source: Source,
    pub health: HealthPolicy,
    members: ArcSwap<Vec<Arc<Member>>>,
    next: AtomicUsize,
    /// `balance`, the per-member limits, slow start and static weights.
    pub balance: balance::Settings,
    /// Static members' weights (`members = [{ address, weight }]`); others weigh 1.
    pub weights: Vec<(SocketAddr, u32)>,
    /// Requests waiting for a member's room (taken over by the pool a reload makes).
    queue: std::sync::OnceLock<Arc<balance::Queue>>,
    /// One outlier ejection decided at a time (the share of the pool out is checked and
    /// changed together).
    ejecting: Mutex<()>,
    /// Handle on this pool's `mcp_edge_upstream_latency_seconds` series.
    pub latency: std::sync::OnceLock<prometheus::Histogram>,
    /// The members speak HTTPS (`[pools.tls]`).
    pub tls: Option<Arc<UpstreamTls>>,
    /// The `Host` members are sent instead of the client's.
    pub host: Option<String>,
    /// The revisions its healthy members speak; the routes on this pool read it.
    pub spoken: Arc<ArcSwap<Spoken>>,
    /// A stdio pool's processes, once started (see [`crate::runtime::Runtime::start`]).
    pub stdio: std::sync::OnceLock<Arc<crate::stdio::Group>>,
    /// What the members are told of the caller (`[pools.credential]`).
    pub credential: crate::identity::assertion::Credential,
}

impl Pool {
    pub fn new(name: String, source: Source, health: HealthPolicy) -> Self {
        let members = match &source {
            Source::Static(addrs) => addrs.iter().map(|a| Arc::new(Member::new(*a))).collect(),
            Source::Dns { .. } | Source::Stdio(_) => Vec::new(),
        };
        Pool {
            name,
            source,
            health,
            members: ArcSwap::from_pointee(members),
            next: AtomicUsize::new(0),
            balance: Default::default(),
            weights: Vec::new(),
            queue: Default::default(),
            ejecting: Mutex::new(()),
            latency: Default::default(),
            tls: None,
            host: None,
            spoken: Default::default(),
            stdio: Default::default(),
            credential: Default::default(),
        }
    }

    /// The Pingora peer for one of this pool's members: plain, or TLS with the pool's SNI,
    /// verification, CA bundle and client certificate. Requests and health checks both
    /// connect through it, so a check fails where a request would.
    pub fn peer(&self, member: &Member) -> HttpPeer {
        let Some(tls) = &self.tls else {
            return HttpPeer::new(member.addr, false, String::new());
        };
        let sni = tls
            .sni
            .clone()
            .unwrap_or_else(|| member.addr.ip().to_string());
        let mut peer = HttpPeer::new(member.addr, true, sni);
        peer.options.verify_cert = tls.verify;
        peer.options.verify_hostname = tls.verify;
        peer.options.ca = tls.ca.clone();
        peer.client_cert_key = tls.client.clone();
        peer.group_key = tls.group;
        peer
    }

    /// Ready: a healthy member (a stdio pool: its processes run).
    pub fn ready(&self) -> bool {
        if matches!(self.source, Source::Stdio(_)) {
            return self.stdio.get().is_some_and(|g| g.ready());
        }
        self.members().iter().any(|m| m.is_healthy())
    }

    pub fn members(&self) -> Arc<Vec<Arc<Member>>> {
        self.members.load_full()
    }

    /// Publish the member count and each member's health as metrics, and what the healthy
    /// members speak to the routes.
    pub fn publish(&self) {
        self.kick();
        let members = self.members();
        let health: Vec<(&str, bool)> = members
            .iter()
            .map(|m| (m.label.as_str(), m.is_healthy()))
            .collect();
        publish::members(&self.name, &health);
        // Learned only by `mcp` checks: after a reload to another check, nothing is.
        let learning = matches!(self.health.check, CheckKind::Mcp { .. });
        let speaks: Vec<Speaks> = members
            .iter()
            .filter(|m| learning && m.is_healthy())
            .map(|m| m.speaks())
            .collect();
        let spoken = Spoken::combine(&speaks);
        let before = self.spoken.load_full();
        if *before == spoken {
            return;
        }
        if before.modern != spoken.modern || before.legacy != spoken.legacy {
            log::info!(
                "pool {}: members speak {} (legacy: {})",
                self.name,
                spoken
                    .modern
                    .as_ref()
                    .map_or("unknown modern revisions".to_string(), |m| m.join(", ")),
                spoken
                    .legacy
                    .map_or("unknown", |l| if l { "yes" } else { "no" })
            );
            publish::spoken(&self.name, &spoken);
        }
        if before.absent != spoken.absent {
            publish::absent(&self.name, &spoken);
        }
        self.spoken.store(Arc::new(spoken));
    }

    pub fn find(&self, label: &str) -> Option<Arc<Member>> {
        self.members
            .load()
            .iter()
            .find(|m| m.label == label)
            .cloned()
    }

    /// Room on a member `want` allows for a request (or stream), by the pool's policy and
    /// limits ([`balance`]); `replicas`: the live replicas sharing a fleet-wide limit.
    pub fn acquire(
        &self,
        want: balance::Want<'_>,
        kind: balance::Kind,
        replicas: usize,
    ) -> balance::Acquired {
        let members = self.members.load();
        self.balancer(&members).acquire(want, kind, replicas)
    }

    /// Requests waiting now.
    pub fn queued(&self) -> usize {
        self.queue.get().map_or(0, |q| q.len())
    }

    /// Serve waiting requests that room appeared for (members healthy again or new, limits
    /// raised).
    pub fn kick(&self) {
        if self.queue.get().is_some_and(|q| !q.is_empty()) {
            let members = self.members.load();
            self.balancer(&members).kick();
        }
    }

    fn balancer<'a>(&'a self, members: &'a [Arc<Member>]) -> balance::Balancer<'a> {
        balance::Balancer {
            settings: &self.balance,
            members,
            cursor: &self.next,
            queue: self.queue.get_or_init(Default::default),
            uniform: self.weights.is_empty() && self.balance.slow_start.is_zero(),
        }
    }

    /// Static members' weights (set before the pool serves).
    pub fn set_weights(&mut self, weights: Vec<(SocketAddr, u32)>) {
        self.weights = weights;
        self.weigh(&self.members());
    }

    /// Static weights onto these members.
    fn weigh(&self, members: &[Arc<Member>]) {
        for m in members {
            let w = self
                .weights
                .iter()
                .find(|(a, _)| *a == m.addr)
                .map_or(1, |(_, w)| *w);
            m.load.weight.store(w, Ordering::Relaxed);
        }
    }

    /// Replace the member set (discovery). Members that stay keep their health state.
    /// Returns true when the set changed.
    pub fn set_members(&self, addrs: &[SocketAddr]) -> bool {
        let current = self.members.load_full();
        let mut wanted: Vec<SocketAddr> = addrs.to_vec();
        wanted.sort();
        wanted.dedup();
        let mut have: Vec<SocketAddr> = current.iter().map(|m| m.addr).collect();
        have.sort();
        if have == wanted {
            return false;
        }
        let next = wanted
            .iter()
            .map(|a| {
                current
                    .iter()
                    .find(|m| m.addr == *a)
                    .cloned()
                    .unwrap_or_else(|| Arc::new(Member::new(*a)))
            })
            .collect::<Vec<_>>();
        for gone in current
            .iter()
            .filter(|m| !next.iter().any(|n| Arc::ptr_eq(n, m)))
        {
            gone.left.store(true, Ordering::Relaxed);
        }
        self.members.store(Arc::new(next));
        true
    }

    /// After a reload: take over the members (and their health) of the pool this one
    /// replaces, when both describe the same source.
    pub fn inherit(&self, old: &Pool) {
        if let Some(queue) = old.queue.get() {
            let _ = self.queue.set(queue.clone());
        }
        if self.source == old.source {
            self.members.store(old.members());
            self.weigh(&self.members());
            // What was learned holds for the same servers reached the same way; another
            // check, `host` or TLS may reach other ones: learned again.
            let same_way = self.health.check == old.health.check
                && self.host == old.host
                && self.tls.is_some() == old.tls.is_some();
            if same_way {
                self.spoken.store(old.spoken.load_full());
            } else {
                for m in self.members().iter() {
                    if let Ok(mut speaks) = m.speaks.lock() {
                        *speaks = Speaks::default();
                    }
                }
            }
            if let Some(group) = old.stdio.get() {
                let _ = self.stdio.set(group.clone());
            }
        } else if let (Source::Static(_), Source::Static(_)) = (&self.source, &old.source) {
            // Another list: members that stay keep their load, health and ejection (and what
            // they speak); one that joins ramps up from here (slow start).
            let old = old.members();
            let next: Vec<Arc<Member>> = self
                .members()
                .iter()
                .map(|m| old.iter().find(|o| o.addr == m.addr).unwrap_or(m).clone())
                .collect();
            self.weigh(&next);
            self.members.store(Arc::new(next));
        }
        let now = self.members();
        for gone in old.members().iter() {
            if !now.iter().any(|m| Arc::ptr_eq(m, gone)) {
                gone.left.store(true, Ordering::Relaxed);
            }
        }
    }
}

#[cfg(test)]
mod tests;
