//! Rate limits that hold across the fleet: three edge processes (the binary) share one real
//! Redis (Debian's `redis-server`) behind a balancer that sends each request to the next
//! replica, and one principal sends at three times its limit. Then Redis is killed, stalled,
//! restarted; and reached over TLS with a certificate made here.

mod common;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::balancer::Balancer;
use common::edge_process::{spawn, temp_config, Proc};
use common::mock::{Behavior, Mock};
use common::redis::Redis;
use common::*;
use serde_json::json;

/// The principal's limit: requests per second, and the burst.
const RATE: u32 = 10;
const BURST: u32 = 10;
/// Each replica's share while Redis cannot decide (of three live replicas, rounded up).
const SHARE: u32 = RATE.div_ceil(3);
/// How long the edge waits for Redis in these tests (the default is 5 ms; this machine is
/// shared with the rest of the suite).
const DEADLINE_MS: u64 = 50;

/// One edge process, with its admin port.
struct Replica {
    proc: Proc,
    admin: u16,
    _config: PathBuf,
}

/// `n` edge processes in front of `member`, with `store` (a `[rate_limits]` table, or none)
/// and each other as their `[fleet]`, and a balancer in front of them.
struct Fleet {
    replicas: Vec<Replica>,
    balancer: Balancer,
    _keys: PathBuf,
}

impl Fleet {
    async fn start(n: usize, member: SocketAddr, store: &str) -> Fleet {
        Fleet::start_with(n, member, store, "").await
    }

    /// With `limit` added to the route's `[routes.rate_limit]`.
    async fn start_with(n: usize, member: SocketAddr, store: &str, limit: &str) -> Fleet {
        let keys = temp_config();
        let key = format!(
            "[[keys]]\nsha256 = \"{}\"\nsubject = \"alice\"\n",
            common::mock::sha256_hex(b"k-alice")
        );
        std::fs::write(&keys, key).unwrap();
        let ports: Vec<(u16, u16)> = (0..n).map(|_| (free_port(), free_port())).collect();
        let peers = ports
            .iter()
            .map(|(_, admin)| format!("\"127.0.0.1:{admin}\""))
            .collect::<Vec<_>>()
            .join(", ");
        let mut replicas = Vec::new();
        for (port, admin) in &ports {
            let text = format!(
                "[[listeners]]\naddress = \"127.0.0.1:{port}\"\n\n\
                 [metrics]\naddress = \"127.0.0.1:{admin}\"\n\n\
                 [identity]\napi_keys_file = \"{}\"\n\n\
                 [fleet]\npeers = [{peers}]\ninterval_ms = 200\ntimeout_ms = 100\n\n{store}\n\
                 [[pools]]\nname = \"main\"\nmembers = [\"{member}\"]\n\n\
                 [[routes]]\npath = \"/mcp\"\npool = \"main\"\nauth = \"required\"\n\
                 versions = [\"{MODERN}\"]\n\
                 [routes.rate_limit]\nrequests_per_second = {RATE}\nburst = {BURST}\n{limit}",
                keys.display()
            );
            if let Err(e) = mcp_edge::config::Config::parse(&text) {
                panic!("test config invalid: {e:?}\n{text}");
            }
            let path = temp_config();
            std::fs::write(&path, text).unwrap();
            let proc = spawn(&path, *port);
            wait_listening(([127, 0, 0, 1], *admin).into());
            replicas.push(Replica {
                proc,
                admin: *admin,
                _config: path,
            });
        }
        let backends = ports
            .iter()
            .map(|(p, _)| SocketAddr::from(([127, 0, 0, 1], *p)))
            .collect();
        let balancer = Balancer::start(backends).await;
        let fleet = Fleet {
            replicas,
            balancer,
            _keys: keys,
        };
        let live = "mcp_edge_fleet_replicas{state=\"live\"}";
        wait_until(PATIENCE, "every replica sees the others live", async || {
            let mut all = true;
            for r in &fleet.replicas {
                all &= metric_at(r.admin, live).await == n as f64;
            }
            all
        })
        .await;
        fleet
    }

    fn url(&self) -> String {
        format!("http://{}/mcp", self.balancer.addr)
    }

    /// The sum of a series over the replicas.
    async fn sum(&self, series: &str) -> f64 {
        let mut total = 0.0;
        for r in &self.replicas {
            total += metric_at(r.admin, series).await;
        }
        total
    }

    /// Every replica's log says it reached Redis (else the logs, to say why not).
    async fn connected(&self) {
        let all = async || {
            self.replicas
                .iter()
                .all(|r| r.proc.log_text().contains("connected to Redis"))
        };
        if !poll_until(PATIENCE, all).await {
            panic!(
                "waited {PATIENCE:?} for the edge connected to Redis; logs:\n{}",
                self.logs()
            );
        }
    }

    fn logs(&self) -> String {
        self.replicas
            .iter()
            .map(|r| r.proc.log_text())
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// What a run of requests got.
#[derive(Debug, Default)]
struct Run {
    admitted: u32,
    limited: u32,
    /// Anything else: a failed request.
    other: Vec<String>,
    latencies: Vec<Duration>,
    elapsed: Duration,
}

impl Run {
    /// One call's outcome: admitted, limited, or anything else.
    fn record(&mut self, r: reqwest::Result<reqwest::Response>) {
        match r.map(|r| r.status().as_u16()) {
            Ok(200) => self.admitted += 1,
            Ok(429) => self.limited += 1,
            Ok(s) => self.other.push(format!("status {s}")),
            Err(e) => self.other.push(e.to_string()),
        }
    }
}

impl Run {
    fn add(&mut self, other: Run) {
        self.admitted += other.admitted;
        self.limited += other.limited;
        self.other.extend(other.other);
        self.latencies.extend(other.latencies);
        self.elapsed += other.elapsed;
    }

    fn p99(&self) -> Duration {
        let mut l = self.latencies.clone();
        l.sort();
        l.get(l.len().saturating_sub(1) * 99 / 100)
            .copied()
            .unwrap_or_default()
    }
}

/// alice's `tools/call`s at `per_second` for `length`, one at a time, each on a connection
/// of its own (so the balancer sends each to the next replica).
async fn send(url: &str, per_second: u32, length: Duration) -> Run {
    let c = reqwest::Client::builder()
        .no_proxy()
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let body = echo();
    let mut tick = tokio::time::interval(Duration::from_secs(1) / per_second);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut run = Run::default();
    let started = Instant::now();
    while started.elapsed() < length {
        tick.tick().await;
        let sent = Instant::now();
        let r = modern_request(&c, url, &body)
            .bearer_auth("k-alice")
            .send()
            .await;
        run.latencies.push(sent.elapsed());
        run.record(r);
    }
    run.elapsed = started.elapsed();
    run
}

/// The call every run sends.
fn echo() -> serde_json::Value {
    modern_body(
        json!(1),
        "tools/call",
        json!({"name": "echo", "arguments": {}}),
    )
}

/// `n` calls as alice, all at once.
async fn at_once(url: &str, n: u32) -> Run {
    let c = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let body = echo();
    let started = Instant::now();
    let calls = (0..n).map(|_| modern_request(&c, url, &body).bearer_auth("k-alice").send());
    let mut run = Run::default();
    for r in futures_util::future::join_all(calls).await {
        run.record(r);
    }
    run.elapsed = started.elapsed();
    run
}

/// What a limit admits over `secs` from a full bucket: the burst, then the rate.
fn allowance(rate: u32, burst: u32, secs: f64) -> f64 {
    f64::from(burst) + f64::from(rate) * secs
}

fn store(redis: &Redis) -> String {
    format!(
        "[rate_limits]\nredis = \"{}\"\ndecision_timeout_ms = {DEADLINE_MS}\n",
        redis.url()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fleet_admits_the_limit_where_local_buckets_admit_three_times_as_much() {
    let member = Mock::start(Behavior::Json).await;
    let redis = Redis::start();
    let length = Duration::from_secs(6);

    let fleet = Fleet::start(3, member.addr, &store(&redis)).await;
    let shared = send(&fleet.url(), 3 * RATE, length).await;
    assert!(shared.other.is_empty(), "{:?}", shared.other);
    let mut want = allowance(RATE, BURST, shared.elapsed.as_secs_f64());
    // A decision Redis missed its deadline for (a busy machine) is a replica's share's: the
    // first of them may add the shares' fresh bursts.
    let fallback = "mcp_edge_rate_limit_decisions_total{route=\"/mcp\",store=\"fallback\"}";
    if fleet.sum(fallback).await > 0.0 {
        want += f64::from(3 * SHARE) / 2.0;
    }
    let got = f64::from(shared.admitted);
    assert!(
        (got - want).abs() <= want * 0.1,
        "the fleet admitted {got}, its limit {want:.0} (±10 %): {shared:?}"
    );
    assert!(
        shared.limited as f64 > want,
        "it was asked for three times its limit"
    );
    let decided = "mcp_edge_rate_limit_decisions_total{route=\"/mcp\",store=\"shared\"}";
    assert!(fleet.sum(decided).await >= f64::from(shared.admitted + shared.limited) * 0.9);
    drop(fleet);

    // The same fleet without Redis: each replica holds the whole limit.
    let local = Fleet::start(3, member.addr, "").await;
    let alone = send(&local.url(), 3 * RATE, length).await;
    assert!(alone.other.is_empty(), "{:?}", alone.other);
    // Each replica gets a third of three times the limit: its own whole limit.
    assert!(
        f64::from(alone.admitted) >= 2.0 * got && alone.limited <= alone.admitted / 10,
        "local buckets admitted {} (limited {}) against the fleet's {got}",
        alone.admitted,
        alone.limited
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_killed_and_restarted_mid_run_fails_no_request_and_shared_decisions_resume() {
    let member = Mock::start(Behavior::Json).await;
    let mut redis = Redis::start();
    let fleet = Fleet::start(3, member.addr, &store(&redis)).await;
    let url = fleet.url();

    let before = send(&url, 3 * RATE, Duration::from_secs(3)).await;
    redis.kill();
    let away = send(&url, 3 * RATE, Duration::from_secs(4)).await;
    let fallback = "mcp_edge_rate_limit_fallback";
    assert_eq!(
        fleet.sum(fallback).await,
        3.0,
        "every replica decides locally"
    );
    redis.restart();
    let mut after = Run::default();
    let back = Instant::now();
    while back.elapsed() < PATIENCE && fleet.sum(fallback).await > 0.0 {
        after.add(send(&url, 3 * RATE, Duration::from_millis(500)).await);
    }
    assert_eq!(fleet.sum(fallback).await, 0.0, "Redis decides again");
    let shared = "mcp_edge_rate_limit_decisions_total{route=\"/mcp\",store=\"shared\"}";
    let resumed = fleet.sum(shared).await;
    after.add(send(&url, 3 * RATE, Duration::from_secs(2)).await);
    assert!(
        fleet.sum(shared).await > resumed,
        "shared decisions go on after the restart"
    );

    for (what, run) in [("before", &before), ("away", &away), ("after", &after)] {
        assert!(
            run.other.is_empty(),
            "{what}: failed requests {:?}",
            run.other
        );
    }
    // The deadline holds: a request waits for Redis at most that long.
    let deadline = Duration::from_millis(DEADLINE_MS);
    let slack = Duration::from_millis(150);
    assert!(
        away.p99() <= before.p99() + deadline + slack,
        "p99 {:?} with Redis away, {:?} before",
        away.p99(),
        before.p99()
    );
    // Within the bounds: the shared limit before and after (a restarted Redis starts
    // full), each replica's share while it was away.
    let mut bound = allowance(RATE, BURST, before.elapsed.as_secs_f64());
    bound += allowance(3 * SHARE, 3 * SHARE, away.elapsed.as_secs_f64());
    bound += allowance(RATE, BURST, after.elapsed.as_secs_f64());
    let total = f64::from(before.admitted + away.admitted + after.admitted);
    assert!(
        total <= bound * 1.1,
        "admitted {total}, bound {bound:.0}: {before:?} {away:?} {after:?}"
    );
    assert!(
        f64::from(away.admitted) >= allowance(RATE, 0, away.elapsed.as_secs_f64()) * 0.5,
        "the fallback admits about the limit, not nothing: {away:?}"
    );
    // Said when it began and when it ended, on every replica (an episode on a busy machine
    // may come and go again: each is said once).
    for r in &fleet.replicas {
        let log = r.proc.log_text();
        let (began, ended) = (
            log.matches("did not decide").count(),
            log.matches("decides again").count(),
        );
        assert!(
            began >= 1 && began == ended,
            "{began} began, {ended} ended:\n{log}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_redis_holds_no_request_past_its_deadline() {
    let member = Mock::start(Behavior::Json).await;
    let redis = Redis::start();
    let fleet = Fleet::start(3, member.addr, &store(&redis)).await;
    let url = fleet.url();
    let normal = send(&url, 3 * RATE, Duration::from_secs(2)).await;
    redis.stall();
    let stalled = send(&url, 3 * RATE, Duration::from_secs(3)).await;
    assert!(stalled.other.is_empty(), "{:?}", stalled.other);
    let deadline = Duration::from_millis(DEADLINE_MS);
    let slack = Duration::from_millis(150);
    assert!(
        stalled.p99() <= normal.p99() + deadline + slack,
        "p99 {:?} while Redis holds its replies, {:?} before",
        stalled.p99(),
        normal.p99()
    );
    let fallback = "mcp_edge_rate_limit_decisions_total{route=\"/mcp\",store=\"fallback\"}";
    assert!(fleet.sum(fallback).await > 0.0);
    redis.resume();
    wait_until(PATIENCE, "Redis decides again", async || {
        let _ = send(&url, RATE, Duration::from_millis(300)).await;
        fleet.sum("mcp_edge_rate_limit_fallback").await == 0.0
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rediss_with_a_certificate_made_here_and_a_password_file() {
    let pki = common::tls::Pki::new();
    let issued = pki.issue(&["127.0.0.1", "localhost"]);
    let password = "pw-made-here";
    let redis = Redis::start_tls(&issued.cert, &issued.key, password);
    let password_file = temp_config();
    std::fs::write(&password_file, format!("{password}\n")).unwrap();
    let member = Mock::start(Behavior::Json).await;
    let table = format!(
        "{}redis_ca_file = \"{}\"\nredis_password_file = \"{}\"\n",
        store(&redis),
        pki.ca_pem.display(),
        password_file.display()
    );
    let fleet = Fleet::start(1, member.addr, &table).await;
    fleet.connected().await;
    // Four bursts' worth at once: however slowly a busy machine answers them, the bucket
    // cannot refill that much while they are decided.
    let run = at_once(&fleet.url(), 4 * BURST).await;
    assert!(run.other.is_empty(), "{:?}", run.other);
    assert!(
        run.limited > 0 && run.admitted >= BURST,
        "the burst, then 429: {run:?}"
    );
    let shared = "mcp_edge_rate_limit_decisions_total{route=\"/mcp\",store=\"shared\"}";
    assert_eq!(
        fleet.sum(shared).await,
        f64::from(run.admitted + run.limited),
        "every decision over TLS:\n{}",
        fleet.logs()
    );
}

/// A tool's own bucket in Redis: a call its bucket refuses takes nothing from the caller's,
/// and the 429 names that bucket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tools_bucket_in_redis_refuses_alone_and_says_so() {
    let member = Mock::start(Behavior::Json).await;
    let redis = Redis::start();
    let per_tool = "per_tool_requests_per_second = 1\nper_tool_burst = 2\n";
    let fleet = Fleet::start_with(1, member.addr, &store(&redis), per_tool).await;
    fleet.connected().await;
    let c = client();
    let call = |tool: &str| {
        modern_body(
            json!(7),
            "tools/call",
            json!({"name": tool, "arguments": {}}),
        )
    };
    let mut statuses = Vec::new();
    for _ in 0..3 {
        let r = modern_request(&c, &fleet.url(), &call("echo"))
            .bearer_auth("k-alice")
            .send()
            .await
            .unwrap();
        statuses.push(r.status().as_u16());
        if r.status() == 429 {
            assert_eq!(r.headers()["ratelimit-limit"], "2", "the tool's bucket");
            let body: serde_json::Value = r.json().await.unwrap();
            assert_eq!(body["error"]["code"], -32023, "{body}");
            assert_eq!(body["error"]["data"]["limit"], 2, "{body}");
            let wait = body["error"]["data"]["retryAfterMs"].as_u64().unwrap_or(0);
            assert!((1..=1000).contains(&wait), "{body}");
        }
    }
    assert_eq!(statuses, [200, 200, 429], "the tool's burst is 2");
    // The refused call took nothing from alice's own bucket (burst 10): eight calls of other
    // tools (each bucket of its own) have the eight tokens left.
    for n in 0..8 {
        let r = modern_request(&c, &fleet.url(), &call(&format!("t{n}")))
            .bearer_auth("k-alice")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "call {n} of another tool");
    }
}
