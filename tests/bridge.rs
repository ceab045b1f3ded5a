//! Era bridging: official legacy (2025) clients reach a pool of 2026-07-28-only TypeScript
//! SDK servers through two edge replicas behind a per-request round-robin balancer. Without
//! the bridge none of them can connect (the servers answer `initialize` with -32022).

mod common;

use std::net::SocketAddr;

use common::balancer::Balancer;
use common::peers::{py_client, ts_client, ts_server, Peer};
use common::*;
use serde_json::{json, Value};

fn bridged_route(members: &[&Peer], bridge: bool) -> String {
    let addrs: Vec<_> = members.iter().map(|p| p.addr).collect();
    pool_with_health(
        &addrs,
        "check = \"mcp\"\ninterval_ms = 500",
        &format!("bridge_legacy = {bridge}"),
    )
}

/// Wait until the edge has a member's server/discover to answer `initialize` from.
async fn wait_learned(edge: &Edge) {
    let series = format!(
        "mcp_edge_pool_revisions{{pool=\"{}\",revision=\"2026-07-28\"}} 1",
        edge.pool
    );
    wait_until(
        PATIENCE,
        "the pool's server/discover was learned",
        async || scrape(edge).await.contains(&series),
    )
    .await;
}

/// The legacy clients' script ran whole: tools listed, a tool with progress over SSE, a
/// resource read and a prompt got, from one of the pool's servers.
fn assert_bridged(what: &str, out: &Value, pool: &[&Peer]) {
    assert_eq!(out["progress"], 3, "{what}: progress over SSE: {out}");
    assert_served(what, out, pool);
}

/// [`assert_bridged`], progress counted as an HTTP+SSE client can: the TypeScript SDK drops
/// a progress notification it reads in the same chunk as the result, which a busy machine
/// (the edge's stream writer late by the server's 100 ms between them) can bring about.
fn assert_bridged_sse(what: &str, out: &Value, pool: &[&Peer]) {
    let progress = out["progress"].as_u64().unwrap_or(0);
    assert!(
        (1..=3).contains(&progress),
        "{what}: progress on the stream: {out}"
    );
    assert_served(what, out, pool);
}

/// The rest of the script ran whole, from one of the pool's servers.
fn assert_served(what: &str, out: &Value, pool: &[&Peer]) {
    assert_eq!(out["ok"], true, "{what}: {out}");
    assert_eq!(out["era"], "legacy", "{what}: {out}");
    let tools: Vec<&str> = out["tools"]
        .as_array()
        .map(|t| t.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    assert!(
        tools.contains(&"echo") && tools.contains(&"slow"),
        "{what}: {out}"
    );
    let instances: Vec<&str> = pool.iter().map(|p| p.instance.as_str()).collect();
    let echo = out["echo"].as_str().unwrap_or_default();
    assert!(
        instances.iter().any(|i| echo == format!("{i}:hi")),
        "{what}: echo {echo}"
    );
    assert!(
        instances.contains(&out["resource"].as_str().unwrap_or_default()),
        "{what}: resource {out}"
    );
    assert!(
        out["prompt"]
            .as_str()
            .unwrap_or_default()
            .starts_with("Hello edge from "),
        "{what}: prompt {out}"
    );
}

fn legacy_clients(url: &str) -> Vec<(&'static str, Value)> {
    vec![
        ("ts v1", ts_client(url, &["--sdk", "v1"])),
        ("ts v2 pinned legacy", ts_client(url, &["--mode", "legacy"])),
        ("py legacy", py_client(url, &["--mode", "legacy"])),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_clients_reach_modern_only_servers_through_two_replicas() {
    let (a, b) = (ts_server("modern", "a"), ts_server("modern", "b"));
    let config = bridged_route(&[&a, &b], true);
    let one = start_edge(&config);
    let two = start_replica(&one, &config);
    wait_learned(&one).await;
    wait_learned(&two).await;
    let lb = Balancer::start(vec![
        SocketAddr::from(([127, 0, 0, 1], one.port)),
        SocketAddr::from(([127, 0, 0, 1], two.port)),
    ])
    .await;
    let url = format!("http://{}/mcp", lb.addr);
    let modern_url = url.clone();
    let runs = tokio::task::spawn_blocking(move || {
        let mut runs = legacy_clients(&url);
        // A modern client on the same route is not bridged.
        runs.push(("ts auto", ts_client(&modern_url, &["--mode", "auto"])));
        runs
    })
    .await
    .unwrap();
    for (what, out) in &runs {
        if *what == "ts auto" {
            assert_eq!(out["ok"], true, "{what}: {out}");
            assert_eq!(out["era"], "modern", "{what}: {out}");
            continue;
        }
        assert_bridged(what, out, &[&a, &b]);
    }
    assert!(
        lb.count(0) > 0 && lb.count(1) > 0,
        "both replicas served: {} / {}",
        lb.count(0),
        lb.count(1)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_bridge_legacy_clients_are_told_no() {
    let a = ts_server("modern", "n1");
    let edge = start_edge(&bridged_route(&[&a], false));
    wait_learned(&edge).await;
    let url = edge.url();
    let runs = tokio::task::spawn_blocking(move || legacy_clients(&url))
        .await
        .unwrap();
    for (what, out) in runs {
        assert_eq!(out["ok"], false, "{what}: {out}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_edge_answers_what_a_modern_server_cannot() {
    let a = ts_server("modern", "e1");
    let edge = start_edge(&bridged_route(&[&a], true));
    wait_learned(&edge).await;
    let c = client();
    let post = |body: Value, session: Option<&str>| {
        let mut rb = c
            .post(edge.url())
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream");
        if let Some(s) = session {
            rb = rb
                .header("mcp-session-id", s)
                .header("mcp-protocol-version", "2025-06-18");
        }
        rb.body(body.to_string()).send()
    };
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {"sampling": {}},
        "clientInfo": {"name": "raw", "version": "1"}}});
    let r = post(init, None).await.unwrap();
    assert_eq!(r.status(), 200);
    let session = r
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .expect("a session id");
    let answer: Value = r.json().await.unwrap();
    assert_eq!(
        answer["result"]["protocolVersion"], "2025-06-18",
        "{answer}"
    );
    assert_eq!(
        answer["result"]["serverInfo"]["name"], "ts-peer-e1",
        "{answer}"
    );
    assert!(
        answer["result"]["capabilities"]["tools"].is_object(),
        "{answer}"
    );
    // Health checks (every 500 ms) reach the server too: count what the edge proxied.
    let before = proxied(&edge).await;

    let r = post(
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        Some(&session),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 202);
    for method in ["ping", "logging/setLevel"] {
        let r = post(
            json!({"jsonrpc": "2.0", "id": 5, "method": method, "params": {"level": "info"}}),
            Some(&session),
        )
        .await
        .unwrap();
        assert_eq!(r.status(), 200, "{method}");
        let v: Value = r.json().await.unwrap();
        assert_eq!(
            v,
            json!({"jsonrpc": "2.0", "id": 5, "result": {}}),
            "{method}"
        );
    }
    let r = c
        .get(edge.url())
        .header("mcp-session-id", &session)
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 405);
    let r = c
        .delete(edge.url())
        .header("mcp-session-id", &session)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        proxied(&edge).await,
        before,
        "none of these reached the server"
    );

    // A method the server does not know: its error, with 200 as legacy servers answer.
    let r = post(
        json!({"jsonrpc": "2.0", "id": 6, "method": "nothing/here", "params": {}}),
        Some(&session),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], -32601, "{v}");
    assert_eq!(proxied(&edge).await, before + 1.0);

    // Answers in the legacy shape: no 2026-07-28-only fields.
    let r = post(
        json!({"jsonrpc": "2.0", "id": 9, "method": "tools/list"}),
        Some(&session),
    )
    .await
    .unwrap();
    let v: Value = r.json().await.unwrap();
    assert!(v["result"]["tools"].is_array(), "{v}");
    assert!(v["result"].get("resultType").is_none(), "{v}");
    assert!(v["result"].get("ttlMs").is_none(), "{v}");
    // A tool that needs the client's input (MRTR elicitation) cannot be bridged: the
    // client gets an error it can read, never a result without content.
    let r = post(
        json!({"jsonrpc": "2.0", "id": 10, "method": "tools/call", "params": {"name": "confirm", "arguments": {}}}),
        Some(&session),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 200);
    let text = r.text().await.unwrap();
    let v: Value = text
        .lines()
        .find_map(|l| l.strip_prefix("data: "))
        .map_or_else(|| serde_json::from_str(&text), serde_json::from_str)
        .unwrap();
    assert_eq!(v["id"], 10, "{v}");
    assert!(v["error"]["message"].as_str().is_some(), "{v}");
    assert!(v.get("result").is_none(), "{v}");

    // A session id that is not the edge's, or none: the client is told to start again.
    let r = post(
        json!({"jsonrpc": "2.0", "id": 7, "method": "tools/list"}),
        Some("forged"),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 404);
    let r = post(
        json!({"jsonrpc": "2.0", "id": 8, "method": "tools/list"}),
        None,
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn initialize_reaches_a_member_so_its_authorization_applies() {
    use common::mock::{Behavior, Mock};
    let denied = r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32001,"message":"Unauthorized"}}"#;
    let member = Mock::start(Behavior::Status(401, denied.to_string())).await;
    let edge = start_edge(&pool_and_route(&[member.addr], "bridge_legacy = true"));
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"}}});
    let r = client()
        .post(edge.url())
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("authorization", "Bearer expired")
        .body(init.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    assert!(r.headers().get("mcp-session-id").is_none());
    assert_eq!(r.text().await.unwrap(), denied);
    // The member saw a server/discover with the client's credential.
    let head = member.last().unwrap().head.to_ascii_lowercase();
    assert!(head.contains("mcp-method: server/discover"), "{head}");
    assert!(head.contains("authorization: bearer expired"), "{head}");
}

fn sse_route(members: &[&Peer]) -> String {
    let addrs: Vec<_> = members.iter().map(|p| p.addr).collect();
    pool_with_health(
        &addrs,
        "check = \"mcp\"\ninterval_ms = 500",
        "bridge_legacy = true\nsse_path = \"/sse\"\nmessages_path = \"/messages\"",
    )
}

fn sse_clients(url: &str) -> Vec<(&'static str, Value)> {
    vec![
        (
            "ts v1 HTTP+SSE",
            ts_client(url, &["--sdk", "v1", "--transport", "sse", "--confirm"]),
        ),
        (
            "py HTTP+SSE",
            py_client(
                url,
                &["--mode", "legacy", "--transport", "sse", "--confirm"],
            ),
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_sse_clients_reach_modern_only_servers_on_a_stream_the_edge_holds() {
    let (a, b) = (ts_server("modern", "s1"), ts_server("modern", "s2"));
    let edge = start_edge(&sse_route(&[&a, &b]));
    wait_learned(&edge).await;
    let url = format!("http://127.0.0.1:{}/sse", edge.port);
    let runs = tokio::task::spawn_blocking(move || sse_clients(&url))
        .await
        .unwrap();
    for (what, out) in &runs {
        assert_bridged_sse(what, out, &[&a, &b]);
        // The server's elicitation (input_required) asked on the stream, answered by the
        // client, the call retried with the answer.
        let confirm = out["confirm"].as_str().unwrap_or_default();
        assert!(
            confirm == "s1:confirmed" || confirm == "s2:confirmed",
            "{what}: confirm {out}"
        );
    }
}

/// The next JSON-RPC message on a held stream (`endpoint` events and comments skipped),
/// within the deadline.
async fn next_message(stream: &mut reqwest::Response, buf: &mut String) -> Value {
    loop {
        while let Some(end) = buf.find("\n\n") {
            let event: String = buf.drain(..end + 2).collect();
            let data: Vec<&str> = event
                .lines()
                .filter_map(|l| l.strip_prefix("data: "))
                .collect();
            if event.starts_with("event: message") && !data.is_empty() {
                return serde_json::from_str(&data.join("\n")).unwrap();
            }
        }
        let chunk = tokio::time::timeout(PATIENCE, stream.chunk())
            .await
            .expect("an event within the deadline")
            .unwrap()
            .expect("the stream goes on");
        buf.push_str(&String::from_utf8_lossy(&chunk));
    }
}

/// What an HTTP+SSE client meets at the edges of the bridge: the `endpoint` event (with the
/// route's prefix), a request before `initialize` and an edge error answered on the stream
/// with the request's id (the POST itself `202`), a token of another stream or none refused,
/// and a POST once the stream closed: 404, so the client starts over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_sse_client_gets_every_answer_on_its_stream_and_a_closed_one_is_gone() {
    let a = ts_server("modern", "f1");
    // A policy: only `echo` and `slow` are seen and called.
    let config = format!(
        "{}prefix = \"/team\"\n[[routes.policy]]\ntools = [\"echo\", \"slow\"]\nprompts = [\"*\"]\nresources = [\"mem://\"]\n",
        sse_route(&[&a])
    );
    let edge = start_edge(&config);
    wait_learned(&edge).await;
    let c = client();
    let base = format!("http://127.0.0.1:{}", edge.port);
    let mut stream = c.get(format!("{base}/team/sse")).send().await.unwrap();
    assert_eq!(stream.status(), 200);
    assert_eq!(
        stream.headers()["content-type"].to_str().unwrap(),
        "text/event-stream"
    );
    let mut buf = String::new();
    while !buf.contains("\n\n") {
        let chunk = stream.chunk().await.unwrap().expect("the endpoint event");
        buf.push_str(&String::from_utf8_lossy(&chunk));
    }
    let end = buf.find("\n\n").unwrap();
    let first: String = buf.drain(..end + 2).collect();
    let endpoint = first
        .strip_prefix("event: endpoint\ndata: ")
        .and_then(|e| e.strip_suffix("\n\n"))
        .unwrap_or_else(|| panic!("{first}"))
        .to_string();
    assert!(
        endpoint.starts_with("/team/messages?sessionId="),
        "{endpoint}"
    );
    let messages = format!("{base}{endpoint}");
    let post = |url: String, body: Value| {
        c.post(url)
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
    };
    // Before initialize: the error a server gives, on the stream.
    let call = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"});
    let r = post(messages.clone(), call.clone()).await.unwrap();
    assert_eq!(r.status(), 202);
    let v = next_message(&mut stream, &mut buf).await;
    assert_eq!(v["id"], 3, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("initialize"),
        "{v}"
    );
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2024-11-05", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"}}});
    assert_eq!(post(messages.clone(), init).await.unwrap().status(), 202);
    let v = next_message(&mut stream, &mut buf).await;
    assert_eq!(v["id"], 1, "{v}");
    assert_eq!(v["result"]["protocolVersion"], "2024-11-05", "{v}");
    // The policy holds on the stream: the list filtered, a hidden tool answered as absent.
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
    assert_eq!(post(messages.clone(), list).await.unwrap().status(), 202);
    let v = next_message(&mut stream, &mut buf).await;
    assert_eq!(v["id"], 2, "{v}");
    let tools: Vec<&str> = v["result"]["tools"]
        .as_array()
        .map(|t| t.iter().filter_map(|t| t["name"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(tools, ["echo", "slow"], "{v}");
    let hidden = json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "whoami", "arguments": {}}});
    assert_eq!(post(messages.clone(), hidden).await.unwrap().status(), 202);
    let v = next_message(&mut stream, &mut buf).await;
    assert_eq!(v["id"], 4, "{v}");
    assert!(
        v["error"].is_object() || v["result"]["isError"] == true,
        "answered as absent: {v}"
    );
    // No token, or one of no stream here: refused on the POST (the client starts over).
    let bare = format!("{base}/team/messages");
    assert_eq!(
        post(bare.clone(), call.clone()).await.unwrap().status(),
        400
    );
    let other = format!("{bare}?sessionId=AAAA");
    assert_eq!(post(other, call.clone()).await.unwrap().status(), 404);
    // The POST is answered at once, as an HTTP+SSE server answers: a client that reads each
    // POST to its end (as the Python SDK's does) sends its next message while a long call
    // runs, and gets its answer first.
    let long = json!({"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {"name": "slow", "arguments": {"steps": 50}}});
    let r = post(messages.clone(), long).await.unwrap();
    assert_eq!(r.status(), 202);
    assert!(r.bytes().await.unwrap().is_empty());
    let ping = json!({"jsonrpc": "2.0", "id": 9, "method": "ping"});
    assert_eq!(post(messages.clone(), ping).await.unwrap().status(), 202);
    let mut answered = Vec::new();
    while answered.len() < 2 {
        let v = next_message(&mut stream, &mut buf).await;
        if v.get("id").is_some() {
            answered.push(v["id"].clone());
        }
    }
    assert_eq!(
        answered,
        [json!(9), json!(8)],
        "the ping's answer before the long call's"
    );
    // The server gone: the edge's error answers the request on the stream, with its id.
    drop(a);
    let r = post(
        messages.clone(),
        json!({"jsonrpc": "2.0", "id": "x-7", "method": "tools/call", "params": {"name": "echo", "arguments": {"text": "hi"}}}),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 202);
    let v = next_message(&mut stream, &mut buf).await;
    assert_eq!(v["id"], "x-7", "{v}");
    assert!(v["error"]["code"].is_i64(), "{v}");
    // The client closes its stream: the session is gone.
    drop(stream);
    wait_until(PATIENCE, "a POST to a closed stream is 404", async || {
        post(messages.clone(), call.clone())
            .await
            .is_ok_and(|r| r.status() == 404)
    })
    .await;
}
