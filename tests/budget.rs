//! A replica under hostile load stays inside its container's memory limit (issue 16):
//! thousands of stalled request heads and hundreds of stalled uploads against the default
//! configuration, while a normal request is still served quickly.

mod common;

use std::time::{Duration, Instant};

use common::edge_process::{memory, spawn_with, temp_config, Proc};
use common::mock::{Behavior, Mock};
use common::*;
use serde_json::json;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

const MIB: u64 = 1024 * 1024;
/// The memory limit of the shipped Deployment (deploy/base/deployment.yaml).
const DEPLOYMENT_LIMIT: u64 = 512 * MIB;

/// The binary with the default limits (only the listener, pool and route are set).
fn edge(member: std::net::SocketAddr, extra: &str, env: &[(&str, &str)]) -> (Proc, u16) {
    let (path, port, metrics_port) = (temp_config(), free_port(), free_port());
    let text = format!(
        "[server]\nthreads = 2\n\n[[listeners]]\naddress = \"127.0.0.1:{port}\"\n\n[metrics]\naddress = \"127.0.0.1:{metrics_port}\"\n\n{extra}\n{}",
        unchecked_pool_and_route(&[member], "versions = [\"2026-07-28\"]")
    );
    std::fs::write(&path, text).unwrap();
    (spawn_with(&path, port, env), metrics_port)
}

/// Open `n` connections that each send half a request head and then stall.
async fn stalled_heads(port: u16, n: usize) -> Vec<TcpStream> {
    let mut held = Vec::with_capacity(n);
    for _ in 0..n {
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)).await else {
            continue;
        };
        if s.write_all(b"POST /mcp HTTP/1.1\r\nHost: x\r\n")
            .await
            .is_ok()
        {
            held.push(s);
        }
    }
    held
}

/// Open `n` uploads of `size` bytes that stall one byte short.
async fn stalled_uploads(port: u16, n: usize, size: usize) -> Vec<TcpStream> {
    let chunk = vec![b'x'; 64 * 1024];
    let mut held = Vec::with_capacity(n);
    for _ in 0..n {
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)).await else {
            continue;
        };
        let head = format!(
            "POST /mcp HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\ncontent-length: {size}\r\n\r\n"
        );
        if s.write_all(head.as_bytes()).await.is_err() {
            continue;
        }
        let mut sent = 0;
        while sent + 1 < size {
            let n = chunk.len().min(size - 1 - sent);
            if s.write_all(&chunk[..n]).await.is_err() {
                break;
            }
            sent += n;
        }
        held.push(s);
    }
    held
}

/// The issue's scenario against the default configuration: thousands of stalled heads and
/// hundreds of stalled 3.5 MiB uploads. Without a budget this took the edge past 1 GiB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_heads_and_uploads_stay_inside_the_deployment_limit() {
    let member = Mock::start(Behavior::Json).await;
    let (edge, metrics_port) = edge(member.addr, "", &[]);
    let (base, _) = memory(edge.child.id());
    let heads = stalled_heads(edge.port, 9000).await;
    let (with_heads, _) = memory(edge.child.id());
    eprintln!(
        "baseline RSS {} MiB; {} stalled heads hold {} MiB ({} B each, most closed for room)",
        base / MIB,
        heads.len(),
        with_heads.saturating_sub(base) / MIB,
        with_heads.saturating_sub(base) / heads.len().max(1) as u64
    );
    let uploads = stalled_uploads(edge.port, 200, 3 * 1024 * 1024 + 512 * 1024).await;
    // Meanwhile a well-behaved client is served promptly.
    let c = client();
    let body = modern_body(json!(1), "tools/list", json!({}));
    let started = Instant::now();
    let resp = modern_request(&c, &edge.url(), &body).send().await.unwrap();
    let took = started.elapsed();
    let (_, peak) = memory(edge.child.id());
    eprintln!(
        "{} stalled heads, {} stalled uploads: peak RSS {} MiB; a normal request: {} in {took:?}",
        heads.len(),
        uploads.len(),
        peak / MIB,
        resp.status()
    );
    assert_eq!(resp.status(), 200);
    // Served, not starved: a bound for a machine busy with other work too (it took 1.5 s
    // once with the benchmark running beside the suite).
    assert!(
        took < Duration::from_secs(5),
        "a normal request took {took:?}"
    );
    assert!(
        peak < DEPLOYMENT_LIMIT,
        "peak RSS {} MiB is past the Deployment's 512 MiB",
        peak / MIB
    );
    let scrape = reqwest::get(format!("http://127.0.0.1:{metrics_port}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let pushed_back: f64 = scrape
        .lines()
        .filter(|l| {
            l.starts_with("mcp_edge_memory_budget_refusals_total")
                || l.starts_with("mcp_edge_memory_evictions_total")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert!(pushed_back > 0.0, "the budget never pushed back:\n{scrape}");
    drop((heads, uploads));
}

/// Budget settings small enough to reach with a few connections.
/// The memory-budget gauges are process-wide: every edge started in this test process sets
/// them. Tests with in-process edges take turns, so one test's edge cannot overwrite the
/// figure another test is waiting for. (Edges run as processes have their own.)
async fn in_process_budget() -> tokio::sync::MutexGuard<'static, ()> {
    static GAUGE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    GAUGE.lock().await
}

fn small_budget(member: std::net::SocketAddr, budget: usize, extra: &str) -> Edge {
    start_edge(&format!(
        "[limits]\nmemory_budget_bytes = {budget}\n{extra}\n{}",
        unchecked_pool_and_route(&[member], "")
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_past_the_budget_gets_503_with_retry_after_and_is_counted() {
    let _gauge = in_process_budget().await;
    let member = Mock::start(Behavior::Json).await;
    let edge = small_budget(member.addr, 2 * 1024 * 1024, "");
    let before = metric(
        &edge,
        "mcp_edge_memory_budget_refusals_total{what=\"body\"}",
    )
    .await;
    let big = modern_body(
        json!(5),
        "tools/call",
        json!({"name": "t", "arguments": {"x": "y".repeat(3 * 1024 * 1024)}}),
    );
    let resp = modern_request(&client(), &edge.url(), &big)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 503);
    assert_eq!(resp.headers()["x-mcp-edge-error"], "overloaded");
    assert_eq!(resp.headers()["retry-after"], "1");
    let after = metric(
        &edge,
        "mcp_edge_memory_budget_refusals_total{what=\"body\"}",
    )
    .await;
    assert!(after > before, "refusal not counted ({before} → {after})");
    assert_eq!(member.heads(), 0);
    // Within the budget, the same edge serves.
    let small = modern_body(json!(6), "tools/list", json!({}));
    let resp = modern_request(&client(), &edge.url(), &small)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_heads_make_room_for_a_well_behaved_client() {
    let _gauge = in_process_budget().await;
    let member = Mock::start(Behavior::Json).await;
    // Room for about twenty connections; the head deadline far away, so that only the budget
    // closes the stalled heads (however slowly this busy machine opens them).
    let edge = small_budget(
        member.addr,
        20 * 48 * 1024,
        "[timeouts]\nrequest_head_ms = 600000\n",
    );
    let mut held = stalled_heads(edge.port, 40).await;
    // The kernel accepts the connections before the edge does: wait until the edge holds
    // enough of them to fill the budget, so the next client needs room made for it.
    wait_metric(
        &edge,
        "mcp_edge_memory_budget_used_bytes",
        (20 * 48 * 1024) as f64,
    )
    .await;
    let body = modern_body(json!(1), "tools/list", json!({}));
    // Once the heads count as stalled, a new client gets in: the oldest stalled go.
    wait_until(
        PATIENCE,
        "a well-behaved request served beside 40 stalled heads",
        async || {
            let resp = modern_request(&client(), &edge.url(), &body).send().await;
            resp.is_ok_and(|r| r.status() == 200)
        },
    )
    .await;
    let evicted = metric(
        &edge,
        "mcp_edge_memory_evictions_total{reason=\"stalled_head\"}",
    )
    .await;
    assert!(evicted >= 1.0, "no stalled head was closed");
    // The oldest ones were closed: reading from them ends.
    let first = &mut held[0];
    let mut buf = [0u8; 16];
    let read = tokio::time::timeout(PATIENCE, tokio::io::AsyncReadExt::read(first, &mut buf)).await;
    assert!(
        matches!(read, Ok(Ok(0)) | Ok(Err(_))),
        "the oldest stalled head is still open"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_that_never_completes_is_closed_at_the_deadline() {
    let _gauge = in_process_budget().await;
    let member = Mock::start(Behavior::Json).await;
    let edge = start_edge(&format!(
        "[timeouts]\nrequest_head_ms = 300\n\n{}",
        unchecked_pool_and_route(&[member.addr], "")
    ));
    let before = metric(&edge, "mcp_edge_request_head_timeouts_total").await;
    let started = Instant::now();
    let mut s = TcpStream::connect(("127.0.0.1", edge.port)).await.unwrap();
    // A byte at a time: each read is quick, the head never ends.
    let closed = tokio::time::timeout(PATIENCE, async {
        loop {
            if s.write_all(b"X").await.is_err() {
                return;
            }
            let mut buf = [0u8; 16];
            match tokio::time::timeout(
                Duration::from_millis(50),
                tokio::io::AsyncReadExt::read(&mut s, &mut buf),
            )
            .await
            {
                Ok(Ok(0)) | Ok(Err(_)) => return,
                _ => {}
            }
        }
    })
    .await;
    assert!(
        closed.is_ok(),
        "a dribbled head held its connection past {PATIENCE:?}"
    );
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "closed before the deadline"
    );
    assert!(metric(&edge, "mcp_edge_request_head_timeouts_total").await > before);
    assert_eq!(member.heads(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_honest_upload_completes_and_a_trickle_is_cut() {
    let _gauge = in_process_budget().await;
    let member = Mock::start(Behavior::Json).await;
    let edge = start_edge(&format!(
        "[limits]\nmin_upload_bytes_per_second = 32768\n\n[timeouts]\nrequest_body_ms = 500\n\n{}",
        unchecked_pool_and_route(&[member.addr], "")
    ));
    let upload = |rate_per_100ms: usize, total: usize| {
        let port = edge.port;
        async move {
            let body = modern_body(
                json!(1),
                "tools/call",
                json!({"name": "t", "arguments": {"x": "y".repeat(total)}}),
            )
            .to_string();
            let head = format!("POST /mcp HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nmcp-protocol-version: {MODERN}\r\nmcp-method: tools/call\r\nmcp-name: t\r\nconnection: close\r\ncontent-length: {}\r\n\r\n", body.len());
            let mut s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
            s.write_all(head.as_bytes()).await.unwrap();
            let mut pacer = tokio::time::interval(Duration::from_millis(100));
            for part in body.as_bytes().chunks(rate_per_100ms) {
                pacer.tick().await;
                if s.write_all(part).await.is_err() {
                    break;
                }
            }
            let mut out = Vec::new();
            let _ = tokio::time::timeout(
                PATIENCE,
                tokio::io::AsyncReadExt::read_to_end(&mut s, &mut out),
            )
            .await;
            String::from_utf8_lossy(&out).into_owned()
        }
    };
    // 12.8 KiB every 100 ms (128 KiB/s) for 256 KiB: about two seconds, four times the floor.
    let honest = upload(13_107, 256 * 1024).await;
    assert!(
        honest.starts_with("HTTP/1.1 200"),
        "honest upload: {honest}"
    );
    // 1 KiB every 100 ms (10 KiB/s): under the floor once the grace period has passed.
    let trickle = upload(1024, 256 * 1024).await;
    assert!(trickle.starts_with("HTTP/1.1 408"), "trickle: {trickle}");
    assert!(trickle.contains("body_timeout"), "{trickle}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uploads_that_only_declare_a_large_body_hold_what_they_sent() {
    let _gauge = in_process_budget().await;
    let member = Mock::start(Behavior::Json).await;
    let edge = small_budget(member.addr, 2 * 1024 * 1024, "");
    // Five uploads that each announce 1 MiB and send a few bytes: they hold a few bytes.
    let mut trickles = Vec::new();
    for _ in 0..5 {
        let mut s = TcpStream::connect(("127.0.0.1", edge.port)).await.unwrap();
        let head = "POST /mcp HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 1048576\r\n\r\n{\"a\":";
        s.write_all(head.as_bytes()).await.unwrap();
        trickles.push(s);
    }
    let body = modern_body(
        json!(7),
        "tools/call",
        json!({"name": "t", "arguments": {"x": "y".repeat(512 * 1024)}}),
    );
    wait_until(
        PATIENCE,
        "the trickling uploads' first bytes to be read",
        async || metric(&edge, "mcp_edge_memory_budget_used_bytes").await > 0.0,
    )
    .await;
    let resp = modern_request(&client(), &edge.url(), &body)
        .send()
        .await
        .unwrap();
    assert_eq!(
        resp.status(),
        200,
        "a real body was refused beside five announcements"
    );
    drop(trickles);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_head_past_the_limit_is_answered_431() {
    let _gauge = in_process_budget().await;
    let member = Mock::start(Behavior::Json).await;
    let edge = start_edge(&unchecked_pool_and_route(&[member.addr], ""));
    let mut s = TcpStream::connect(("127.0.0.1", edge.port)).await.unwrap();
    let mut head = String::from("POST /mcp HTTP/1.1\r\nhost: x\r\n");
    while head.len() < 40 * 1024 {
        head.push_str("x-filler: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n");
    }
    let _ = s.write_all(head.as_bytes()).await;
    let mut out = Vec::new();
    let _ = tokio::time::timeout(
        PATIENCE,
        tokio::io::AsyncReadExt::read_to_end(&mut s, &mut out),
    )
    .await;
    let text = String::from_utf8_lossy(&out);
    assert!(text.starts_with("HTTP/1.1 431"), "{text}");
    assert!(
        text.contains("x-mcp-edge-error: headers_too_large"),
        "{text}"
    );
    assert_eq!(member.heads(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_kept_alive_connections_make_room_for_new_ones() {
    let _gauge = in_process_budget().await;
    let member = Mock::start(Behavior::Json).await;
    // Room for about twenty connections; thirty clients each keep theirs open after a call.
    let edge = small_budget(member.addr, 20 * 48 * 1024, "");
    let body = modern_body(json!(1), "tools/list", json!({}));
    let mut idle = Vec::new();
    for round in 0..30 {
        // Once the earlier connections have been idle a moment, a new client gets in.
        let c = client();
        wait_until(PATIENCE, &format!("client {round} served"), async || {
            let resp = modern_request(&c, &edge.url(), &body).send().await;
            resp.is_ok_and(|r| r.status() == 200)
        })
        .await;
        idle.push(c);
    }
    let evicted = metric(
        &edge,
        "mcp_edge_memory_evictions_total{reason=\"idle_connection\"}",
    )
    .await;
    assert!(evicted >= 1.0, "no idle connection was closed for room");
}

/// What a connection still sending its first head costs, now that the edge reads that head
/// itself: well under Pingora's session state (≈ 45 KiB per stalled head when Pingora held
/// them, measured by this test's predecessor on commit 56c4f4a).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_head_costs_less_than_a_pingora_session() {
    const HEADS: usize = 2000;
    let member = Mock::start(Behavior::Json).await;
    // A budget large enough that none is closed for room.
    let (edge, _) = edge(
        member.addr,
        "[limits]\nmemory_budget_bytes = 1073741824\n",
        &[],
    );
    let (base, _) = memory(edge.child.id());
    let heads = stalled_heads(edge.port, HEADS).await;
    assert_eq!(heads.len(), HEADS);
    let (now, _) = memory(edge.child.id());
    let each = now.saturating_sub(base) / HEADS as u64;
    eprintln!("{HEADS} stalled heads: {} B each", each);
    assert!(each < 40 * 1024, "a stalled head costs {each} B");
}

/// The same against a TLS listener: thousands of handshakes stalled inside a ClientHello that
/// claims 64 KiB (each has sent 48 KiB of it; rustls and Pingora buffer that much) stay
/// inside the Deployment's limit, and a well-behaved TLS client is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_tls_handshakes_stay_inside_the_deployment_limit() {
    let pki = common::tls::Pki::new();
    let cert = pki.issue(&["localhost"]);
    let member = Mock::start(Behavior::Json).await;
    let (path, port) = (temp_config(), free_port());
    let text = format!(
        "[server]\nthreads = 2\n\n[[listeners]]\naddress = \"127.0.0.1:{port}\"\n[listeners.tls]\ncertificates = [{{ cert = \"{}\", key = \"{}\" }}]\n\n{}",
        cert.cert.display(),
        cert.key.display(),
        unchecked_pool_and_route(&[member.addr], "versions = [\"2026-07-28\"]")
    );
    std::fs::write(&path, text).unwrap();
    let edge = spawn_with(&path, port, &[]);
    // A handshake record of 16 KiB starting a ClientHello that claims 65,520 bytes, and two
    // more records of it: 48 KiB of a message that never completes.
    let mut hello = vec![
        0x16, 0x03, 0x01, 0x40, 0x00, 0x01, 0x00, 0xff, 0xf0, 0x03, 0x03,
    ];
    hello.resize(5 + 16 * 1024, 0);
    for _ in 0..2 {
        hello.extend_from_slice(&[0x16, 0x03, 0x01, 0x40, 0x00]);
        hello.resize(hello.len() + 16 * 1024, 0);
    }
    let mut held = Vec::new();
    for _ in 0..4000 {
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)).await else {
            continue;
        };
        if s.write_all(&hello).await.is_ok() {
            held.push(s);
        }
    }
    let c = pki.client(false);
    let url = format!("https://localhost:{port}/mcp");
    // A new connection may be refused (closed) while the budget is full and no stalled
    // handshake is old enough to be closed for room yet; a client then connects again.
    let (mut resp, mut took, mut refused) = (None, Duration::ZERO, 0);
    let served = poll_until(PATIENCE, async || {
        let started = Instant::now();
        match modern_request(&c, &url, &modern_body(json!(1), "tools/list", json!({})))
            .send()
            .await
        {
            Ok(r) => {
                (resp, took) = (Some(r), started.elapsed());
                true
            }
            Err(_) => {
                refused += 1;
                false
            }
        }
    })
    .await;
    assert!(
        served,
        "a TLS client was never served beside the stalled handshakes"
    );
    let resp = resp.unwrap();
    eprintln!("new connections refused before one was served: {refused}");
    let (_, peak) = memory(edge.child.id());
    eprintln!(
        "{} stalled ClientHellos: peak RSS {} MiB; a TLS request: {} in {took:?}",
        held.len(),
        peak / MIB,
        resp.status()
    );
    assert_eq!(resp.status(), 200);
    assert!(took < Duration::from_secs(5), "a TLS request took {took:?}");
    assert!(
        peak < DEPLOYMENT_LIMIT,
        "peak RSS {} MiB is past the Deployment's 512 MiB",
        peak / MIB
    );
    drop(held);
}
