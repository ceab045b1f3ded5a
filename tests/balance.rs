//! Balancing over the official TypeScript SDK server: `least_request` against a slow member,
//! `max_in_flight` as the member itself counts it, the queue (full, timed out, left by its
//! client), outlier ejection of a member that answers 500 or never answers, and a reload that
//! raises the limit while requests wait. Each member counts the POSTs it holds at once and in
//! all (`/__load`, tests/peers/README.md), so "never more than N" and "never executed" are the
//! member's word, not the edge's.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use common::peers::{ts_server, Peer};
use common::*;
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;

/// `[[pools]] main` over `members` with `pool_keys` (and `[pools.health]` keys), on `/mcp`.
fn pool(members: &[SocketAddr], pool_keys: &str, health: &str) -> String {
    let list: Vec<String> = members.iter().map(|m| format!("\"{m}\"")).collect();
    format!(
        "[[pools]]\nname = \"main\"\nmembers = [{}]\n{pool_keys}\n[pools.health]\ncheck = \"tcp\"\n{health}\n\n[[routes]]\npath = \"/mcp\"\npool = \"main\"\n",
        list.join(", ")
    )
}

async fn load(peer: &Peer) -> Value {
    let url = format!("http://{}/__load", peer.addr);
    client()
        .get(url)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

async fn set_load(peer: &Peer, query: &str) {
    let url = format!("http://{}/__load?{query}", peer.addr);
    let r = client().post(url).send().await.unwrap();
    assert_eq!(r.status(), 200);
}

fn count(v: &Value, key: &str) -> u64 {
    v[key].as_u64().unwrap_or_else(|| panic!("{key} in {v}"))
}

/// A `work` call through the edge: its status, edge error kind and body.
async fn work(url: &str, id: u64, ms: u64) -> (u16, Option<String>, Value) {
    let body = modern_body(
        json!(id),
        "tools/call",
        json!({"name": "work", "arguments": {"ms": ms}}),
    );
    let r = modern_request(&client(), url, &body).send().await.unwrap();
    answer(r, "x-mcp-edge-error").await
}

/// An answer's status, one header and its JSON-RPC message (JSON, or one SSE event: a
/// 2026-07-28 answer may come either way).
async fn answer(r: reqwest::Response, header: &str) -> (u16, Option<String>, Value) {
    let status = r.status().as_u16();
    let value = r
        .headers()
        .get(header)
        .map(|v| v.to_str().unwrap().to_string());
    let text = r.text().await.unwrap();
    let json_text = text
        .lines()
        .find_map(|l| l.strip_prefix("data: "))
        .unwrap_or(&text);
    (
        status,
        value,
        serde_json::from_str(json_text).unwrap_or(Value::Null),
    )
}

/// `workers` clients, each making `calls` calls of `ms` one after another; every status.
async fn run(url: &str, workers: u64, calls: u64, ms: u64) -> Vec<u16> {
    let url = Arc::new(url.to_string());
    let tasks: Vec<_> = (0..workers)
        .map(|w| {
            let url = url.clone();
            tokio::spawn(async move {
                let mut statuses = Vec::new();
                for i in 0..calls {
                    statuses.push(work(&url, w * 1000 + i, ms).await.0);
                }
                statuses
            })
        })
        .collect();
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    all
}

fn series(name: &str, edge: &Edge, more: &str) -> String {
    format!("{name}{{pool=\"{}\"{more}}}", edge.pool)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn least_request_sends_a_slow_member_far_less_than_its_turn() {
    let peers = [
        ts_server("modern", "fast-a"),
        ts_server("modern", "fast-b"),
        ts_server("modern", "slow"),
    ];
    set_load(&peers[2], "factor=10").await;
    let addrs: Vec<SocketAddr> = peers.iter().map(|p| p.addr).collect();
    let edge = start_edge(&pool(&addrs, "balance = \"least_request\"", ""));
    let statuses = run(&edge.url(), 9, 12, 20).await;
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    let mut calls = Vec::new();
    for p in &peers {
        calls.push(count(&load(p).await, "calls"));
    }
    let total: u64 = calls.iter().sum();
    assert_eq!(total, 108, "every call ran once: {calls:?}");
    // Round-robin would give it 36 (a third); its 200 ms against 20 ms earns it far less.
    assert!(calls[2] * 5 < total, "the slow member got {calls:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_member_ever_holds_more_than_max_in_flight() {
    let peers = [ts_server("modern", "a"), ts_server("modern", "b")];
    let addrs: Vec<SocketAddr> = peers.iter().map(|p| p.addr).collect();
    let keys = "balance = \"least_request\"\nmax_in_flight = 2\nqueue_ms = 20000";
    let edge = start_edge(&pool(&addrs, keys, ""));
    let waited_before = metric(
        &edge,
        &series("mcp_edge_pool_queue_wait_seconds_count", &edge, ""),
    )
    .await;
    let statuses = run(&edge.url(), 10, 3, 120).await;
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    let mut total = 0;
    for p in &peers {
        let l = load(p).await;
        assert!(
            count(&l, "maxInFlight") <= 2,
            "{} held more: {l}",
            p.instance
        );
        total += count(&l, "calls");
    }
    assert_eq!(total, 30, "every call ran, once");
    let waited = metric(
        &edge,
        &series("mcp_edge_pool_queue_wait_seconds_count", &edge, ""),
    )
    .await;
    assert!(
        waited > waited_before,
        "ten clients on four places: some waited"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_and_a_wait_that_runs_out_answer_503_and_reach_no_member() {
    let peer = ts_server("modern", "one");
    let keys = "max_in_flight = 1\nqueue_depth = 1\nqueue_ms = 400";
    let edge = start_edge(&pool(&[peer.addr], keys, ""));
    let url = edge.url();
    let holder = tokio::spawn({
        let url = url.clone();
        async move { work(&url, 1, 3000).await }
    });
    wait_until(PATIENCE, "the member holds the first call", async || {
        count(&load(&peer).await, "inFlight") == 1
    })
    .await;
    let queued = tokio::spawn({
        let url = url.clone();
        async move { work(&url, 2, 10).await }
    });
    let depth = series("mcp_edge_pool_queue_depth", &edge, "");
    wait_until(PATIENCE, "the second call queued", async || {
        metric(&edge, &depth).await == 1.0
    })
    .await;
    // The queue is full: refused at once, never sent.
    let (status, kind, body) = work(&url, 3, 10).await;
    assert_eq!((status, kind.as_deref()), (503, Some("pool_busy")));
    assert_eq!(body["id"], 3);
    assert_eq!(body["error"]["code"], -32000);
    // The queued one waits its 400 ms, then the same.
    let (status, kind, body) = queued.await.unwrap();
    assert_eq!(
        (status, kind.as_deref()),
        (503, Some("pool_busy")),
        "{body}"
    );
    assert_eq!(body["id"], 2);
    assert_eq!(holder.await.unwrap().0, 200);
    assert_eq!(
        count(&load(&peer).await, "calls"),
        1,
        "only the first reached it"
    );
    let rejected = |reason: &str| {
        series(
            "mcp_edge_pool_rejections_total",
            &edge,
            &format!(",reason=\"{reason}\""),
        )
    };
    assert_eq!(metric(&edge, &rejected("queue_full")).await, 1.0);
    assert_eq!(metric(&edge, &rejected("queue_timeout")).await, 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_leaves_while_queued_leaves_the_queue_at_once_and_runs_nothing() {
    let peer = ts_server("modern", "one");
    let keys = "max_in_flight = 1\nqueue_ms = 60000";
    let edge = start_edge(&pool(&[peer.addr], keys, ""));
    let url = edge.url();
    let holder = tokio::spawn({
        let url = url.clone();
        async move { work(&url, 1, 4000).await }
    });
    wait_until(PATIENCE, "the member holds the first call", async || {
        count(&load(&peer).await, "inFlight") == 1
    })
    .await;
    // A raw client: its request, then it goes away while the request waits.
    let body = modern_body(
        json!(2),
        "tools/call",
        json!({"name": "work", "arguments": {"ms": 1}}),
    );
    let body = body.to_string();
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMcp-Protocol-Version: {MODERN}\r\nMcp-Method: tools/call\r\nMcp-Name: work\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut raw = tokio::net::TcpStream::connect(("127.0.0.1", edge.port))
        .await
        .unwrap();
    raw.write_all(request.as_bytes()).await.unwrap();
    let depth = series("mcp_edge_pool_queue_depth", &edge, "");
    wait_until(PATIENCE, "the raw request queued", async || {
        metric(&edge, &depth).await == 1.0
    })
    .await;
    drop(raw);
    let left = Instant::now();
    wait_until(PATIENCE, "the queue empty again", async || {
        metric(&edge, &depth).await == 0.0
    })
    .await;
    assert_eq!(
        count(&load(&peer).await, "inFlight"),
        1,
        "it left while the first call still ran ({:?} after the client)",
        left.elapsed()
    );
    let gone = series(
        "mcp_edge_pool_rejections_total",
        &edge,
        ",reason=\"client_gone\"",
    );
    assert_eq!(metric(&edge, &gone).await, 1.0);
    assert_eq!(holder.await.unwrap().0, 200);
    assert_eq!(
        count(&load(&peer).await, "calls"),
        1,
        "the one that left never ran"
    );
    assert_eq!(work(&url, 3, 1).await.0, 200, "its room was not lost");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_answering_500_is_ejected_after_failures_in_a_row() {
    let peers = [
        ts_server("modern", "ok-a"),
        ts_server("modern", "ok-b"),
        ts_server("modern", "broken"),
    ];
    set_load(&peers[2], "fail=1").await;
    let addrs: Vec<SocketAddr> = peers.iter().map(|p| p.addr).collect();
    let edge = start_edge(&pool(
        &addrs,
        "",
        "consecutive_failures = 3\neject_ms = 60000",
    ));
    let mut failed = 0;
    for i in 0..30 {
        let (status, kind, _) = work(&edge.url(), i, 1).await;
        if status == 500 {
            // The member's own answer, passed through.
            assert_eq!(kind, None);
            failed += 1;
        } else {
            assert_eq!(status, 200);
        }
    }
    assert_eq!(failed, 3, "three in a row, then no more traffic");
    assert_eq!(count(&load(&peers[2]).await, "calls"), 3);
    // Labels sorted by name, as Prometheus writes them.
    let ejected = format!(
        "mcp_edge_upstream_ejections_total{{member=\"{}\",pool=\"{}\",reason=\"server_error\"}}",
        peers[2].addr, edge.pool
    );
    assert_eq!(metric(&edge, &ejected).await, 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_that_never_answers_is_ejected_after_timeouts() {
    let peers = [ts_server("modern", "ok"), ts_server("modern", "hung")];
    set_load(&peers[1], "hang=1").await;
    let addrs: Vec<SocketAddr> = peers.iter().map(|p| p.addr).collect();
    let body = format!(
        "[timeouts]\nupstream_read_ms = 400\n\n{}",
        pool(&addrs, "", "consecutive_failures = 2\neject_ms = 60000")
    );
    let edge = start_edge(&body);
    let mut timed_out = 0;
    for i in 0..16 {
        let (status, kind, _) = work(&edge.url(), i, 1).await;
        match status {
            504 => {
                assert_eq!(kind.as_deref(), Some("upstream_timeout"));
                timed_out += 1;
            }
            s => assert_eq!(s, 200),
        }
    }
    assert_eq!(timed_out, 2, "two timeouts in a row, then no more traffic");
    assert_eq!(count(&load(&peers[1]).await, "calls"), 2);
}

fn write(path: &std::path::Path, head: &str, body: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, format!("{head}{body}")).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_that_raises_the_limit_serves_the_waiting_requests() {
    let peer = ts_server("modern", "one");
    let keys = key_file(&format!("1:{KEY_A}"));
    let path = std::env::temp_dir().join(format!("mcp-edge-balance-{}.toml", free_port()));
    let (port, metrics_port) = (free_port(), free_port());
    let pools = Pools::fresh();
    let head = format!(
        "[server]\nthreads = 1\n\n[[listeners]]\naddress = \"127.0.0.1:{port}\"\n\n[metrics]\naddress = \"127.0.0.1:{metrics_port}\"\n\n[sessions]\nkeys_file = \"{keys}\"\n\n"
    );
    let limited = |n: u32| {
        pools.apply(&pool(
            &[peer.addr],
            &format!("max_in_flight = {n}\nqueue_ms = 30000"),
            "interval_ms = 100",
        ))
    };
    write(&path, &head, &limited(1));
    let edge = start_edge_from_file(&path, port, metrics_port, &pools);
    let calls = tokio::spawn({
        let url = edge.url();
        async move { run(&url, 6, 1, 1500).await }
    });
    let depth = series("mcp_edge_pool_queue_depth", &edge, "");
    wait_until(PATIENCE, "five calls queued behind one", async || {
        metric(&edge, &depth).await == 5.0
    })
    .await;
    write(&path, &head, &limited(3));
    edge.handle.reloader.clone().unwrap().reload().unwrap();
    wait_until(PATIENCE, "the raised limit used", async || {
        count(&load(&peer).await, "inFlight") == 3
    })
    .await;
    let statuses = calls.await.unwrap();
    assert_eq!(statuses, vec![200; 6]);
    let l = load(&peer).await;
    assert_eq!(count(&l, "calls"), 6);
    assert_eq!(
        count(&l, "maxInFlight"),
        3,
        "never above the limit in force: {l}"
    );
}

/// A 2026-07-28 `tools/call` through the edge; its result's text.
async fn text_call(url: &str, id: u64, tool: &str) -> String {
    let body = modern_body(
        json!(id),
        "tools/call",
        json!({"name": tool, "arguments": {}}),
    );
    let r = modern_request(&client(), url, &body).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    v["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("{v}"))
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_pool_with_least_request_gives_calls_to_its_least_busy_process() {
    let command = format!(
        r#"["node", "{}", "--mode", "stdio", "--instance", "io"]"#,
        common::peers::dir().join("ts-server.mjs").display()
    );
    let edge = start_edge(&format!(
        "[[pools]]\nname = \"main\"\ncommand = {command}\nprocesses = 2\nbalance = \"least_request\"\n\n[[routes]]\npath = \"/mcp\"\npool = \"main\"\n"
    ));
    let ready = format!("http://127.0.0.1:{}/readyz", edge.metrics_port);
    wait_until(PATIENCE, "the stdio pool ready", async || {
        client()
            .get(&ready)
            .send()
            .await
            .is_ok_and(|r| r.status() == 200)
    })
    .await;
    let url = edge.url();
    // Both processes answer (ties go in turn), once both have started.
    let mut pids = std::collections::BTreeSet::new();
    let mut id = 0;
    wait_until(PATIENCE, "calls answered by both processes", async || {
        id += 1;
        pids.insert(text_call(&url, id, "pid").await);
        pids.len() == 2
    })
    .await;
    // A long call on one process (its first progress says it runs)...
    let mut params = json!({"name": "slow", "arguments": {"steps": 40}});
    params["_meta"] = meta();
    params["_meta"]["progressToken"] = json!(1);
    let body = json!({"jsonrpc": "2.0", "id": 10, "method": "tools/call", "params": params});
    let mut long = modern_request(&client(), &url, &body).send().await.unwrap();
    let mut seen = String::new();
    while !seen.contains("notifications/progress") {
        let chunk = long.chunk().await.unwrap().expect("progress first");
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    // ...and every call meanwhile goes to the other one.
    let mut during = std::collections::BTreeSet::new();
    for i in 0..6 {
        during.insert(text_call(&url, 20 + i, "pid").await);
    }
    assert_eq!(during.len(), 1, "all to the idle process: {during:?}");
    drop(long);
}

/// A legacy (2025) request in session `token` (`None`: `initialize`); status, the session
/// header and the JSON-RPC message (JSON or one SSE event).
async fn legacy(url: &str, token: Option<&str>, body: Value) -> (u16, Option<String>, Value) {
    let r = legacy_request(&client(), url, token, &body)
        .send()
        .await
        .unwrap();
    answer(r, "mcp-session-id").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_waits_for_room_on_its_own_member_while_others_use_the_rest() {
    let peers = [
        ts_server("legacy-session", "a"),
        ts_server("legacy-session", "b"),
    ];
    let addrs: Vec<SocketAddr> = peers.iter().map(|p| p.addr).collect();
    let keys = "balance = \"least_request\"\nmax_in_flight = 1\nqueue_ms = 20000";
    let edge = start_edge(&pool(&addrs, keys, ""));
    let url = edge.url();
    let init = json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}});
    let (status, token, _) = legacy(&url, None, init.clone()).await;
    assert_eq!(status, 200);
    let token = token.expect("a session");
    let initialized = json!({"jsonrpc":"2.0","method":"notifications/initialized"});
    assert_eq!(legacy(&url, Some(&token), initialized).await.0, 202);
    let mut before = Vec::new();
    for p in &peers {
        before.push(count(&load(p).await, "calls"));
    }
    let owner = if before[0] > 0 { 0 } else { 1 };
    let call = |id: u64, ms: u64| json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":"work","arguments":{"ms":ms}}});
    // The session's member busy with a long call of the session's...
    let long = tokio::spawn({
        let (url, token, body) = (url.clone(), token.clone(), call(1, 1500));
        async move { legacy(&url, Some(&token), body).await }
    });
    wait_until(
        PATIENCE,
        "the session's member holds the long call",
        async || count(&load(&peers[owner]).await, "inFlight") == 1,
    )
    .await;
    // ...the session's next call waits for it (it cannot move)...
    let next = tokio::spawn({
        let (url, token, body) = (url.clone(), token.clone(), call(2, 1));
        async move { legacy(&url, Some(&token), body).await }
    });
    let depth = series("mcp_edge_pool_queue_depth", &edge, "");
    wait_until(PATIENCE, "the session's call queued", async || {
        metric(&edge, &depth).await == 1.0
    })
    .await;
    // ...while a request no session pins (another client's initialize) takes the other
    // member at once.
    let (status, other, _) = legacy(&url, None, init.clone()).await;
    assert_eq!((status, other.is_some()), (200, true));
    assert_eq!(
        count(&load(&peers[1 - owner]).await, "calls"),
        before[1 - owner] + 1
    );
    let (status, _, msg) = next.await.unwrap();
    assert_eq!(status, 200, "{msg}");
    assert_eq!(
        msg["result"]["content"][0]["text"],
        format!("{}:worked", peers[owner].instance)
    );
    assert_eq!(long.await.unwrap().0, 200);
    assert_eq!(count(&load(&peers[owner]).await, "maxInFlight"), 1);
}
