//! Shared test helpers: ephemeral ports, an in-process edge, and a fault-injecting mock
//! MCP upstream speaking plain HTTP/1.1 over tokio.
#![allow(dead_code)]

pub mod balancer;
pub mod mock;
pub mod peers;

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use mcp_edge::config::Config;
use mcp_edge::EdgeHandle;
use serde_json::{json, Value};

pub const MODERN: &str = "2026-07-28";

/// A port that was free a moment ago.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Wait until something accepts connections on `addr`.
pub fn wait_listening(addr: SocketAddr) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("nothing listening on {addr}");
}

pub struct Edge {
    pub handle: EdgeHandle,
    pub port: u16,
    pub metrics_port: u16,
}

impl Edge {
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }
    pub fn metrics_url(&self) -> String {
        format!("http://127.0.0.1:{}/metrics", self.metrics_port)
    }
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

/// As [`start_edge`], on a given port (to restart an edge in place).
pub fn start_edge_on(port: u16, body: &str) -> Edge {
    let metrics_port = free_port();
    let sessions = if body.contains("[sessions]") {
        String::new()
    } else {
        sessions_section(&format!("1:{KEY_A}"))
    };
    let text = format!(
        "[server]\nthreads = 1\n\n[[listeners]]\naddress = \"127.0.0.1:{port}\"\n\n[metrics]\naddress = \"127.0.0.1:{metrics_port}\"\n\n{sessions}{body}"
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
    }
}

/// `[[pools]]` + `[[routes]]` for one pool on `/mcp`.
pub fn pool_and_route(members: &[SocketAddr], extra_route: &str) -> String {
    let list: Vec<String> = members.iter().map(|m| format!("\"{m}\"")).collect();
    format!(
        "[[pools]]\nname = \"main\"\nmembers = [{}]\n\n[[routes]]\npath = \"/mcp\"\npool = \"main\"\n{extra_route}\n",
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

/// The edge's whole Prometheus scrape.
pub async fn scrape(edge: &Edge) -> String {
    client()
        .get(edge.metrics_url())
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// Current value of a counter/gauge sample line in a Prometheus scrape (0 when absent).
pub async fn metric(edge: &Edge, name_and_labels: &str) -> f64 {
    scrape(edge)
        .await
        .lines()
        .find_map(|l| {
            l.strip_prefix(name_and_labels)
                .and_then(|rest| rest.trim().parse().ok())
        })
        .unwrap_or(0.0)
}

/// Poll a metric until it reaches `at_least` (metrics are recorded in the logging phase,
/// just after the response is written), returning the last value seen.
pub async fn wait_metric(edge: &Edge, name_and_labels: &str, at_least: f64) -> f64 {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let v = metric(edge, name_and_labels).await;
        if v >= at_least || Instant::now() > deadline {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
