//! Rate limits keyed on who calls: token buckets (GCRA) per principal (anonymous callers:
//! per client address, IPv6 per /64), optionally one per principal and tool for
//! `tools/call`. Never keyed on the session id: a new session does not reset a limit.
//!
//! Where the buckets are:
//! - **here** (the `governor` crate), without a shared store: per replica, so with N replicas
//!   behind a balancer that spreads one caller's requests, the caller gets up to N times the
//!   configured limit across the fleet. A reload starts them afresh.
//! - **in Redis** (`[rate_limits] redis`, [`shared`]): one bucket per caller across the
//!   fleet, the same GCRA evaluated atomically by a script.
//! - **here, sized by the fleet** ([`RateLimit::fallback`]) when Redis cannot decide within
//!   its deadline: each replica takes the limit divided by the live replicas it knows of
//!   ([`crate::fleet`]), so the fleet as a whole stays near the limit.

mod cause;
pub mod shared;

use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};

use super::Principal;

/// A request over its limit: how long until it would pass, and the size of the bucket that
/// refused it (the `RateLimit-Limit` a client is told).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limited {
    pub retry_after: Duration,
    pub limit: u32,
}

/// Who decided (the `store` label of `mcp_edge_rate_limit_decisions_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::EnumIter, strum::IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum Decided {
    /// This replica's buckets (no shared store configured).
    Local,
    /// Redis, for the whole fleet.
    Shared,
    /// This replica's buckets sized by the fleet, while Redis cannot decide.
    Fallback,
}

/// A route's rate limit: its buckets here, and the ones sized by the fleet for when the
/// shared store cannot decide.
pub struct RateLimit {
    pub settings: RateSettings,
    local: Limiter,
    /// Built for a number of live replicas; built again when that changes.
    fallback: Mutex<Option<(usize, Arc<Limiter>)>>,
}

impl std::fmt::Debug for RateLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimit")
            .field("settings", &self.settings)
            .finish()
    }
}

impl RateLimit {
    pub fn new(settings: RateSettings) -> RateLimit {
        RateLimit {
            settings,
            local: Limiter::new(settings),
            fallback: Mutex::new(None),
        }
    }

    /// This replica's own buckets.
    pub fn local(&self, caller: &str, tool: Option<&str>) -> Result<(), Limited> {
        self.local.check(caller, tool)
    }

    /// This replica's share of the limit among `live` replicas (each rate and burst divided,
    /// rounded up, at least one).
    pub fn fallback(&self, live: usize, caller: &str, tool: Option<&str>) -> Result<(), Limited> {
        let limiter = {
            let mut slot = self.fallback.lock().unwrap_or_else(|e| e.into_inner());
            match slot.as_ref() {
                Some((n, l)) if *n == live => l.clone(),
                _ => {
                    let l = Arc::new(Limiter::new(self.settings.share(live)));
                    *slot = Some((live, l.clone()));
                    l
                }
            }
        };
        limiter.check(caller, tool)
    }

    /// Forget buckets that are full again (bounded memory; the maintenance service).
    pub fn sweep(&self) {
        self.local.sweep();
        let fallback = self
            .fallback
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if let Some((_, l)) = fallback {
            l.sweep();
        }
    }
}

/// The bucket key of a caller: its principal, else its address (IPv6 per /64).
pub fn caller_key(who: Option<&Principal>, client: Option<IpAddr>) -> String {
    match (who, client) {
        (Some(p), _) => format!("p\0{}", p.key()),
        // An IPv4 client on a dual-stack listener arrives as `::ffff:a.b.c.d`.
        (None, Some(ip)) if matches!(ip.to_canonical(), IpAddr::V4(_)) => {
            format!("a\0{}", ip.to_canonical())
        }
        (None, Some(IpAddr::V6(v6))) => {
            let s = v6.segments();
            format!("a\0{:x}:{:x}:{:x}:{:x}::/64", s[0], s[1], s[2], s[3])
        }
        (None, Some(ip)) => format!("a\0{ip}"),
        (None, None) => "a\0".to_string(),
    }
}

/// `[routes.rate_limit]`, checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateSettings {
    pub per_second: NonZeroU32,
    pub burst: NonZeroU32,
    /// Each tool a caller calls gets a bucket of this rate and burst too.
    pub per_tool: Option<(NonZeroU32, NonZeroU32)>,
}

impl RateSettings {
    /// One of `n` replicas' share: each rate and burst divided, rounded up, at least one.
    pub fn share(self, n: usize) -> RateSettings {
        let n = u32::try_from(n.max(1)).unwrap_or(u32::MAX);
        let part = |v: NonZeroU32| NonZeroU32::new(v.get().div_ceil(n)).unwrap_or(NonZeroU32::MIN);
        RateSettings {
            per_second: part(self.per_second),
            burst: part(self.burst),
            per_tool: self.per_tool.map(|(r, b)| (part(r), part(b))),
        }
    }
}

/// The caller's bucket, which every request draws from, and optionally a bucket per caller
/// and tool, which `tools/call` draws from as well: a made-up tool name buys no rate beyond
/// the caller's.
struct Limiter {
    pub settings: RateSettings,
    callers: DefaultKeyedRateLimiter<String>,
    tools: Option<DefaultKeyedRateLimiter<String>>,
    clock: DefaultClock,
}

impl Limiter {
    fn new(settings: RateSettings) -> Limiter {
        let quota = |rate, burst| Quota::per_second(rate).allow_burst(burst);
        Limiter {
            settings,
            callers: RateLimiter::keyed(quota(settings.per_second, settings.burst)),
            tools: settings
                .per_tool
                .map(|(rate, burst)| RateLimiter::keyed(quota(rate, burst))),
            clock: DefaultClock::default(),
        }
    }

    /// Take a token for this caller (`caller_key`) and, for a `tools/call`, for the caller
    /// and tool. The tool's bucket is asked first: a call it refuses takes nothing from the
    /// caller's (one the caller's refuses has spent its tool token; the shared store's
    /// script takes both or neither).
    pub fn check(&self, caller: &str, tool: Option<&str>) -> Result<(), Limited> {
        let now = self.clock.now();
        let limited = |not_until: governor::NotUntil<_>, burst: NonZeroU32| Limited {
            retry_after: not_until.wait_time_from(now),
            limit: burst.get(),
        };
        if let (Some(tools), Some(tool), Some((_, burst))) =
            (&self.tools, tool, self.settings.per_tool)
        {
            let key = format!("{caller}\0tool\0{tool}");
            tools.check_key(&key).map_err(|n| limited(n, burst))?;
        }
        self.callers
            .check_key(&caller.to_string())
            .map_err(|n| limited(n, self.settings.burst))
    }

    fn sweep(&self) {
        for buckets in std::iter::once(&self.callers).chain(&self.tools) {
            buckets.retain_recent();
            buckets.shrink_to_fit();
        }
    }
}

/// The `Retry-After` seconds for a wait (at least 1).
pub fn retry_after(wait: Duration) -> u64 {
    wait.as_secs() + u64::from(wait.subsec_nanos() > 0).max(u64::from(wait.is_zero()))
}

/// Milliseconds for `data.retryAfterMs` (at least 1).
pub fn retry_after_ms(wait: Duration) -> u64 {
    u64::try_from(wait.as_micros().div_ceil(1000))
        .unwrap_or(u64::MAX)
        .max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn principal(sub: &str) -> Principal {
        Principal {
            issuer: "i".into(),
            subject: sub.into(),
            tenant: None,
            groups: vec![],
            scopes: vec![],
        }
    }

    #[test]
    fn each_principal_has_its_own_bucket() {
        let n = |v| NonZeroU32::new(v).unwrap();
        let limiter = Limiter::new(RateSettings {
            per_second: n(1),
            burst: n(3),
            per_tool: Some((n(1), n(2))),
        });
        let a = principal("a");
        assert!(limiter
            .check(&caller_key(Some(&a), None), Some("t1"))
            .is_ok());
        assert!(limiter
            .check(&caller_key(Some(&a), None), Some("t1"))
            .is_ok());
        let limited = limiter
            .check(&caller_key(Some(&a), None), Some("t1"))
            .unwrap_err();
        assert!(retry_after(limited.retry_after) >= 1);
        assert_eq!(limited.limit, 2, "the tool's bucket refused");
        // Another tool has its own bucket, but the caller's is shared: one call left.
        assert!(limiter
            .check(&caller_key(Some(&a), None), Some("t2"))
            .is_ok());
        assert!(limiter
            .check(&caller_key(Some(&a), None), Some("t3"))
            .is_err());
        // Another principal has its own buckets; anonymous IPv4 callers on a dual-stack
        // listener each theirs.
        assert!(limiter
            .check(&caller_key(Some(&principal("b")), None), Some("t1"))
            .is_ok());
        let v4 = |s: &str| Some(s.parse::<IpAddr>().unwrap());
        for _ in 0..3 {
            assert!(limiter
                .check(&caller_key(None, v4("::ffff:10.0.0.1")), None)
                .is_ok());
        }
        assert!(limiter
            .check(&caller_key(None, v4("10.0.0.1")), None)
            .is_err());
        assert!(limiter
            .check(&caller_key(None, v4("::ffff:10.0.0.2")), None)
            .is_ok());
        assert_eq!(retry_after(Duration::from_millis(1500)), 2);
        assert_eq!(retry_after(Duration::ZERO), 1);
        assert_eq!(retry_after_ms(Duration::from_micros(1500)), 2);
        assert_eq!(retry_after_ms(Duration::ZERO), 1);
        assert_eq!(retry_after(Duration::from_secs(3)), 3);
    }

    #[test]
    fn a_replicas_share_is_rounded_up_and_never_zero() {
        let n = |v| NonZeroU32::new(v).unwrap();
        let s = RateSettings {
            per_second: n(10),
            burst: n(5),
            per_tool: Some((n(2), n(1))),
        };
        let third = s.share(3);
        assert_eq!((third.per_second.get(), third.burst.get()), (4, 2));
        assert_eq!(
            third.per_tool.map(|(r, b)| (r.get(), b.get())),
            Some((1, 1))
        );
        assert_eq!(s.share(0), s, "no fleet known: this replica alone");
        let limit = RateLimit::new(s);
        let caller = caller_key(None, None);
        assert!((0..2).all(|_| limit.fallback(3, &caller, None).is_ok()));
        assert_eq!(limit.fallback(3, &caller, None).unwrap_err().limit, 2);
        assert!(
            limit.local(&caller, None).is_ok(),
            "the local buckets are apart"
        );
    }
}
