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
    pub per_tool: bool,
}

pub struct Limiter {
    pub settings: RateSettings,
    buckets: DefaultKeyedRateLimiter<String>,
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
        let quota = Quota::per_second(settings.per_second).allow_burst(settings.burst);
        Limiter {
            settings,
            buckets: RateLimiter::keyed(quota),
            clock: DefaultClock::default(),
        }
    }

    /// Take one token for this caller (and tool); `Err(wait)` when the bucket is empty.
    pub fn check(
        &self,
        who: Option<&Principal>,
        client: Option<IpAddr>,
        tool: Option<&str>,
    ) -> Result<(), Duration> {
        let mut key = match (who, client) {
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
        if let (true, Some(tool)) = (self.settings.per_tool, tool) {
            key.push_str("\0tool\0");
            key.push_str(tool);
        }
        self.buckets
            .check_key(&key)
            .map_err(|not_until| not_until.wait_time_from(self.clock.now()))
    }

    /// Forget buckets that are full again (bounded memory; the maintenance service).
    pub fn sweep(&self) {
        self.buckets.retain_recent();
        self.buckets.shrink_to_fit();
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
        let limiter = Limiter::new(RateSettings {
            per_second: NonZeroU32::new(1).unwrap(),
            burst: NonZeroU32::new(2).unwrap(),
            per_tool: true,
        });
        let a = principal("a");
        assert!(limiter.check(Some(&a), None, Some("t1")).is_ok());
        assert!(limiter.check(Some(&a), None, Some("t1")).is_ok());
        let wait = limiter.check(Some(&a), None, Some("t1")).unwrap_err();
        assert!(retry_after(wait) >= 1);
        // Another tool, another principal: their own buckets.
        assert!(limiter.check(Some(&a), None, Some("t2")).is_ok());
        assert!(limiter
            .check(Some(&principal("b")), None, Some("t1"))
            .is_ok());
        assert_eq!(retry_after(Duration::from_millis(1500)), 2);
        assert_eq!(retry_after(Duration::ZERO), 1);
        assert_eq!(retry_after(Duration::from_secs(3)), 3);
    }
}
