//! Soak: mixed load through an in-process mcp-edge for N seconds (default 600) while upstream
//! members are killed and restarted and the configuration is reloaded 10 times. Reports
//! requests sent, succeeded and failed, and classifies every failure; exits non-zero if any
//! failure is the edge's fault.
//!
//! Load: 2026-07-28 `tools/call`s, 2025 Streamable HTTP sessions (initialize, then calls with
//! the token) and 2024-11-05 HTTP+SSE streams (POST a message, wait for the reply on the
//! stream). Members are small mock MCP servers here, so the soak needs nothing installed.
//!
//! Usage: `cargo run --release --example soak -- [seconds]`

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use mcp_edge::config::Config;
use mcp_edge::{EdgeHandle, Options};
use serde_json::{json, Value};
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};

#[path = "../tests/common/http1.rs"]
mod http1;

/// The soak's requests are small; anything bigger is a bug worth an error.
const MAX_BODY_BYTES: usize = 1024 * 1024;

const META: &str = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}"#;

// ---------- mock member ----------

#[derive(Default)]
struct MemberState {
    sessions: Mutex<HashMap<String, ()>>,
    streams: Mutex<HashMap<String, mpsc::UnboundedSender<String>>>,
    next: AtomicU64,
}

struct Member {
    port: u16,
    kill: watch::Sender<bool>,
}

async fn start_member(port: u16) -> Member {
    let listener = loop {
        match TcpListener::bind(("127.0.0.1", port)).await {
            Ok(l) => break l,
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    };
    let port = listener.local_addr().map(|a| a.port()).unwrap_or(port);
    let (kill, killed) = watch::channel(false);
    let state = Arc::new(MemberState::default());
    tokio::spawn(async move {
        let mut stop = killed.clone();
        loop {
            tokio::select! {
                accepted = listener.accept() => {
                    let Ok((stream, _)) = accepted else { return };
                    let (state, mut stop) = (state.clone(), killed.clone());
                    tokio::spawn(async move {
                        tokio::select! {
                            _ = serve(stream, state, port) => {}
                            _ = stop.changed() => {}
                        }
                    });
                }
                _ = stop.changed() => return,
            }
        }
    });
    Member { port, kill }
}

async fn serve(stream: TcpStream, state: Arc<MemberState>, port: u16) -> std::io::Result<()> {
    let mut r = BufReader::new(stream);
    loop {
        let Some(head) = http1::read_head(&mut r).await? else {
            return Ok(());
        };
        let body = http1::read_body(&mut r, &head, MAX_BODY_BYTES).await?;
        let target = head.target().to_string();
        let msg: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let id = msg.get("id").cloned().unwrap_or(Value::Null);
        let w = r.get_mut();
        if head.method() == "GET" && target.starts_with("/sse") {
            let sid = format!("s{port}-{}", state.next.fetch_add(1, Ordering::Relaxed));
            let (tx, mut rx) = mpsc::unbounded_channel();
            state.streams.lock().unwrap().insert(sid.clone(), tx);
            let first = format!("event: endpoint\ndata: /messages?sessionId={sid}\n\n");
            w.write_all(format!("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n{:x}\r\n{first}\r\n", first.len()).as_bytes()).await?;
            while let Some(m) = rx.recv().await {
                let ev = format!("event: message\ndata: {m}\n\n");
                w.write_all(format!("{:x}\r\n{ev}\r\n", ev.len()).as_bytes())
                    .await?;
            }
            return Ok(());
        }
        if target.starts_with("/messages") {
            let sid = target.split("sessionId=").nth(1).unwrap_or("").to_string();
            let tx = state.streams.lock().unwrap().get(&sid).cloned();
            let status = match tx {
                Some(tx)
                    if tx
                        .send(json!({"jsonrpc":"2.0","id":id,"result":{"member":port}}).to_string())
                        .is_ok() =>
                {
                    "202 Accepted"
                }
                _ => "404 Not Found",
            };
            w.write_all(format!("HTTP/1.1 {status}\r\ncontent-length: 0\r\n\r\n").as_bytes())
                .await?;
            continue;
        }
        let method = msg.get("method").and_then(Value::as_str).unwrap_or("");
        let session = head.header("mcp-session-id");
        let (status, extra) = if method == "initialize" {
            let sid = format!("m{port}-{}", state.next.fetch_add(1, Ordering::Relaxed));
            state.sessions.lock().unwrap().insert(sid.clone(), ());
            ("200 OK", format!("mcp-session-id: {sid}\r\n"))
        } else if session.is_some_and(|s| !state.sessions.lock().unwrap().contains_key(s)) {
            ("404 Not Found", String::new())
        } else {
            ("200 OK", String::new())
        };
        let out = json!({"jsonrpc":"2.0","id":id,"result":{"member":port}}).to_string();
        w.write_all(format!("HTTP/1.1 {status}\r\ncontent-type: application/json\r\n{extra}content-length: {}\r\n\r\n{out}", out.len()).as_bytes()).await?;
    }
}

// ---------- load and classification ----------

#[derive(Default)]
struct Tally {
    sent: AtomicU64,
    ok: AtomicU64,
    failures: Mutex<BTreeMap<String, u64>>,
}

impl Tally {
    fn fail(&self, class: &str) {
        *self
            .failures
            .lock()
            .unwrap()
            .entry(class.to_string())
            .or_default() += 1;
    }
}

/// Failures a member kill explains (not the edge's fault).
const EXPECTED: &[&str] = &[
    "legacy: session lost with its member (404, re-initialised)",
    "sse: stream cut when its member was killed (reconnected)",
    "modern: in flight on a member that was killed (502)",
];

fn config_text(port: u16, keys: &str, members: &[u16], round: u32) -> String {
    let list: Vec<String> = members
        .iter()
        .map(|p| format!("\"127.0.0.1:{p}\""))
        .collect();
    format!(
        "[server]\nthreads = 2\n\n[[listeners]]\naddress = \"127.0.0.1:{port}\"\n\n[sessions]\nkeys_file = \"{keys}\"\n\n\
         [[pools]]\nname = \"soak\"\nmembers = [{}]\n[pools.health]\ncheck = \"tcp\"\ninterval_ms = {}\neject_ms = 1000\n\n\
         [[routes]]\npath = \"/mcp\"\npool = \"soak\"\nsse_path = \"/sse\"\nmessages_path = \"/messages\"\n",
        list.join(", "),
        200 + round
    )
}

async fn modern_worker(url: String, tally: Arc<Tally>, until: Instant) {
    let c = reqwest::Client::builder().no_proxy().build().unwrap();
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"echo","arguments":{{"text":"x"}},{META}}}}}"#
    );
    while Instant::now() < until {
        tally.sent.fetch_add(1, Ordering::Relaxed);
        let r = c
            .post(&url)
            .header("content-type", "application/json")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "tools/call")
            .header("mcp-name", "echo")
            .body(body.clone())
            .timeout(Duration::from_secs(10))
            .send()
            .await;
        match r {
            Ok(r) if r.status() == 200 => {
                tally.ok.fetch_add(1, Ordering::Relaxed);
            }
            Ok(r)
                if r.status() == 502
                    && r.headers()
                        .get("x-mcp-edge-error")
                        .is_some_and(|v| v == "upstream_error") =>
            {
                tally.fail(EXPECTED[2])
            }
            Ok(r) => tally.fail(&format!(
                "modern: HTTP {} {:?}",
                r.status(),
                r.headers().get("x-mcp-edge-error")
            )),
            Err(e) => tally.fail(&format!("modern: client error: {}", short(&e))),
        }
    }
}

async fn legacy_worker(url: String, tally: Arc<Tally>, until: Instant) {
    let c = reqwest::Client::builder().no_proxy().build().unwrap();
    let post = |token: Option<String>, body: Value| {
        let mut rb = c
            .post(&url)
            .header("content-type", "application/json")
            .timeout(Duration::from_secs(10));
        if let Some(t) = token {
            rb = rb
                .header("mcp-session-id", t)
                .header("mcp-protocol-version", "2025-11-25");
        }
        rb.body(body.to_string()).send()
    };
    let mut token: Option<String> = None;
    while Instant::now() < until {
        tally.sent.fetch_add(1, Ordering::Relaxed);
        if token.is_none() {
            let init = json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{}}});
            match post(None, init).await {
                Ok(r) if r.status() == 200 => {
                    token = r
                        .headers()
                        .get("mcp-session-id")
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_string);
                    tally.ok.fetch_add(1, Ordering::Relaxed);
                }
                Ok(r) => tally.fail(&format!("legacy: initialize HTTP {}", r.status())),
                Err(e) => tally.fail(&format!("legacy: initialize client error: {}", short(&e))),
            }
            continue;
        }
        match post(
            token.clone(),
            json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo"}}),
        )
        .await
        {
            Ok(r) if r.status() == 200 => {
                tally.ok.fetch_add(1, Ordering::Relaxed);
            }
            Ok(r) if r.status() == 404 => {
                // The member restarted (sessions gone) or is down: the client re-initialises.
                tally.fail(EXPECTED[0]);
                token = None;
            }
            Ok(r) => tally.fail(&format!(
                "legacy: HTTP {} {:?}",
                r.status(),
                r.headers().get("x-mcp-edge-error")
            )),
            Err(e) => tally.fail(&format!("legacy: client error: {}", short(&e))),
        }
    }
}

async fn sse_worker(base: String, tally: Arc<Tally>, until: Instant) {
    let c = reqwest::Client::builder().no_proxy().build().unwrap();
    'reconnect: while Instant::now() < until {
        let resp = match c.get(format!("{base}/sse")).send().await {
            Ok(r) => r,
            Err(e) => {
                tally.fail(&format!("sse: GET failed: {}", short(&e)));
                continue;
            }
        };
        if resp.status() != 200 {
            tally.fail(&format!("sse: GET HTTP {}", resp.status()));
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        }
        let mut stream = resp.bytes_stream();
        let mut seen = String::new();
        let endpoint = loop {
            match stream.next().await {
                Some(Ok(chunk)) => seen.push_str(&String::from_utf8_lossy(&chunk)),
                _ => continue 'reconnect,
            }
            if let Some(d) = seen.lines().find_map(|l| l.strip_prefix("data: /messages")) {
                break format!("{base}/messages{d}");
            }
        };
        let mut id = 0u64;
        while Instant::now() < until {
            id += 1;
            tally.sent.fetch_add(1, Ordering::Relaxed);
            let r = c
                .post(&endpoint)
                .header("content-type", "application/json")
                .body(json!({"jsonrpc":"2.0","id":id,"method":"tools/list"}).to_string())
                .send()
                .await;
            match r {
                Ok(r) if r.status() == 202 => {}
                Ok(r) if r.status() == 404 => {
                    tally.fail(EXPECTED[1]);
                    continue 'reconnect;
                }
                Ok(r) => {
                    tally.fail(&format!(
                        "sse: POST HTTP {} {:?}",
                        r.status(),
                        r.headers().get("x-mcp-edge-error")
                    ));
                    continue 'reconnect;
                }
                Err(_) => {
                    tally.fail("sse: POST client error");
                    continue 'reconnect;
                }
            }
            let want = format!("\"id\":{id}");
            let got = tokio::time::timeout(Duration::from_secs(5), async {
                loop {
                    if seen.contains(&want) {
                        return true;
                    }
                    match stream.next().await {
                        Some(Ok(chunk)) => seen.push_str(&String::from_utf8_lossy(&chunk)),
                        _ => return false,
                    }
                }
            })
            .await;
            match got {
                Ok(true) => {
                    tally.ok.fetch_add(1, Ordering::Relaxed);
                    seen.clear();
                }
                Ok(false) => {
                    tally.fail(EXPECTED[1]);
                    continue 'reconnect;
                }
                Err(_) => {
                    tally.fail("sse: reply never arrived");
                    continue 'reconnect;
                }
            }
        }
    }
}

/// The innermost cause of a client error, for classification.
fn short(e: &reqwest::Error) -> String {
    let mut cause: &dyn std::error::Error = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    if e.is_timeout() {
        "timeout".to_string()
    } else {
        cause.to_string().chars().take(80).collect()
    }
}

fn main() -> std::process::ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("off")).init();
    let secs: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(600);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(soak(secs))
}

async fn soak(secs: u64) -> std::process::ExitCode {
    let dir = std::env::temp_dir().join(format!("mcp-edge-soak-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let keys = dir.join("keys");
    std::fs::write(&keys, "1:MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=\n").expect("keys");
    let keys = keys.display().to_string();
    let mut members = Vec::new();
    for _ in 0..3 {
        members.push(start_member(0).await);
    }
    let ports: Vec<u16> = members.iter().map(|m| m.port).collect();
    let edge_port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("port");
    let path = dir.join("edge.toml");
    std::fs::write(&path, config_text(edge_port, &keys, &ports, 0)).expect("config");
    let config = Config::load(&path).expect("valid soak config");
    let edge = EdgeHandle::start_with(
        config,
        Options {
            config_path: Some(path.clone()),
            signals: false,
        },
    );
    while TcpStream::connect(SocketAddr::from(([127, 0, 0, 1], edge_port)))
        .await
        .is_err()
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let base = format!("http://127.0.0.1:{edge_port}");
    let tally = Arc::new(Tally::default());
    let started = Instant::now();
    let until = started + Duration::from_secs(secs);
    let mut tasks = Vec::new();
    for _ in 0..4 {
        tasks.push(tokio::spawn(modern_worker(
            format!("{base}/mcp"),
            tally.clone(),
            until,
        )));
    }
    for _ in 0..3 {
        tasks.push(tokio::spawn(legacy_worker(
            format!("{base}/mcp"),
            tally.clone(),
            until,
        )));
    }
    for _ in 0..3 {
        tasks.push(tokio::spawn(sse_worker(base.clone(), tally.clone(), until)));
    }
    // Chaos: 10 reloads and a kill/restart of one member between each, spread over the run.
    let reloader = edge.reloader.clone().expect("reloader");
    let (mut kills, mut reloads) = (0, 0);
    for round in 1..=10u32 {
        tokio::time::sleep(Duration::from_millis(secs * 1000 / 11)).await;
        let victim = (round as usize) % members.len();
        let port = members[victim].port;
        let _ = members[victim].kill.send(true);
        kills += 1;
        tokio::time::sleep(Duration::from_millis((secs * 1000 / 60).clamp(200, 2000))).await;
        members[victim] = start_member(port).await;
        std::fs::write(&path, config_text(edge_port, &keys, &ports, round)).expect("config");
        if reloader.reload().is_ok() {
            reloads += 1;
        }
    }
    for t in tasks {
        let _ = t.await;
    }
    let failures = tally.failures.lock().unwrap().clone();
    let sent = tally.sent.load(Ordering::Relaxed);
    let ok = tally.ok.load(Ordering::Relaxed);
    let failed: u64 = failures.values().sum();
    let edge_caused: u64 = failures
        .iter()
        .filter(|(k, _)| !EXPECTED.contains(&k.as_str()))
        .map(|(_, v)| v)
        .sum();
    println!("soak: {secs}s, {kills} member kills and restarts, {reloads} reloads");
    println!("requests sent {sent}, succeeded {ok}, failed {failed}");
    for (class, n) in &failures {
        let whose = if EXPECTED.contains(&class.as_str()) {
            "expected: member killed"
        } else {
            "EDGE"
        };
        println!("  {n:>7}  {class}  [{whose}]");
    }
    println!("failures caused by the edge: {edge_caused}");
    drop(edge);
    let _ = std::fs::remove_dir_all(&dir);
    if edge_caused == 0 && ok > 0 && reloads == 10 {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::FAILURE
    }
}
