//! What one request can make the edge hold, measured on the binary (`/proc/<pid>/status`):
//! any body within `limits.max_body_bytes` costs at most about twice its size whatever its
//! shape, and a request body is let go once the upstream has it, however long its response
//! stream lives.

mod common;

use std::time::Duration;

use common::edge_process::{memory, spawn_with, temp_config, Proc};
use common::mock::{Behavior, Mock, Pace};
use common::*;
use futures_util::StreamExt;
use serde_json::json;

const MIB: usize = 1024 * 1024;
/// The default `limits.max_body_bytes`.
const LIMIT: usize = 4 * MIB;

/// jemalloc returns freed pages at once, so resident memory shows what is still held and
/// one request's freed pages do not add to the next one's peak.
const NO_DECAY: [(&str, &str); 2] = [
    ("_RJEM_MALLOC_CONF", "dirty_decay_ms:0,muzzy_decay_ms:0"),
    ("MALLOC_CONF", "dirty_decay_ms:0,muzzy_decay_ms:0"),
];

/// The binary with the default limits, a legacy-capable `/mcp` and a modern-only `/modern`.
fn edge(member: std::net::SocketAddr, env: &[(&str, &str)]) -> Proc {
    let (path, port) = (temp_config(), free_port());
    let list = format!("\"{member}\"");
    let text = format!(
        "[server]\nthreads = 2\n\n[[listeners]]\naddress = \"127.0.0.1:{port}\"\n\n{}[[pools]]\nname = \"main\"\nmembers = [{list}]\n[pools.health]\ncheck = \"none\"\n\n[[routes]]\npath = \"/mcp\"\npool = \"main\"\n\n[[routes]]\npath = \"/modern\"\npool = \"main\"\nversions = [\"2026-07-28\"]\n",
        sessions_section(&format!("1:{KEY_A}")),
    );
    std::fs::write(&path, text).unwrap();
    spawn_with(&path, port, env)
}

/// Pad `prefix … suffix` with `unit` repeated to just under the limit.
fn fill(prefix: &str, unit: &str, sep: &str, suffix: &str) -> String {
    let room = LIMIT - prefix.len() - suffix.len() - 64;
    let n = room / (unit.len() + sep.len());
    let mut s = String::with_capacity(LIMIT);
    s.push_str(prefix);
    for i in 0..n {
        if i > 0 {
            s.push_str(sep);
        }
        s.push_str(unit);
    }
    s.push_str(suffix);
    s
}

/// Bodies within the limit whose naive parse costs many times their size.
fn hostile_bodies() -> Vec<(&'static str, String)> {
    let meta = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}"#;
    let many_keys = {
        let mut s = String::from(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"#);
        let mut i = 0;
        while s.len() < LIMIT - 128 {
            s.push_str(&format!(r#""k{i}":0,"#));
            i += 1;
        }
        s.push_str(meta);
        s.push_str("}}");
        s
    };
    vec![
        ("a batch of two million zeros", fill("[", "0", ",", "]")),
        ("a batch of empty objects", fill("[", "{}", ",", "]")),
        (
            "an id of two million elements",
            fill(
                r#"{"jsonrpc":"2.0","method":"tools/list","id":["#,
                "0",
                ",",
                "]}",
            ),
        ),
        (
            "an array argument",
            fill(
                r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{"a":["#,
                "0",
                ",",
                &format!("]}},{meta}}}}}"),
            ),
        ),
        (
            "deep nesting",
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"x","params":{{"a":{}{}}}}}"#,
                "[".repeat(LIMIT / 2 - 64),
                "]".repeat(LIMIT / 2 - 64)
            ),
        ),
        (
            "an escaped name",
            fill(
                r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":""#,
                "\\u0041",
                "",
                &format!("\",{meta}}}}}"),
            ),
        ),
        ("many keys", many_keys),
        (
            "a huge number",
            fill(
                r#"{"jsonrpc":"2.0","id":1,"method":"x","params":{"n":"#,
                "9",
                "",
                "}}",
            ),
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_body_within_the_limit_costs_at_most_twice_its_size() {
    let member = Mock::start(Behavior::Json).await;
    let edge = edge(member.addr, &NO_DECAY);
    let c = client();
    let send = |path: &'static str, body: String| {
        c.post(format!("http://127.0.0.1:{}{path}", edge.port))
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    // Warm up: connections, threads and allocator arenas exist before the baseline.
    for path in ["/mcp", "/modern"] {
        let body = modern_body(json!(0), "tools/list", json!({})).to_string();
        assert!(send(path, body).await.is_ok());
    }
    let (_, base) = memory(edge.child.id());
    for (what, body) in hostile_bodies() {
        assert!(body.len() <= LIMIT, "{what}: {} bytes", body.len());
        for path in ["/mcp", "/modern"] {
            let resp = send(path, body.clone()).await.unwrap();
            assert!(
                resp.status().as_u16() < 500,
                "{what} on {path}: {}",
                resp.status()
            );
            let (_, peak) = memory(edge.child.id());
            let grown = peak.saturating_sub(base);
            eprintln!("{what} on {path}: peak +{} KiB", grown / 1024);
            assert!(
                grown <= 2 * LIMIT as u64,
                "{what} on {path}: peak resident memory grew by {} MiB for one {} MiB body",
                grown / MIB as u64,
                body.len() / MIB
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_stream_does_not_pin_its_request_body() {
    const STREAMS: usize = 12;
    let member = Mock::start(Behavior::Sse {
        frames: vec![(Pace::Now, "event: message\ndata: {}\n\n".into())],
        hold: Duration::from_secs(120),
    })
    .await;
    let edge = edge(member.addr, &NO_DECAY);
    let c = client();
    let listen = |id: usize| {
        let body = fill(
            &format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"subscriptions/listen","params":{{"_meta":{{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}},"pad":""#
            ),
            "x",
            "",
            "\"}}",
        );
        c.post(format!("http://127.0.0.1:{}/mcp", edge.port))
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", MODERN)
            .header("mcp-method", "subscriptions/listen")
            .body(body)
            .send()
    };
    let (base, _) = memory(edge.child.id());
    let mut open = Vec::new();
    for id in 0..STREAMS {
        let resp = listen(id).await.unwrap();
        assert_eq!(resp.status(), 200);
        let mut stream = resp.bytes_stream();
        // The first event: the upstream has the whole request and answers.
        let first = stream.next().await.unwrap().unwrap();
        assert!(first.starts_with(b"event: message"), "{first:?}");
        open.push(stream);
    }
    let (now, _) = memory(edge.child.id());
    let held = now.saturating_sub(base);
    eprintln!("{STREAMS} streams hold {} KiB", held / 1024);
    // Pinned bodies would hold STREAMS × 4 MiB; a stream's own state is tens of KiB.
    assert!(
        held < (STREAMS * LIMIT / 4) as u64,
        "{STREAMS} open streams hold {} MiB: their request bodies are still pinned",
        held / MIB as u64
    );
    drop(open);
}
