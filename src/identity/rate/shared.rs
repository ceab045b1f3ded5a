//! Rate limits that hold across the fleet: the buckets in Redis (`[rate_limits] redis`), the
//! same GCRA as the local ones, evaluated atomically by a script (`gcra.lua`, loaded once and
//! called by its hash: one round trip per decision) on one multiplexed connection that
//! reconnects by itself (redis-rs's `ConnectionManager`; never a connection per request).
//!
//! - **Keys** are `<prefix>:{<caller>}` and `<prefix>:{<caller>}:t:<tool>`, the caller and tool
//!   digests of their names (SHA-256, hex): bounded, no identity in Redis, and one hash tag
//!   per caller, so both keys of a decision live in one slot of a Redis Cluster. The route is
//!   part of the caller's digest (routes have their own limits).
//! - **A deadline** (`decision_timeout_ms`, a few milliseconds): a decision Redis does not give
//!   in time (down, slow, refusing, not connected yet) is `None`, and the caller decides with
//!   its local buckets sized by the fleet ([`super::RateLimit::fallback`]). That starts an
//!   episode, logged once and shown by `mcp_edge_rate_limit_fallback`: while it lasts, requests
//!   go to the local buckets at once, and one request every [`PROBE_EVERY`] asks Redis again;
//!   the first answer ends it (logged once).
//! - Redis's own clock decides (`TIME` in the script): replicas' clocks need not agree.

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use super::{Limited, RateSettings};
use crate::metrics;

/// While Redis cannot decide, how often one request asks it again.
pub const PROBE_EVERY: Duration = Duration::from_millis(250);

/// The script's text (one copy; its SHA-1 is what is sent).
static SCRIPT: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(include_str!("gcra.lua")));

/// `[rate_limits]`, checked.
#[derive(Clone, PartialEq, Eq)]
pub struct Settings {
    /// `redis://` or `rediss://` (with its password, if any, from `password_file`).
    pub url: String,
    /// PEM roots for `rediss://` (else the system's).
    pub ca: Option<Vec<u8>>,
    pub password: Option<String>,
    pub timeout: Duration,
    pub prefix: String,
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Settings")
            .field("url", &redact(&self.url))
            .field("timeout", &self.timeout)
            .field("prefix", &self.prefix)
            .finish()
    }
}

/// A URL without the password it may carry.
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => format!("{}://…@{}", &url[..s], &url[at + 1..]),
        _ => url.to_string(),
    }
}

/// The shared store: one connection (made lazily, on a runtime of its own), the episode.
pub struct Store {
    pub settings: Settings,
    connection: ConnectionManager,
    /// Deciding locally since Redis did not (an episode).
    falling_back: AtomicBool,
    /// While falling back: when (ms since [`EPOCH`]) a request may ask Redis again.
    next_probe: AtomicU64,
    /// Why the episode began (logged once when it ends too).
    why: Mutex<String>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("settings", &self.settings)
            .finish()
    }
}

static EPOCH: LazyLock<Instant> = LazyLock::new(Instant::now);

fn now_ms() -> u64 {
    u64::try_from(EPOCH.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// The runtime the connection lives on (its reader and its reconnects), apart from Pingora's
/// services, so that it outlives any of them.
fn runtime() -> Option<&'static tokio::runtime::Runtime> {
    static RT: LazyLock<Option<tokio::runtime::Runtime>> = LazyLock::new(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("mcp-edge-redis")
            .enable_all()
            .build()
            .map_err(|e| log::error!("rate limits: cannot start the Redis runtime: {e}"))
            .ok()
    });
    RT.as_ref()
}

impl Store {
    /// The store for `settings`; nothing is connected yet (the first decision connects).
    pub fn new(settings: Settings) -> Result<Store, String> {
        let mut info: redis::ConnectionInfo =
            redis::IntoConnectionInfo::into_connection_info(settings.url.as_str())
                .map_err(|e| format!("{}: {e}", redact(&settings.url)))?;
        if let Some(p) = &settings.password {
            let redis = info.redis_settings().clone().set_password(p);
            info = info.set_redis_settings(redis);
        }
        let client = match &settings.ca {
            Some(ca) => redis::Client::build_with_tls(
                info,
                redis::TlsCertificates {
                    client_tls: None,
                    root_cert: Some(ca.clone()),
                },
            ),
            None => redis::Client::open(info),
        }
        .map_err(|e| format!("{}: {e}", redact(&settings.url)))?;
        // Bounded waits everywhere: a stalled Redis fails a request, then is reconnected.
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(2)))
            .set_response_timeout(Some(Duration::from_secs(1)))
            .set_min_delay(Duration::from_millis(100))
            .set_max_delay(Duration::from_secs(2))
            .set_number_of_retries(usize::MAX);
        let rt = runtime().ok_or("no runtime for the Redis connection")?;
        let _entered = rt.enter();
        let connection = ConnectionManager::new_lazy_with_config(client, config)
            .map_err(|e| format!("{}: {e}", redact(&settings.url)))?;
        Ok(Store {
            settings,
            connection,
            falling_back: AtomicBool::new(false),
            next_probe: AtomicU64::new(0),
            why: Mutex::new(String::new()),
        })
    }

    /// Connect now (in the background), so the first decision does not wait for the
    /// connection: a `PING` on the store's own runtime. Again is harmless.
    pub fn connect(&self) {
        let Some(rt) = runtime() else { return };
        let mut connection = self.connection.clone();
        let url = redact(&self.settings.url);
        rt.spawn(async move {
            let ping: redis::RedisResult<String> =
                redis::cmd("PING").query_async(&mut connection).await;
            match ping {
                Ok(_) => log::info!("rate limits: connected to Redis at {url}"),
                Err(e) => log::warn!(
                    "rate limits: Redis at {url} does not answer yet ({e}); deciding locally until it does"
                ),
            }
        });
    }

    /// Take from the caller's buckets in Redis; `None` when Redis does not decide within the
    /// deadline (or, while it has not, when it is not this request's turn to ask).
    pub async fn decide(
        &self,
        route: &str,
        settings: &RateSettings,
        caller: &str,
        tool: Option<&str>,
    ) -> Option<Result<(), Limited>> {
        if self.falling_back.load(Ordering::Relaxed) {
            let now = now_ms();
            let due = self.next_probe.load(Ordering::Relaxed);
            let next = now + u64::try_from(PROBE_EVERY.as_millis()).unwrap_or(250);
            if now < due
                || self
                    .next_probe
                    .compare_exchange(due, next, Ordering::Relaxed, Ordering::Relaxed)
                    .is_err()
            {
                return None;
            }
        }
        let keys = Keys::new(&self.settings.prefix, route, caller, tool);
        let mut invocation = SCRIPT.prepare_invoke();
        invocation.key(&keys.caller);
        let (interval, burst) = (interval_us(settings.per_second), settings.burst.get());
        invocation.arg(interval).arg(burst);
        if let (Some(tool_key), Some((rate, burst))) = (&keys.tool, settings.per_tool) {
            invocation
                .key(tool_key)
                .arg(interval_us(rate))
                .arg(burst.get());
        }
        let mut connection = self.connection.clone();
        let started = Instant::now();
        let asked = invocation.invoke_async::<Vec<i64>>(&mut connection);
        match tokio::time::timeout(self.settings.timeout, asked).await {
            Ok(Ok(answer)) => {
                metrics::rate_store_seconds(started.elapsed());
                self.answered();
                read(&answer)
            }
            Ok(Err(e)) => {
                self.fell_back(&e.to_string());
                None
            }
            Err(_) => {
                self.fell_back(&format!(
                    "no answer within {} ms",
                    self.settings.timeout.as_millis()
                ));
                None
            }
        }
    }

    /// Redis decided: an episode of local decisions, if one was on, is over.
    fn answered(&self) {
        if self.falling_back.swap(false, Ordering::Relaxed) {
            metrics::rate_fallback(false);
            let why = std::mem::take(&mut *self.lock_why());
            log::info!(
                "rate limits: Redis at {} decides again (it had not: {why}); limits hold across the fleet",
                redact(&self.settings.url)
            );
        }
    }

    /// Redis did not decide: an episode starts (logged once), unless one is on.
    fn fell_back(&self, why: &str) {
        let next = now_ms() + u64::try_from(PROBE_EVERY.as_millis()).unwrap_or(250);
        self.next_probe.store(next, Ordering::Relaxed);
        if !self.falling_back.swap(true, Ordering::Relaxed) {
            metrics::rate_fallback(true);
            *self.lock_why() = why.to_string();
            log::warn!(
                "rate limits: Redis at {} did not decide ({why}); each replica decides locally with its share of each limit (the limit divided by the live replicas it knows) until Redis answers again",
                redact(&self.settings.url)
            );
        }
    }

    fn lock_why(&self) -> std::sync::MutexGuard<'_, String> {
        self.why.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The script's answer: `{allowed, retry after (us), burst, remaining}`.
fn read(answer: &[i64]) -> Option<Result<(), Limited>> {
    let [allowed, wait, burst, _remaining] = answer else {
        return None;
    };
    if *allowed == 1 {
        return Some(Ok(()));
    }
    Some(Err(Limited {
        retry_after: Duration::from_micros(u64::try_from(*wait).unwrap_or(0)),
        limit: u32::try_from(*burst).unwrap_or(0),
    }))
}

/// One token's interval in microseconds (at least one).
fn interval_us(per_second: NonZeroU32) -> u64 {
    (1_000_000 / u64::from(per_second.get())).max(1)
}

/// A decision's keys.
#[derive(Debug, PartialEq, Eq)]
struct Keys {
    caller: String,
    tool: Option<String>,
}

impl Keys {
    fn new(prefix: &str, route: &str, caller: &str, tool: Option<&str>) -> Keys {
        let digest = |parts: &[&str]| {
            let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
            for p in parts {
                ctx.update(p.as_bytes());
                ctx.update(b"\0");
            }
            crate::stdio::hex(&ctx.finish().as_ref()[..16])
        };
        let caller = format!("{prefix}:{{{}}}", digest(&[route, caller]));
        let tool = tool.map(|t| format!("{caller}:t:{}", digest(&[t])));
        Keys { caller, tool }
    }
}

/// A store shared by snapshots with the same settings (a reload keeps the connection).
pub fn reuse(old: Option<&Arc<Store>>, settings: &Settings) -> Option<Arc<Store>> {
    old.filter(|s| &s.settings == settings).cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_share_one_hash_tag_and_carry_no_names() {
        let k = Keys::new("mcp-edge", "/mcp", "p\0alice", Some("delete_repo"));
        let tag = |s: &str| s[s.find('{').unwrap()..=s.find('}').unwrap()].to_string();
        assert_eq!(tag(&k.caller), tag(k.tool.as_deref().unwrap()));
        assert!(!k.caller.contains("alice") && !k.tool.as_deref().unwrap().contains("delete"));
        assert_ne!(
            Keys::new("mcp-edge", "/other", "p\0alice", None).caller,
            k.caller,
            "each route has its own buckets"
        );
    }

    #[test]
    fn answers_and_urls_are_read_safely() {
        assert_eq!(read(&[1, 0, 5, 4]), Some(Ok(())));
        assert_eq!(
            read(&[0, 1500, 5, 0]),
            Some(Err(Limited {
                retry_after: Duration::from_micros(1500),
                limit: 5
            }))
        );
        assert_eq!(read(&[1, 0]), None, "a short answer is no decision");
        assert_eq!(
            redact("rediss://user:secret@redis:6380/0"),
            "rediss://…@redis:6380/0"
        );
        assert_eq!(redact("redis://redis:6379"), "redis://redis:6379");
        assert_eq!(interval_us(NonZeroU32::new(3).unwrap()), 333_333);
    }
}
