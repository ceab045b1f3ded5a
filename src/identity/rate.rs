//! Rate limits keyed on who calls: token buckets (GCRA, the `governor` crate) per principal
//! (anonymous callers: per client address, IPv6 per /64), optionally one per principal and
//! tool for `tools/call`. Never keyed on the session id: a new session does not reset a
//! limit.
//!
//! Buckets are per replica: with N replicas behind a balancer that spreads one caller's
//! requests evenly, the caller's limit across the fleet is about N times the configured
//! one. A reload starts the buckets afresh.

use std::net::IpAddr;
use std::num::NonZeroU32;
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};

use super::Principal;

/// `[routes.rate_limit]`, checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateSettings {
    pub per_second: NonZeroU32,
    pub burst: NonZeroU32,
    /// Each tool a caller calls gets a bucket of this rate and burst too.
    pub per_tool: Option<(NonZeroU32, NonZeroU32)>,
}

/// The caller's bucket, which every request draws from, and optionally a bucket per caller
/// and tool, which `tools/call` draws from as well: a made-up tool name buys no rate beyond
/// the caller's.
pub struct Limiter {
    pub settings: RateSettings,
    callers: DefaultKeyedRateLimiter<String>,
    tools: Option<DefaultKeyedRateLimiter<String>>,
    clock: DefaultClock,
}

impl std::fmt::Debug for Limiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Limiter")
            .field("settings", &self.settings)
            .finish()
    }
}

impl Limiter {
    pub fn new(settings: RateSettings) -> Limiter {
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

    /// Take a token for this caller (and, for a `tools/call`, for the caller and tool);
    /// `Err(wait)` when a bucket is empty.
    pub fn check(
        &self,
        who: Option<&Principal>,
        client: Option<IpAddr>,
        tool: Option<&str>,
    ) -> Result<(), Duration> {
        let caller = match (who, client) {
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
        };
        let wait = |not_until: governor::NotUntil<_>| not_until.wait_time_from(self.clock.now());
        if let (Some(tools), Some(tool)) = (&self.tools, tool) {
            tools
                .check_key(&format!("{caller}\0tool\0{tool}"))
                .map_err(wait)?;
        }
        self.callers.check_key(&caller).map_err(wait)
    }

    /// Forget buckets that are full again (bounded memory; the maintenance service).
    pub fn sweep(&self) {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn principal(sub: &str) -> Principal {
        Principal {
            issuer: "i".into(),
            subject: sub.into(),
            tenant: None,
            groups: vec![],
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
        assert!(limiter.check(Some(&a), None, Some("t1")).is_ok());
        assert!(limiter.check(Some(&a), None, Some("t1")).is_ok());
        let wait = limiter.check(Some(&a), None, Some("t1")).unwrap_err();
        assert!(retry_after(wait) >= 1);
        // Another tool has its own bucket, but the caller's is shared: one call left.
        assert!(limiter.check(Some(&a), None, Some("t2")).is_ok());
        assert!(limiter.check(Some(&a), None, Some("t3")).is_err());
        // Another principal has its own buckets; anonymous IPv4 callers on a dual-stack
        // listener each theirs.
        assert!(limiter
            .check(Some(&principal("b")), None, Some("t1"))
            .is_ok());
        let v4 = |s: &str| Some(s.parse::<IpAddr>().unwrap());
        for _ in 0..3 {
            assert!(limiter.check(None, v4("::ffff:10.0.0.1"), None).is_ok());
        }
        assert!(limiter.check(None, v4("10.0.0.1"), None).is_err());
        assert!(limiter.check(None, v4("::ffff:10.0.0.2"), None).is_ok());
        assert_eq!(retry_after(Duration::from_millis(1500)), 2);
        assert_eq!(retry_after(Duration::ZERO), 1);
        assert_eq!(retry_after(Duration::from_secs(3)), 3);
    }
}
