//! Versions learned from the pool: the `mcp` health check reads each member's
//! `server/discover` answer (and asks once whether it takes a legacy `initialize`), and the
//! route then answers -32022 with what the members really speak, as the server would.

mod common;

use std::time::Duration;

use common::peers::{ts_client, ts_server, Peer};
use common::*;
use serde_json::{json, Value};

/// A pool of `members` with `mcp` checks that run at start and then not again for a minute,
/// so what reaches a member after learning is the test's own traffic.
fn learning_pool(members: &[&Peer], extra_route: &str) -> String {
    let addrs: Vec<_> = members.iter().map(|p| p.addr).collect();
    pool_with_health(
        &addrs,
        "check = \"mcp\"\ninterval_ms = 60000\ntimeout_ms = 5000",
        extra_route,
    )
}

async fn wait_revision(edge: &Edge, revision: &str, value: f64) {
    let series = format!(
        "mcp_edge_pool_revisions{{pool=\"{}\",revision=\"{revision}\"}}",
        edge.pool
    );
    let mut seen = None;
    let reached = poll_until(PATIENCE, async || {
        let text = scrape(edge).await;
        seen = text.lines().find_map(|l| {
            l.strip_prefix(series.as_str())
                .and_then(|v| v.trim().parse::<f64>().ok())
        });
        seen == Some(value)
    })
    .await;
    assert!(reached, "{series} is {seen:?}, want {value}");
}

fn legacy_initialize(id: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "versions-test", "version": "1"}}})
}

async fn post(url: &str, body: &Value, version: Option<&str>) -> (u16, Value) {
    let mut rb = client()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream");
    if let Some(v) = version {
        rb = rb.header("mcp-protocol-version", v);
    }
    if let Some(m) = body["method"].as_str() {
        if version.is_some() {
            rb = rb.header("mcp-method", m);
        }
    }
    let r = rb.body(body.to_string()).send().await.unwrap();
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    // A JSON body, or the first message of an SSE one.
    let json = text
        .lines()
        .find_map(|l| l.strip_prefix("data: "))
        .unwrap_or(&text);
    let value = serde_json::from_str(json).unwrap_or_else(|_| json!({ "text": text }));
    (status, value)
}

/// A request for a revision the server lacks, with the claim and header agreeing.
fn future_revision_request() -> Value {
    let mut body = modern_body(json!(7), "tools/list", json!({}));
    body["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!("2027-01-01");
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_modern_only_pool_is_answered_as_the_server_answers() {
    let server = ts_server("modern", "m1");
    let direct = format!("http://{}/mcp", server.addr);
    // The route lists every revision and a future one, as an operator might.
    let edge = start_edge(&learning_pool(
        &[&server],
        "versions = [\"2027-01-01\", \"2026-07-28\", \"2025-11-25\", \"2025-06-18\"]",
    ));
    wait_revision(&edge, "2026-07-28", 1.0).await;
    wait_revision(&edge, "2025-06-18", 0.0).await;

    // -32022 lists what the server lists, not the route's whole list.
    let (status, via_edge) =
        post(&edge.url(), &future_revision_request(), Some("2027-01-01")).await;
    let (direct_status, from_server) =
        post(&direct, &future_revision_request(), Some("2027-01-01")).await;
    assert_eq!(status, 400, "{via_edge}");
    assert_eq!(direct_status, 400, "{from_server}");
    assert_eq!(via_edge["error"]["code"], -32022, "{via_edge}");
    assert_eq!(
        via_edge["error"]["data"]["supported"], from_server["error"]["data"]["supported"],
        "edge {via_edge} server {from_server}"
    );

    // A legacy initialize gets the server's answer from the edge, without reaching it. The
    // server's own request count cannot tell: the edge's legacy probe may still be on its
    // way to it. What the edge proxied from the pool must not move.
    let before = proxied(&edge).await;
    let (status, answer) = post(&edge.url(), &legacy_initialize(json!(1)), None).await;
    let (_, from_server) = post(&direct, &legacy_initialize(json!(1)), None).await;
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["error"]["code"], -32022, "{answer}");
    assert_eq!(answer["id"], 1, "{answer}");
    assert_eq!(
        answer["error"]["data"]["supported"], from_server["error"]["data"]["supported"],
        "edge {answer} server {from_server}"
    );
    assert_eq!(
        proxied(&edge).await,
        before,
        "the edge forwarded no initialize"
    );

    // Modern traffic still flows.
    let (status, listed) = post(
        &edge.url(),
        &modern_body(json!(2), "tools/list", json!({})),
        Some(MODERN),
    )
    .await;
    assert_eq!(status, 200, "{listed}");
    assert!(listed["result"]["tools"].is_array(), "{listed}");
    assert_eq!(
        proxied(&edge).await,
        before + 1.0,
        "a proxied answer is counted"
    );

    // An official legacy client learns at once that it cannot talk here, from the edge.
    let out = ts_client(&edge.url(), &["--mode", "legacy", "--sdk", "v1"]);
    assert_eq!(out["ok"], false, "{out}");
    let error = out["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("-32022") || error.contains("Unsupported protocol version"),
        "{out}"
    );
    // An auto client finds the modern revision through the edge.
    let out = ts_client(&edge.url(), &["--mode", "auto"]);
    assert_eq!(out["ok"], true, "{out}");
    assert_eq!(out["era"], "modern", "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dual_era_pool_keeps_legacy_and_the_probe_leaves_no_session() {
    let dual = ts_server("dual", "d1");
    let edge = start_edge(&learning_pool(&[&dual], ""));
    wait_revision(&edge, "2026-07-28", 1.0).await;
    wait_revision(&edge, "2025-11-25", 1.0).await;
    let (status, answer) = post(&edge.url(), &legacy_initialize(json!("a")), None).await;
    assert_eq!(status, 200, "{answer}");
    assert!(answer["result"]["protocolVersion"].is_string(), "{answer}");

    // A server with 2025 sessions: the probe's session is deleted at once.
    let sessions = ts_server("legacy-session", "s1");
    let edge = start_edge(&learning_pool(&[&sessions], ""));
    wait_revision(&edge, "2025-11-25", 1.0).await;
    sessions.wait_stderr(
        "REQ DELETE /mcp",
        Duration::from_secs(20),
        "the legacy probe's session is deleted",
    );
    // It answers no server/discover, so nothing is known about modern revisions and the
    // route's list stands.
    assert!(
        !scrape(&edge).await.contains(&format!(
            "mcp_edge_pool_revisions{{pool=\"{}\",revision=\"2026-07-28\"}}",
            edge.pool
        )),
        "a legacy-only server said nothing about 2026-07-28"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_mcp_checks_the_route_list_stands() {
    let server = ts_server("modern", "t1");
    let edge = start_edge(&pool_and_route(&[server.addr], ""));
    // Wait for the pool to be published, then ask: nothing was learned.
    wait_metric(
        &edge,
        &format!("mcp_edge_pool_members{{pool=\"{}\"}}", edge.pool),
        1.0,
    )
    .await;
    let (status, answer) = post(&edge.url(), &future_revision_request(), Some("2027-01-01")).await;
    assert_eq!(status, 400, "{answer}");
    let supported = answer["error"]["data"]["supported"].as_array().unwrap();
    assert_eq!(
        supported.len(),
        5,
        "every revision the edge knows: {answer}"
    );
}
