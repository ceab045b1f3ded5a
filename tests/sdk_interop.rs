//! The edge in front of official MCP SDK servers, driven by official SDK clients:
//! TypeScript `@modelcontextprotocol/server` / `client` 2.4.0 and Python `mcp` 2.3.0.

mod common;

use std::time::Duration;

use common::mock::sha256_hex;
use common::peers::{py_client, py_server, ts_client, ts_server, Peer};
use common::*;
use serde_json::{json, Value};

/// The full client script succeeded in the expected era against members of `pool`.
fn assert_run(what: &str, out: &Value, era: &str, pool: &[&Peer], expect_confirm: bool) {
    assert_eq!(out["ok"], true, "{what}: {out}");
    assert_eq!(out["era"], era, "{what}: {out}");
    if era == "modern" {
        assert_eq!(out["protocolVersion"], MODERN, "{what}: {out}");
    }
    let tools: Vec<&str> = out["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for t in ["echo", "slow", "digest"] {
        assert!(tools.contains(&t), "{what}: tools {tools:?}");
    }
    let instances: Vec<&str> = pool.iter().map(|p| p.instance.as_str()).collect();
    let echo = out["echo"].as_str().unwrap_or_default();
    assert!(
        instances.iter().any(|i| echo == format!("{i}:hi")),
        "{what}: echo {echo}"
    );
    assert_eq!(
        out["progress"], 3,
        "{what}: progress notifications over SSE"
    );
    assert!(
        out["slow"].as_str().unwrap_or_default().ends_with(":done"),
        "{what}"
    );
    assert!(
        instances.contains(&out["resource"].as_str().unwrap_or_default()),
        "{what}: resource"
    );
    assert!(
        out["prompt"]
            .as_str()
            .unwrap_or_default()
            .starts_with("Hello edge from "),
        "{what}: prompt"
    );
    if expect_confirm {
        assert!(
            out["confirm"]
                .as_str()
                .unwrap_or_default()
                .ends_with(":confirmed"),
            "{what}: MRTR round trip {out}"
        );
    }
}

fn edge_for(pool: &[&Peer]) -> Edge {
    let members: Vec<_> = pool.iter().map(|p| p.addr).collect();
    start_edge(&pool_and_route(&members, ""))
}

#[test]
fn ts_modern_only_servers_with_ts_and_python_clients() {
    let (a, b) = (ts_server("modern", "a"), ts_server("modern", "b"));
    let edge = edge_for(&[&a, &b]);
    let url = edge.url();
    assert_run(
        "ts auto",
        &ts_client(&url, &["--mode", "auto"]),
        "modern",
        &[&a, &b],
        true,
    );
    assert_run(
        "ts pinned",
        &ts_client(&url, &["--mode", "pin"]),
        "modern",
        &[&a, &b],
        true,
    );
    assert_run("py auto", &py_client(&url, &[]), "modern", &[&a, &b], true);
    assert_run(
        "py pinned",
        &py_client(&url, &["--mode", "2026-07-28"]),
        "modern",
        &[&a, &b],
        true,
    );
    // Stateless traffic is spread over both members.
    assert!(
        a.requests() > 5 && b.requests() > 5,
        "round-robin: a={} b={}",
        a.requests(),
        b.requests()
    );
}

#[test]
fn ts_dual_era_servers_serve_modern_and_legacy_clients() {
    let (a, b) = (ts_server("dual", "a"), ts_server("dual", "b"));
    let edge = edge_for(&[&a, &b]);
    let url = edge.url();
    assert_run(
        "ts legacy",
        &ts_client(&url, &["--mode", "legacy"]),
        "legacy",
        &[&a, &b],
        false,
    );
    assert_run(
        "ts auto",
        &ts_client(&url, &["--mode", "auto"]),
        "modern",
        &[&a, &b],
        true,
    );
    assert_run("py auto", &py_client(&url, &[]), "modern", &[&a, &b], true);
    assert_run(
        "py legacy",
        &py_client(&url, &["--mode", "legacy"]),
        "legacy",
        &[&a, &b],
        false,
    );
}

#[test]
fn python_servers_with_python_and_ts_clients() {
    let args = ["--transport", "streamable-http", "--stateless"];
    let (a, b) = (py_server(&args, "a"), py_server(&args, "b"));
    let edge = edge_for(&[&a, &b]);
    let url = edge.url();
    assert_run("py auto", &py_client(&url, &[]), "modern", &[&a, &b], true);
    assert_run(
        "ts auto",
        &ts_client(&url, &["--mode", "auto"]),
        "modern",
        &[&a, &b],
        true,
    );
    assert_run(
        "ts pinned",
        &ts_client(&url, &["--mode", "pin"]),
        "modern",
        &[&a, &b],
        true,
    );
    assert!(
        a.requests() > 3 && b.requests() > 3,
        "round-robin: a={} b={}",
        a.requests(),
        b.requests()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_edge_rejects_before_the_sdk_server_and_passes_its_answers_through() {
    let a = ts_server("modern", "a");
    let edge = edge_for(&[&a]);
    let c = client();
    let body = modern_body(
        json!(3),
        "tools/call",
        json!({"name": "echo", "arguments": {"text": "x"}}),
    );
    let mismatched = c
        .post(edge.url())
        .header("content-type", "application/json")
        .header("mcp-protocol-version", MODERN)
        .header("mcp-method", "tools/call")
        .header("mcp-name", "nope")
        .body(body.to_string());
    assert_rejected(
        &a,
        "Mcp-Name differs from the body",
        &Expect::edge(400, "header_mismatch_name", -32020, json!(3)),
        exchange(mismatched),
    )
    .await;
    let before = a.requests();

    // An error the SDK server raises itself (unknown method: 404 -32601) passes through.
    let resp = modern_request(
        &c,
        &edge.url(),
        &modern_body(json!(4), "nope/nope", json!({})),
    )
    .send()
    .await
    .unwrap();
    assert_eq!(resp.status(), 404);
    assert!(resp.headers().get("x-mcp-edge-error").is_none());
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["error"]["code"], -32601);
    // The server's log is read by another thread: wait for the line, then count exactly.
    wait_until(PATIENCE, "the SDK server to log the request", async || {
        a.requests() > before
    })
    .await;
    assert_eq!(a.requests(), before + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_mib_tool_call_reaches_sdk_servers_intact() {
    let ts = ts_server("modern", "ts");
    let py = py_server(&["--transport", "streamable-http", "--stateless"], "py");
    let edge = edge_for(&[&ts, &py]);
    let data: String = "é-mcp-edge-".repeat(100_000); // multi-byte UTF-8, ~1.2 MB
    let want = sha256_hex(data.as_bytes());
    for _ in 0..2 {
        let body = modern_body(
            json!(7),
            "tools/call",
            json!({"name": "digest", "arguments": {"data": data}}),
        );
        let resp = modern_request(&client(), &edge.url(), &body)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        let v: Value = resp.json().await.unwrap();
        assert_eq!(v["result"]["content"][0]["text"], want.as_str(), "{v}");
    }
}

#[test]
fn closing_the_stream_cancels_the_tool_on_the_sdk_server() {
    let a = ts_server("modern", "a");
    let p = py_server(&["--transport", "streamable-http", "--stateless"], "p");
    for (peer, is_ts) in [(&a, true), (&p, false)] {
        let edge = edge_for(&[peer]);
        let out = if is_ts {
            ts_client(&edge.url(), &["--mode", "pin", "--hang-ms", "500"])
        } else {
            py_client(&edge.url(), &["--mode", "2026-07-28", "--hang-ms", "500"])
        };
        assert_eq!(out["aborted"], true, "{out}");
        // Well inside the edge's 60 s read timeout, the only other thing that ends the call.
        peer.wait_stderr(
            "ABORTED hang",
            Duration::from_secs(15),
            &format!("{}: the SDK server to see the cancellation", peer.instance),
        );
    }
}
