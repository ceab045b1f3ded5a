//! Every error the edge raises, over real HTTP: exact status, JSON-RPC code, id and marker
//! header, and proof that the upstream never saw the request. (Their count by kind is
//! checked in `tests/metrics.rs`, alone in its process: these tests raise the same kinds.)

mod common;

use common::mock::{Behavior, Mock};
use common::*;
use serde_json::{json, Value};

struct Case {
    what: &'static str,
    headers: Vec<(&'static str, String)>,
    body: String,
    want: Expect,
}

fn std_headers(method: &str, name: Option<&str>) -> Vec<(&'static str, String)> {
    let mut h = vec![
        ("content-type", "application/json".to_string()),
        ("accept", "application/json, text/event-stream".to_string()),
        ("mcp-protocol-version", MODERN.to_string()),
        ("mcp-method", method.to_string()),
    ];
    if let Some(n) = name {
        h.push(("mcp-name", n.to_string()));
    }
    h
}

fn cases() -> Vec<Case> {
    let call = |id: Value, name: &str| {
        modern_body(id, "tools/call", json!({"name": name, "arguments": {}})).to_string()
    };
    vec![
        Case { what: "Mcp-Name mismatch", headers: std_headers("tools/call", Some("foo")), body: call(json!(1), "bar"), want: Expect::edge(400, "header_mismatch_name", -32020, json!(1)) },
        Case { what: "Mcp-Name missing", headers: std_headers("tools/call", None), body: call(json!("s-1"), "bar"), want: Expect::edge(400, "header_mismatch_name", -32020, json!("s-1")) },
        Case { what: "Mcp-Method mismatch", headers: std_headers("tools/list", Some("bar")), body: call(json!(2), "bar"), want: Expect::edge(400, "header_mismatch_method", -32020, json!(2)) },
        Case { what: "version header stripped", headers: vec![("content-type", "application/json".into()), ("mcp-method", "tools/call".into()), ("mcp-name", "bar".into())], body: call(json!(3), "bar"), want: Expect::edge(400, "header_mismatch_protocol_version", -32020, json!(3)) },
        Case { what: "duplicate Mcp-Method", headers: { let mut h = std_headers("tools/call", Some("bar")); h.push(("mcp-method", "tools/call".into())); h }, body: call(json!(4), "bar"), want: Expect::edge(400, "header_mismatch_method", -32020, json!(4)) },
        Case { what: "unsupported version", headers: vec![("content-type", "application/json".into()), ("mcp-protocol-version", "2099-01-01".into()), ("mcp-method", "tools/list".into())], body: json!({"jsonrpc":"2.0","id":5,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2099-01-01"}}}).to_string(), want: Expect::edge(400, "unsupported_version", -32022, json!(5)) },
        Case { what: "bad Origin", headers: { let mut h = std_headers("tools/list", None); h.push(("origin", "https://evil.example".into())); h }, body: modern_body(json!(6), "tools/list", json!({})).to_string(), want: Expect::edge(403, "origin_rejected", -32000, Value::Null) },
        Case { what: "malformed JSON", headers: std_headers("tools/list", None), body: "{\"jsonrpc\":\"2.0\",".into(), want: Expect::edge(400, "parse_error", -32700, Value::Null) },
        Case { what: "batch on modern path", headers: std_headers("tools/list", None), body: format!("[{}]", modern_body(json!(7), "tools/list", json!({}))), want: Expect::edge(400, "invalid_request", -32600, Value::Null) },
        Case { what: "posted response on modern path", headers: std_headers("tools/list", None), body: json!({"jsonrpc":"2.0","id":8,"result":{}}).to_string(), want: Expect::edge(400, "invalid_request", -32600, json!(8)) },
        Case { what: "non-JSON content type", headers: vec![("content-type", "text/plain".into()), ("mcp-protocol-version", MODERN.into()), ("mcp-method", "tools/list".into())], body: modern_body(json!(9), "tools/list", json!({})).to_string(), want: Expect::edge(415, "unsupported_media_type", -32000, Value::Null) },
        Case { what: "body over the limit", headers: std_headers("tools/call", Some("big")), body: modern_body(json!(10), "tools/call", json!({"name":"big","arguments":{"x":"y".repeat(70_000)}})).to_string(), want: Expect::edge(413, "body_too_large", -32000, Value::Null) },
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_edge_error_is_exact_and_never_reaches_the_upstream() {
    let mock = Mock::start(Behavior::Json).await;
    let edge = start_edge(&format!(
        "[limits]\nmax_body_bytes = 65536\n\n{}",
        unchecked_pool_and_route(&[mock.addr], "allowed_origins = [\"https://app.example\"]")
    ));
    let c = client();
    for case in cases() {
        let mut rb = c.post(edge.url());
        for (k, v) in &case.headers {
            rb = rb.header(*k, v.as_str());
        }
        assert_rejected(&mock, case.what, &case.want, exchange(rb.body(case.body))).await;
    }
    assert_eq!(
        (mock.connections(), mock.heads()),
        (0, 0),
        "a rejected request reached the upstream"
    );

    // The same edge forwards a valid request, so the zeros above are not a dead upstream.
    let ok = modern_request(
        &c,
        &edge.url(),
        &modern_body(json!(11), "tools/list", json!({})),
    )
    .header("origin", "https://app.example")
    .send()
    .await
    .unwrap();
    assert_eq!(ok.status(), 200);
    assert!(ok.headers().get("x-mcp-edge-error").is_none());
    assert_eq!((mock.heads(), mock.requests()), (1, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsupported_version_lists_the_routes_versions() {
    let mock = Mock::start(Behavior::Json).await;
    let edge = start_edge(&unchecked_pool_and_route(
        &[mock.addr],
        "versions = [\"2026-07-28\"]",
    ));
    let c = client();
    // A legacy initialize on a modern-only route.
    let initialize = c
        .post(edge.url())
        .header("content-type", "application/json")
        .body(json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}).to_string());
    let answer = assert_rejected(
        &mock,
        "legacy initialize",
        &Expect::edge(400, "unsupported_version", -32022, json!(0)),
        exchange(initialize),
    )
    .await;
    assert_eq!(
        answer.json["error"]["data"],
        json!({"supported":["2026-07-28"],"requested":"2025-11-25"})
    );
    // GET (legacy SSE) on a modern-only route.
    let get = c.get(edge.url()).header("accept", "text/event-stream");
    assert_rejected(
        &mock,
        "legacy GET",
        &Expect::edge(405, "method_not_allowed", -32000, Value::Null),
        exchange(get),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_path_and_method() {
    let mock = Mock::start(Behavior::Json).await;
    let edge = start_edge(&unchecked_pool_and_route(&[mock.addr], ""));
    let c = client();
    let other = c
        .post(format!("http://127.0.0.1:{}/other", edge.port))
        .body("{}");
    assert_rejected(
        &mock,
        "unknown path",
        &Expect::edge(404, "no_route", -32000, Value::Null),
        exchange(other),
    )
    .await;
    assert_rejected(
        &mock,
        "PUT",
        &Expect::edge(405, "method_not_allowed", -32000, Value::Null),
        exchange(c.put(edge.url()).body("{}")),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_errors_pass_through_untouched() {
    let text = r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32001,"message":"Session not found"}}"#;
    let mock = Mock::start(Behavior::Status(404, text.to_string())).await;
    let edge = start_edge(&pool_and_route(&[mock.addr], ""));
    let resp = modern_request(
        &client(),
        &edge.url(),
        &modern_body(json!(1), "tools/list", json!({})),
    )
    .send()
    .await
    .unwrap();
    assert_eq!(resp.status(), 404);
    assert!(resp.headers().get("x-mcp-edge-error").is_none());
    assert_eq!(resp.headers()["x-upstream"], "yes");
    assert_eq!(resp.text().await.unwrap(), text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_from_the_upstream_is_a_marked_502() {
    let mock = Mock::start(Behavior::Garbage).await;
    let edge = start_edge(&pool_and_route(&[mock.addr], ""));
    let answer = exchange(modern_request(
        &client(),
        &edge.url(),
        &modern_body(json!(1), "tools/list", json!({})),
    ))
    .await;
    assert_answer(
        &answer,
        &Expect::edge(502, "upstream_error", -32603, json!(1)),
        "garbage",
    );
    assert!(mock.heads() >= 1, "the request did reach the upstream");
}
