//! Shared test helpers: ephemeral ports, an in-process edge, waiting for a condition with a
//! deadline, and the modules below (a fault-injecting mock upstream, dead members, the
//! edge-error check, SDK peers, a TCP balancer, an HTTP/1.1 reader).
#![allow(dead_code)]

pub mod assert;
pub mod auth;
pub mod balancer;
pub mod dead;
pub mod edge_process;
pub mod http1;
pub mod mock;
pub mod otlp;
pub mod peers;
pub mod redis;
pub mod tls;

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use mcp_edge::config::Config;
use mcp_edge::EdgeHandle;
use serde_json::{json, Value};

// Not every test binary uses every helper.
#[allow(unused_imports)]
pub use assert::{
    assert_answer, assert_rejected, check_rejected, exchange, exchange_raw, Answer, Expect,
};
#[allow(unused_imports)]
pub use dead::{refusing, Refusing};

pub const MODERN: &str = "2026-07-28";

/// How long a test waits for something that normally takes milliseconds: only a failing
/// test ever waits this long, so it is generous for a loaded machine.
pub const PATIENCE: Duration = Duration::from_secs(20);

/// Between two looks at a condition.
const POLL: Duration = Duration::from_millis(20);

/// A port for an edge's own listener, bound by the edge at once (never use it as a dead
/// member, see [`refusing`]).
///
/// Pingora binds its listeners with `SO_REUSEPORT`, so two in-process edges that were handed
/// the same "free" port would both bind it and the kernel would share connections between
/// them: one test's request answered by another test's edge. So each process hands out ports
/// once, from a range below the kernel's ephemeral range (where clients' and other servers'
/// port-0 sockets live), checking each is free.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    const FIRST: u32 = 20_000;
    const SPAN: u32 = 12_000;
    static NEXT: AtomicU32 = AtomicU32::new(0);
    // Processes run one after another, but start apart so that a port a previous test binary
    // left in TIME_WAIT is not the first one tried.
    let offset = std::process::id() % SPAN;
    for _ in 0..SPAN {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = (FIRST + (offset + n) % SPAN) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port in {FIRST}..{}", FIRST + SPAN);
}

/// Wait until `ready` holds, looking again every few milliseconds; panic naming `what` if it
/// does not within `within`.
pub async fn wait_until(within: Duration, what: &str, ready: impl AsyncFnMut() -> bool) {
    assert!(
        poll_until(within, ready).await,
        "waited {within:?} for {what}"
    );
}

/// [`wait_until`] without the panic: whether `ready` held within `within`.
pub async fn poll_until(within: Duration, mut ready: impl AsyncFnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if ready().await {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(POLL).await;
    }
}

/// [`wait_until`] for code outside the async runtime (the edge's startup, sync tests).
pub fn wait_until_blocking(within: Duration, what: &str, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !ready() {
        assert!(Instant::now() < deadline, "waited {within:?} for {what}");
        std::thread::sleep(POLL);
    }
}

/// Wait until something accepts connections on `addr`.
pub fn wait_listening(addr: SocketAddr) {
    wait_until_blocking(PATIENCE, &format!("a listener on {addr}"), || {
        TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()
    });
}

pub struct Edge {
    pub handle: EdgeHandle,
    pub port: u16,
    pub metrics_port: u16,
    /// This edge's pool names (see [`Pools`]).
    pub pools: Pools,
    /// The name this edge gave the pool the test wrote as `main` (its metric label).
    pub pool: String,
}

/// Pool names unique to one test edge and its replicas. The metrics registry is
/// process-wide and keys pool series by name, so edges of tests running side by side in one
/// test binary must not share a name: one test's series could satisfy another's assertion,
/// and publishing one edge's members deletes the other's. Every pool the test writes (`main`)
/// gets a suffix (`main-7`); replicas and restarts of "the same" edge reuse the suffix, as
/// real replicas share a configuration (tokens name their pool).
#[derive(Clone, Debug)]
pub struct Pools {
    suffix: usize,
}

impl Pools {
    pub fn fresh() -> Pools {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static N: AtomicUsize = AtomicUsize::new(1);
        Pools {
            suffix: N.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// The edge's name for the pool the test wrote as `written`.
    pub fn name(&self, written: &str) -> String {
        format!("{written}-{}", self.suffix)
    }

    /// `body` with every `[[pools]] name` and `[[routes]] pool` renamed.
    pub fn apply(&self, body: &str) -> String {
        let mut doc: toml::Table = body
            .parse()
            .unwrap_or_else(|e| panic!("test config is not TOML: {e}\n{body}"));
        for (array, key) in [
            ("pools", "name"),
            ("routes", "pool"),
            ("passthrough", "pool"),
        ] {
            let Some(toml::Value::Array(tables)) = doc.get_mut(array) else {
                continue;
            };
            for table in tables {
                if let Some(toml::Value::String(name)) = table.get_mut(key) {
                    *name = self.name(name);
                }
            }
        }
        toml::to_string(&doc).expect("a TOML table serializes")
    }
}

impl Edge {
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }
    pub fn metrics_url(&self) -> String {
        format!("http://127.0.0.1:{}/metrics", self.metrics_port)
    }
}

/// A file of the test's own (unique per process and call), removed when the test ends.
pub struct TempFile(pub std::path::PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

pub fn temp_file(name: &str, text: &str) -> TempFile {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let path =
        std::env::temp_dir().join(format!("mcp-edge-test-{}-{n}-{name}", std::process::id()));
    std::fs::write(&path, text).unwrap();
    TempFile(path)
}

/// Session key secrets for tests (base64 of 32 bytes).
pub const KEY_A: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";
pub const KEY_B: &str = "ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA=";

/// Write a key ring file and return its path.
pub fn key_file(ring: &str) -> String {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    let path = std::env::temp_dir().join(format!(
        "mcp-edge-test-keys-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::write(&path, ring).unwrap();
    path.display().to_string()
}

/// `[sessions]` with the given key ring text.
pub fn sessions_section(ring: &str) -> String {
    format!("[sessions]\nkeys_file = \"{}\"\n\n", key_file(ring))
}

/// Start an edge in this process. `body` holds pools, routes and any other sections; the
/// listener, metrics and server sections (and a `[sessions]` key ring, unless `body` has
/// one) are added here.
pub fn start_edge(body: &str) -> Edge {
    start_edge_on(free_port(), body)
}

/// As [`start_edge`], on a given port.
pub fn start_edge_on(port: u16, body: &str) -> Edge {
    start_edge_with(port, body, Pools::fresh())
}

/// Another edge with `like`'s pool names (a replica behind the same balancer): tokens
/// sealed by one open on the other.
pub fn start_replica(like: &Edge, body: &str) -> Edge {
    start_edge_with(free_port(), body, like.pools.clone())
}

/// An edge on `port` with the given pool names (to restart an edge in place, pass the old
/// edge's `pools`).
pub fn start_edge_with(port: u16, body: &str, pools: Pools) -> Edge {
    start_edge_listening(port, "", body, pools)
}

/// As [`start_edge_with`], with more keys for the listener (`listener` follows its
/// `address` line: `[listeners.tls]`, say).
pub fn start_edge_listening(port: u16, listener: &str, body: &str, pools: Pools) -> Edge {
    let body = pools.apply(body);
    let metrics_port = free_port();
    let sessions = if body.contains("[sessions]") {
        String::new()
    } else {
        sessions_section(&format!("1:{KEY_A}"))
    };
    let text = format!(
        "[server]\nthreads = 1\n\n[[listeners]]\naddress = \"127.0.0.1:{port}\"\n{listener}\n\n[metrics]\naddress = \"127.0.0.1:{metrics_port}\"\n\n{sessions}{body}"
    );
    let config =
        Config::parse(&text).unwrap_or_else(|e| panic!("test config invalid: {e:?}\n{text}"));
    let handle = EdgeHandle::start(config);
    wait_listening(SocketAddr::from(([127, 0, 0, 1], port)));
    wait_listening(SocketAddr::from(([127, 0, 0, 1], metrics_port)));
    Edge {
        handle,
        port,
        metrics_port,
        pool: pools.name("main"),
        pools,
    }
}

/// An edge in this process from the configuration file at `path` (which names `port` and
/// `metrics_port`, and pools named by `pools`), reloadable by `edge.handle.reloader`.
pub fn start_edge_from_file(
    path: &std::path::Path,
    port: u16,
    metrics_port: u16,
    pools: &Pools,
) -> Edge {
    let options = mcp_edge::Options {
        config_path: Some(path.to_path_buf()),
        signals: false,
    };
    let handle = EdgeHandle::start_with(Config::load(path).unwrap(), options);
    wait_listening(SocketAddr::from(([127, 0, 0, 1], port)));
    wait_listening(SocketAddr::from(([127, 0, 0, 1], metrics_port)));
    Edge {
        handle,
        port,
        metrics_port,
        pool: pools.name("main"),
        pools: pools.clone(),
    }
}

/// `[[pools]]` + `[[routes]]` for one pool on `/mcp`, checked by `tcp` connects: the members
/// are test upstreams whose HTTP requests the tests count and pace, where the default `mcp`
/// check would add its own (tests of the default use [`pool_with_health`] with no check).
pub fn pool_and_route(members: &[SocketAddr], extra_route: &str) -> String {
    pool_with_health(members, "check = \"tcp\"\n", extra_route)
}

/// [`pool_and_route`] without active health checks: every connection the members see is a
/// request's (what [`assert_rejected`] counts on).
pub fn unchecked_pool_and_route(members: &[SocketAddr], extra_route: &str) -> String {
    pool_with_health(members, "check = \"none\"\n", extra_route)
}

/// [`pool_and_route`] with a `[pools.health]` section.
pub fn pool_with_health(members: &[SocketAddr], health: &str, extra_route: &str) -> String {
    let list: Vec<String> = members.iter().map(|m| format!("\"{m}\"")).collect();
    let health = if health.is_empty() {
        String::new()
    } else {
        format!("[pools.health]\n{health}\n")
    };
    format!(
        "[[pools]]\nname = \"main\"\nmembers = [{}]\n{health}\n[[routes]]\npath = \"/mcp\"\npool = \"main\"\n{extra_route}\n",
        list.join(", ")
    )
}

pub fn meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {}
    })
}

/// A modern JSON-RPC request body with the `_meta` envelope.
pub fn modern_body(id: Value, method: &str, mut params: Value) -> Value {
    params["_meta"] = meta();
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().build().unwrap()
}

pub fn h2c_client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .http2_prior_knowledge()
        .build()
        .unwrap()
}

/// A modern request with correct headers.
pub fn modern_request(c: &reqwest::Client, url: &str, body: &Value) -> reqwest::RequestBuilder {
    let method = body["method"].as_str().unwrap_or_default().to_string();
    let mut rb = c
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", MODERN)
        .header("mcp-method", method.clone());
    let name = match method.as_str() {
        "tools/call" | "prompts/get" => body["params"]["name"].as_str(),
        "resources/read" => body["params"]["uri"].as_str(),
        _ => None,
    };
    if let Some(n) = name {
        rb = rb.header("mcp-name", n);
    }
    rb.body(body.to_string())
}

/// A legacy (2025) POST; `session`: the `Mcp-Session-Id` it carries (with the revision).
pub fn legacy_request(
    c: &reqwest::Client,
    url: &str,
    session: Option<&str>,
    body: &Value,
) -> reqwest::RequestBuilder {
    let mut rb = c
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream");
    if let Some(s) = session {
        rb = rb
            .header("mcp-session-id", s)
            .header("mcp-protocol-version", "2025-11-25");
    }
    rb.body(body.to_string())
}

/// Answers the edge proxied from its pool's members (`mcp_edge_upstream_responses_total`,
/// every member and class): unlike a server's own request count, health checks are not in
/// it, so it tells whether the edge forwarded a request while checks run beside.
pub async fn proxied(edge: &Edge) -> f64 {
    let pool = format!("pool=\"{}\"", edge.pool);
    scrape(edge)
        .await
        .lines()
        .filter(|l| l.starts_with("mcp_edge_upstream_responses_total{") && l.contains(&pool))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The edge's whole Prometheus scrape.
pub async fn scrape(edge: &Edge) -> String {
    scrape_at(edge.metrics_port).await
}

/// The whole Prometheus scrape of the admin listener on `port` (an edge process's); empty
/// when it does not answer.
pub async fn scrape_at(port: u16) -> String {
    let url = format!("http://127.0.0.1:{port}/metrics");
    match client().get(url).send().await {
        Ok(r) => r.text().await.unwrap_or_default(),
        Err(_) => String::new(),
    }
}

/// Current value of a counter/gauge sample line in a Prometheus scrape (0 when absent).
pub async fn metric(edge: &Edge, name_and_labels: &str) -> f64 {
    metric_at(edge.metrics_port, name_and_labels).await
}

/// [`metric`] of the admin listener on `port`.
pub async fn metric_at(port: u16, name_and_labels: &str) -> f64 {
    scrape_at(port)
        .await
        .lines()
        .find_map(|l| {
            l.strip_prefix(name_and_labels)
                .and_then(|rest| rest.trim().parse().ok())
        })
        .unwrap_or(0.0)
}

/// Wait until a metric reaches `at_least` (metrics are recorded in the logging phase, just
/// after the response is written); the value reached.
pub async fn wait_metric(edge: &Edge, name_and_labels: &str, at_least: f64) -> f64 {
    let mut v = 0.0;
    let reached = poll_until(PATIENCE, async || {
        v = metric(edge, name_and_labels).await;
        v >= at_least
    })
    .await;
    assert!(
        reached,
        "waited {PATIENCE:?} for {name_and_labels} >= {at_least}; it is {v}"
    );
    v
}

/// Wait until a counter has moved by `delta` from `before` (the value read before the
/// test's own traffic), then assert it moved by exactly that much.
pub async fn wait_delta(edge: &Edge, name_and_labels: &str, before: f64, delta: f64) {
    let now = wait_metric(edge, name_and_labels, before + delta).await;
    assert_eq!(
        now - before,
        delta,
        "{name_and_labels} moved by {} (from {before}), want {delta}",
        now - before
    );
}

/// Wait until every series prefix in `wanted` is in the scrape.
pub async fn wait_series(edge: &Edge, wanted: &[&str]) {
    let mut missing = Vec::new();
    let mut text = String::new();
    let all = poll_until(PATIENCE, async || {
        text = scrape(edge).await;
        missing = wanted.iter().filter(|s| !text.contains(**s)).collect();
        missing.is_empty()
    })
    .await;
    assert!(all, "waited {PATIENCE:?} for {missing:?} in:\n{text}");
}
