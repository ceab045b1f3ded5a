//! Rate limits that hold across the fleet: the buckets in Redis (`[rate_limits] redis`), the
//! same GCRA as the local ones, evaluated atomically by a script (`gcra.lua`, loaded once and
//! called by its hash: one round trip per decision) on one multiplexed connection that
//! reconnects by itself (redis-rs's `ConnectionManager`; never a connection per request).
//!
//! - **Keys** are `<prefix>:{<caller>}` and `<prefix>:{<caller>}:t:<tool>`, the caller and tool
//!   digests of their names (SHA-256, hex): bounded, and one hash tag per caller, so both keys
//!   of a decision live in one slot. The route is part of the caller's digest (routes have
//!   their own limits). A digest of a guessable name (an IPv4 address, a subject) can be
//!   found by trying names: treat the Redis as one that knows who called. The edge speaks to
//!   one Redis endpoint (a primary, or a proxy in front of a cluster); it does not follow a
//!   Redis Cluster's redirections itself.
//! - **A deadline** (`decision_timeout_ms`, a few milliseconds): a decision Redis does not give
//!   in time (down, slow, refusing, not connected yet) is `None`, and the caller decides with
//!   its local buckets sized by the fleet ([`super::RateLimit::fallback`]). That starts an
//!   episode, logged once and shown by `mcp_edge_rate_limit_fallback`: while it lasts, requests
//!   go to the local buckets at once, and one request every [`PROBE_EVERY`] asks Redis again;
//!   two answers in a row end it (logged once). While it lasts, each change of its cause
//!   (authentication, OOM, timeout, refused, reset) is logged once and every cause counted
//!   ([`super::cause`]: a missed deadline is looked into). An episode that lasts gets a new connection
//!   every few seconds (a connection that went silent is not given up by the client on its
//!   own), and a vanished Redis ends the connection within `TCP_USER_TIMEOUT`.
//! - A decision that missed its deadline may still be taken in Redis later: the caller was
//!   then counted twice (there and locally), which errs on the side of the limit.
//! - Redis's own clock decides (`TIME` in the script): replicas' clocks need not agree.

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use super::cause::{self, Causes};
use super::{Limited, RateSettings};
use crate::metrics::{self, RedisCause};

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
    client: redis::Client,
    /// The connection; replaced when an episode lasts (a connection that went silent is
    /// never given up by the client itself: a timeout is not a dropped connection).
    connection: Mutex<ConnectionManager>,
    /// Deciding locally since Redis did not (an episode).
    falling_back: AtomicBool,
    /// While falling back: when (ms since [`EPOCH`]) a request may ask Redis again.
    next_probe: AtomicU64,
    /// When the episode began, and when the connection was last replaced (ms).
    episode_began: AtomicU64,
    replaced: AtomicU64,
    /// Answers in a row since the last failure (an episode ends after [`ANSWERS_TO_END`]).
    answers: AtomicU64,
    /// Why Redis does not decide (named as it changes, logged when the episode ends too).
    causes: Arc<Causes>,
}

/// Answers in a row that end an episode: one lucky answer from a Redis on the edge of the
/// deadline does not flip the replicas back and forth.
const ANSWERS_TO_END: u64 = 2;
/// How long an episode lasts before the connection is replaced by a new one (and again
/// after as long).
const REPLACE_AFTER: Duration = Duration::from_secs(5);
/// Unacknowledged bytes on the connection for this long end it (`TCP_USER_TIMEOUT`): a
/// Redis that vanished is noticed in seconds, not after the kernel's retransmissions.
const USER_TIMEOUT: Duration = Duration::from_secs(2);

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

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The runtime the connection lives on (its reader, its reconnects, the decisions' round
/// trips), apart from Pingora's services, so that it outlives any of them.
/// How many times the start's connection is tried (about a minute in all) before the
/// requests' own tries are left to find Redis.
const PROBES: u32 = 16;

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
    /// The store for `settings`; nothing is connected yet ([`Store::connect`] does).
    pub fn new(settings: Settings) -> Result<Store, String> {
        let failed = |e: redis::RedisError| format!("{}: {e}", redact(&settings.url));
        let mut info: redis::ConnectionInfo =
            redis::IntoConnectionInfo::into_connection_info(settings.url.as_str())
                .map_err(failed)?;
        if let Some(p) = &settings.password {
            let redis = info.redis_settings().clone().set_password(p);
            info = info.set_redis_settings(redis);
        }
        // No Nagle delay inside a deadline of milliseconds.
        let tcp = redis::io::tcp::TcpSettings::default()
            .set_nodelay(true)
            .set_user_timeout(USER_TIMEOUT);
        info = info.set_tcp_settings(tcp);
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
        .map_err(failed)?;
        let connection = manager(&client).map_err(failed)?;
        Ok(Store {
            client,
            connection: Mutex::new(connection),
            falling_back: AtomicBool::new(false),
            next_probe: AtomicU64::new(0),
            episode_began: AtomicU64::new(0),
            replaced: AtomicU64::new(0),
            answers: AtomicU64::new(0),
            causes: Causes::new(redact(&settings.url)),
            settings,
        })
    }

    /// Whether replicas decide locally now (the gauge follows the store in use).
    pub fn falling_back(&self) -> bool {
        self.falling_back.load(Ordering::Relaxed)
    }

    /// Connect now, in the background, so the first decision does not wait for the
    /// connection, and say how it went (a wrong password or CA is logged here, once).
    pub fn connect(&self) {
        let Some(rt) = runtime() else { return };
        let client = self.client.clone();
        let url = redact(&self.settings.url);
        let mut connection = self.current();
        rt.spawn(async move {
            let config = redis::AsyncConnectionConfig::new()
                .set_connection_timeout(Some(Duration::from_secs(2)))
                .set_response_timeout(Some(Duration::from_secs(2)));
            // A Redis still starting (refusing, or `LOADING`) is tried again for a while, so
            // the log says when it answers; the first failure is logged, not each retry.
            let mut wait = Duration::from_millis(250);
            for attempt in 0..PROBES {
                let failure = match client
                    .get_multiplexed_async_connection_with_config(&config)
                    .await
                {
                    Err(e) => format!("cannot connect to Redis at {url} ({e})"),
                    Ok(mut probe) => {
                        let pong: redis::RedisResult<String> =
                            redis::cmd("PING").query_async(&mut probe).await;
                        match pong {
                            Ok(_) => {
                                log::info!("rate limits: connected to Redis at {url}");
                                break;
                            }
                            Err(e) => format!("Redis at {url} refuses ({e})"),
                        }
                    }
                };
                if attempt == 0 {
                    log::warn!("rate limits: {failure}; deciding locally until it answers");
                }
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_secs(5));
            }
            // The shared connection is made now too (its first use would make it).
            let _: redis::RedisResult<String> =
                redis::cmd("PING").query_async(&mut connection).await;
        });
    }

    fn current(&self) -> ConnectionManager {
        self.connection
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
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
        if self.falling_back() && !self.probe_turn() {
            return None;
        }
        let keys = Keys::new(&self.settings.prefix, route, caller, tool);
        let caller_args = (interval_us(settings.per_second), settings.burst.get());
        let tool_args = settings.per_tool.map(|(r, b)| (interval_us(r), b.get()));
        let mut connection = self.current();
        let started = Instant::now();
        // The round trip runs on the store's runtime: the connection's reconnects stay
        // there, whatever runtime this request is on.
        let rt = runtime()?;
        let asked = rt.spawn(async move {
            let mut invocation = SCRIPT.prepare_invoke();
            invocation
                .key(&keys.caller)
                .arg(caller_args.0)
                .arg(caller_args.1);
            if let (Some(tool_key), Some((interval, burst))) = (&keys.tool, tool_args) {
                invocation.key(tool_key).arg(interval).arg(burst);
            }
            invocation.invoke_async::<Vec<i64>>(&mut connection).await
        });
        let abort = asked.abort_handle();
        match tokio::time::timeout(self.settings.timeout, asked).await {
            Ok(Ok(Ok(answer))) => {
                metrics::rate_store_seconds(started.elapsed());
                self.answered();
                read(&answer)
            }
            Ok(Ok(Err(e))) => {
                self.fell_back(cause::classify(&e), &e.to_string());
                None
            }
            Ok(Err(e)) => {
                let why = format!("the decision's task failed: {e}");
                self.fell_back(RedisCause::Other, &why);
                None
            }
            Err(_) => {
                abort.abort();
                let why = format!("no answer within {} ms", self.settings.timeout.as_millis());
                self.fell_back(RedisCause::Timeout, &why);
                // Silence names no cause: look for one behind it.
                self.causes.look(&self.client, rt);
                None
            }
        }
    }

    /// While falling back: one request every [`PROBE_EVERY`] asks Redis.
    fn probe_turn(&self) -> bool {
        let now = now_ms();
        let due = self.next_probe.load(Ordering::Relaxed);
        now >= due
            && self
                .next_probe
                .compare_exchange(
                    due,
                    now + ms(PROBE_EVERY),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok()
    }

    /// Redis decided: an episode of local decisions, if one was on, is over once it has
    /// answered [`ANSWERS_TO_END`] times in a row.
    fn answered(&self) {
        let answers = self.answers.fetch_add(1, Ordering::Relaxed) + 1;
        if answers < ANSWERS_TO_END || !self.falling_back.swap(false, Ordering::Relaxed) {
            return;
        }
        metrics::rate_fallback(false);
        let why = self.causes.ended();
        log::info!(
            "rate limits: Redis at {} decides again (it had not: {why}); limits hold across the fleet",
            redact(&self.settings.url)
        );
    }

    /// Redis did not decide (for `cause`, in Redis's words `why`): an episode starts (logged
    /// once), unless one is on, in which case a new cause is named (a timeout only when a
    /// look finds nothing else); one that lasts gets a new connection.
    fn fell_back(&self, cause: RedisCause, why: &str) {
        self.answers.store(0, Ordering::Relaxed);
        let now = now_ms();
        self.next_probe
            .store(now + ms(PROBE_EVERY), Ordering::Relaxed);
        if !self.falling_back.swap(true, Ordering::Relaxed) {
            self.episode_began.store(now, Ordering::Relaxed);
            metrics::rate_fallback(true);
            self.causes.began(cause, why);
            log::warn!(
                "rate limits: Redis at {} did not decide ({why}; cause: {}); each replica decides locally with its share of each limit (the limit divided by the live replicas it knows) until Redis answers again",
                redact(&self.settings.url),
                metrics::label(cause)
            );
            return;
        }
        if cause == RedisCause::Timeout {
            metrics::rate_redis_failure(cause);
        } else {
            self.causes.seen(cause, why);
        }
        let since = now.saturating_sub(self.episode_began.load(Ordering::Relaxed));
        let last = self.replaced.load(Ordering::Relaxed);
        if since >= ms(REPLACE_AFTER) && now.saturating_sub(last) >= ms(REPLACE_AFTER) {
            self.replaced.store(now, Ordering::Relaxed);
            match manager(&self.client) {
                Ok(fresh) => {
                    *self.connection.lock().unwrap_or_else(|e| e.into_inner()) = fresh;
                    log::info!(
                        "rate limits: Redis at {} has not decided for {} s; trying a new connection",
                        redact(&self.settings.url),
                        since / 1000
                    );
                }
                Err(e) => log::warn!("rate limits: a new Redis connection: {e}"),
            }
        }
    }
}

/// A lazy, reconnecting connection on the store's runtime, every wait bounded.
fn manager(client: &redis::Client) -> redis::RedisResult<ConnectionManager> {
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(2)))
        .set_response_timeout(Some(Duration::from_secs(1)))
        .set_min_delay(Duration::from_millis(100))
        .set_max_delay(Duration::from_secs(2))
        .set_number_of_retries(5);
    let rt = runtime().ok_or_else(|| {
        redis::RedisError::from((
            redis::ErrorKind::Client,
            "no runtime for the Redis connection",
        ))
    })?;
    let _entered = rt.enter();
    ConnectionManager::new_lazy_with_config(client.clone(), config)
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
            ctx.finish().as_ref()[..16]
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
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
