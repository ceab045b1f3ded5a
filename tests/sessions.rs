//! Legacy clients across edge replicas with no shared store: sealed session tokens for
//! 2025 Streamable HTTP sessions and 2024-11-05 HTTP+SSE streams, against official SDK
//! servers, each pool with two members.

mod common;

use std::time::Duration;

use common::balancer::Balancer;
use common::peers::{py_client, py_server, ts_client, ts_server, Peer};
use common::*;
use futures_util::StreamExt;
use serde_json::{json, Value};

const LEGACY: &str = "2025-11-25";

fn pool_of(peers: &[&Peer], extra: &str) -> String {
    let members: Vec<_> = peers.iter().map(|p| p.addr).collect();
    pool_and_route(&members, extra)
}

/// Two replicas: one key ring, one configuration, in front of the same pool.
fn two_edges(body: &str) -> (Edge, Edge) {
    let body = format!("{}{body}", sessions_section(&format!("1:{KEY_A}")));
    let a = start_edge(&body);
    let b = start_replica(&a, &body);
    (a, b)
}

/// POST a legacy JSON-RPC message; returns status, the session header and the JSON-RPC
/// message answering `id` (from a JSON or SSE body).
async fn legacy_post(
    url: &str,
    session: Option<&str>,
    body: Value,
) -> (u16, Option<String>, Value) {
    let resp = legacy_request(&client(), url, session, &body)
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let sid = resp
        .headers()
        .get("mcp-session-id")
        .map(|v| v.to_str().unwrap().to_string());
    let text = resp.text().await.unwrap();
    let msg = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: ").or(Some(l)))
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v.get("id").is_some())
        .unwrap_or(Value::Null);
    (status, sid, msg)
}

/// `token` is one of `edge`'s sealed tokens (the upstream's raw identifier never reaches the
/// client): it opens with the test key ring and names the edge's pool.
fn assert_sealed(edge: &Edge, token: &str) {
    let ring = mcp_edge::session::KeyRing::parse(&format!("1:{KEY_A}")).unwrap();
    let now = mcp_edge::session::token::now_secs();
    let claims = mcp_edge::session::token::open(&ring, token, now, 3600)
        .unwrap_or_else(|e| panic!("not a token the edge sealed ({e:?}): {token}"));
    assert_eq!(claims.pool, edge.pool, "{token}");
    assert_ne!(claims.upstream_id, token);
}

fn initialize() -> Value {
    json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":LEGACY,"capabilities":{},"clientInfo":{"name":"edge-test","version":"1"}}})
}

/// initialize + initialized through `url`; the client's session token.
async fn open_session(url: &str) -> String {
    let (status, sid, msg) = legacy_post(url, None, initialize()).await;
    assert_eq!(status, 200, "initialize: {msg}");
    let token = sid.expect("initialize response carries a session");
    let (status, _, _) = legacy_post(
        url,
        Some(&token),
        json!({"jsonrpc":"2.0","method":"notifications/initialized"}),
    )
    .await;
    assert_eq!(status, 202);
    token
}

/// Which instance answers `whoami` in this session.
async fn whoami(url: &str, token: &str) -> (u16, String) {
    let (status, _, msg) =
        legacy_post(url, Some(token), json!({"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"whoami","arguments":{}}})).await;
    (
        status,
        msg["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_created_through_edge_a_continues_through_edge_b() {
    for mode in ["legacy-session", "v2-session"] {
        let (a, b) = (ts_server(mode, "a"), ts_server(mode, "b"));
        let (edge_a, edge_b) = two_edges(&pool_of(&[&a, &b], ""));
        for _ in 0..2 {
            let token = open_session(&edge_a.url()).await;
            assert_sealed(&edge_a, &token);
            let (_, owner) = whoami(&edge_a.url(), &token).await;
            assert!(owner == "a" || owner == "b", "{mode}: {owner}");
            for i in 0..4 {
                let url = if i % 2 == 0 {
                    edge_b.url()
                } else {
                    edge_a.url()
                };
                let (status, served) = whoami(&url, &token).await;
                assert_eq!(
                    (status, served.as_str()),
                    (200, owner.as_str()),
                    "{mode}: call {i} left the session's member"
                );
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_stateful_sessions_stick_across_replicas() {
    let args = ["--transport", "streamable-http"];
    let (a, b) = (py_server(&args, "a"), py_server(&args, "b"));
    let (edge_a, edge_b) = two_edges(&pool_of(&[&a, &b], ""));
    let token = open_session(&edge_a.url()).await;
    let (_, owner) = whoami(&edge_b.url(), &token).await;
    for url in [edge_a.url(), edge_b.url(), edge_a.url()] {
        assert_eq!(whoami(&url, &token).await, (200, owner.clone()));
    }
    // DELETE through the other replica ends the upstream session; the token then gets the
    // upstream's own 404 (passed through, not an edge error).
    let other = if owner == "a" {
        edge_b.url()
    } else {
        edge_a.url()
    };
    let resp = client()
        .delete(&other)
        .header("mcp-session-id", &token)
        .header("mcp-protocol-version", LEGACY)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let gone = client()
        .post(edge_a.url())
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-session-id", &token)
        .header("mcp-protocol-version", LEGACY)
        .body(json!({"jsonrpc":"2.0","id":9,"method":"tools/list"}).to_string());
    let answer = exchange(gone).await;
    assert_eq!(answer.status, Some(404), "{}", answer.text);
    assert!(
        answer.kinds.is_empty(),
        "the upstream's 404, not one the edge made: {}",
        answer.text
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_legacy_clients_work_through_two_replicas() {
    let (a, b) = (
        ts_server("legacy-session", "a"),
        ts_server("legacy-session", "b"),
    );
    let (v2a, v2b) = (ts_server("v2-session", "va"), ts_server("v2-session", "vb"));
    let (pa, pb) = (
        py_server(&["--transport", "streamable-http"], "pa"),
        py_server(&["--transport", "streamable-http"], "pb"),
    );
    for (pool, names) in [
        ([&a, &b], ["a", "b"]),
        ([&v2a, &v2b], ["va", "vb"]),
        ([&pa, &pb], ["pa", "pb"]),
    ] {
        let (edge_a, edge_b) = two_edges(&pool_of(&pool, ""));
        let lb = Balancer::start(vec![
            SocketAddr::from(([127, 0, 0, 1], edge_a.port)),
            SocketAddr::from(([127, 0, 0, 1], edge_b.port)),
        ])
        .await;
        let url = format!("http://{}/mcp", lb.addr);
        let runs = tokio::task::spawn_blocking(move || {
            vec![
                ("ts v2 legacy", ts_client(&url, &["--mode", "legacy"])),
                ("ts v1", ts_client(&url, &["--sdk", "v1"])),
                ("py legacy", py_client(&url, &["--mode", "legacy"])),
            ]
        })
        .await
        .unwrap();
        for (what, out) in runs {
            assert_eq!(out["ok"], true, "{what} via {names:?}: {out}");
            assert_eq!(out["era"], "legacy", "{what}: {out}");
            assert_eq!(out["progress"], 3, "{what}: {out}");
            let echo = out["echo"].as_str().unwrap_or_default();
            assert!(
                names.iter().any(|n| echo == format!("{n}:hi")),
                "{what}: {echo}"
            );
        }
        assert!(
            lb.count(0) > 0 && lb.count(1) > 0,
            "both replicas carried connections: {} / {}",
            lb.count(0),
            lb.count(1)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_sse_stream_through_edge_a_gets_replies_to_posts_through_edge_b() {
    let sse_route = "sse_path = \"/sse\"\nmessages_path = \"/messages\"\n";
    for python in [false, true] {
        let (a, b) = if python {
            (
                py_server(&["--transport", "sse"], "a"),
                py_server(&["--transport", "sse"], "b"),
            )
        } else {
            (ts_server("legacy-sse", "a"), ts_server("legacy-sse", "b"))
        };
        let (edge_a, edge_b) = two_edges(&pool_of(
            &[&a, &b],
            &format!("prefix = \"/team\"\n{sse_route}"),
        ));
        let url = format!("http://127.0.0.1:{}/team/sse", edge_a.port);
        let (mut stream, mut seen, data) = open_sse(&url).await;
        assert!(data.starts_with("/team/messages"), "prefix added: {data}");
        // TypeScript names the parameter `sessionId`, Python `session_id`.
        let token = data
            .split_once('?')
            .and_then(|(_, query)| {
                query.split('&').find_map(|kv| {
                    kv.strip_prefix("sessionId=")
                        .or_else(|| kv.strip_prefix("session_id="))
                })
            })
            .unwrap_or_else(|| panic!("no session parameter: {data}"));
        assert_sealed(&edge_a, token);
        let post_url = format!("http://127.0.0.1:{}{}", edge_b.port, data);
        for (id, method, params) in [
            (0, "initialize", initialize()["params"].clone()),
            (1, "tools/call", json!({"name":"whoami","arguments":{}})),
        ] {
            let status = post_message(&post_url, id, method, params).await;
            assert_eq!(status, 202, "python={python} {method}");
            // The reply arrives on the stream held through edge A.
            let reply = reply_on_stream(&mut stream, &mut seen, id).await;
            if method == "tools/call" {
                let who = reply["result"]["content"][0]["text"]
                    .as_str()
                    .unwrap_or_default();
                assert!(who == "a" || who == "b", "{reply}");
            }
            if method == "initialize" {
                legacy_notify(&post_url).await;
            }
        }
    }
}

async fn legacy_notify(post_url: &str) {
    let resp = client()
        .post(post_url)
        .header("content-type", "application/json")
        .body(json!({"jsonrpc":"2.0","method":"notifications/initialized"}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 202);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_sse_clients_work_through_two_replicas() {
    let sse_route = "sse_path = \"/sse\"\nmessages_path = \"/messages\"\n";
    for python in [false, true] {
        let (a, b) = if python {
            (
                py_server(&["--transport", "sse"], "a"),
                py_server(&["--transport", "sse"], "b"),
            )
        } else {
            (ts_server("legacy-sse", "a"), ts_server("legacy-sse", "b"))
        };
        let (edge_a, edge_b) = two_edges(&pool_of(&[&a, &b], sse_route));
        let lb = Balancer::start(vec![
            SocketAddr::from(([127, 0, 0, 1], edge_a.port)),
            SocketAddr::from(([127, 0, 0, 1], edge_b.port)),
        ])
        .await;
        let url = format!("http://{}/sse", lb.addr);
        let runs = tokio::task::spawn_blocking(move || {
            vec![
                (
                    "ts v2 sse",
                    ts_client(&url, &["--mode", "legacy", "--transport", "sse"]),
                ),
                (
                    "ts v1 sse",
                    ts_client(&url, &["--sdk", "v1", "--transport", "sse"]),
                ),
                (
                    "py sse",
                    py_client(&url, &["--mode", "legacy", "--transport", "sse"]),
                ),
            ]
        })
        .await
        .unwrap();
        for (what, out) in runs {
            assert_eq!(out["ok"], true, "{what} (python server: {python}): {out}");
            let echo = out["echo"].as_str().unwrap_or_default();
            assert!(echo == "a:hi" || echo == "b:hi", "{what}: {echo}");
        }
        assert!(
            lb.count(0) > 0 && lb.count(1) > 0,
            "both replicas carried connections"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_edge_loses_nothing_and_keys_rotate() {
    let (a, b) = (
        ts_server("legacy-session", "a"),
        ts_server("legacy-session", "b"),
    );
    let pool = pool_of(&[&a, &b], "");
    let port = free_port();
    let ring = |text: &str| sessions_section(text);

    // Sessions opened under key 1.
    let mut edge = start_edge_on(port, &format!("{}{pool}", ring(&format!("1:{KEY_A}"))));
    // The same configuration after each restart: the same pool names.
    let pools = edge.pools.clone();
    let old = open_session(&edge.url()).await;
    let (_, owner) = whoami(&edge.url(), &old).await;

    // (c) restart: same key ring, same session, no new initialize.
    edge.handle.stop();
    drop(edge);
    let mut edge = start_edge_with(
        port,
        &format!("{}{pool}", ring(&format!("1:{KEY_A}"))),
        pools.clone(),
    );
    assert_eq!(
        whoami(&edge.url(), &old).await,
        (200, owner.clone()),
        "after restart"
    );

    // (d) a new sealing key is added: old tokens still open, new ones use key 2.
    edge.handle.stop();
    drop(edge);
    let mut edge = start_edge_with(
        port,
        &format!("{}{pool}", ring(&format!("2:{KEY_B}\n1:{KEY_A}"))),
        pools.clone(),
    );
    assert_eq!(
        whoami(&edge.url(), &old).await,
        (200, owner.clone()),
        "old token under the rotated ring"
    );
    let new = open_session(&edge.url()).await;
    assert_eq!(base64_key_id(&new), 2);
    assert_eq!(base64_key_id(&old), 1);

    // The old key is removed: old tokens get 404, the client re-initialises and carries on.
    edge.handle.stop();
    drop(edge);
    let edge = start_edge_with(
        port,
        &format!("{}{pool}", ring(&format!("2:{KEY_B}"))),
        pools,
    );
    let stale = client()
        .post(edge.url())
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-session-id", &old)
        .header("mcp-protocol-version", LEGACY)
        .body(json!({"jsonrpc":"2.0","id":3,"method":"tools/list"}).to_string());
    assert_rejected(
        &[&a, &b],
        "a token sealed with a removed key",
        &Expect::edge(404, "session_unknown", -32001, json!(3)),
        exchange(stale),
    )
    .await;
    assert_eq!(
        whoami(&edge.url(), &new).await.0,
        200,
        "the new-key session survives"
    );
    let again = open_session(&edge.url()).await;
    assert_eq!(whoami(&edge.url(), &again).await.0, 200, "re-initialised");
}

fn base64_key_id(token: &str) -> u8 {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token)
        .unwrap()[1]
}

use std::net::SocketAddr;

/// The TS SDK v1 `SSEServerTransport` sends no keep-alives: its stream is silent between
/// messages. Silence on an open event stream is not an error: the stream outlives
/// `upstream_read_ms` many times over, and replies still arrive on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_http_sse_stream_outlives_the_read_timeout() {
    let server = ts_server("legacy-sse", "a");
    let edge = start_edge(&format!(
        "[timeouts]\nupstream_read_ms = 300\n\n{}",
        pool_of(
            &[&server],
            "sse_path = \"/sse\"\nmessages_path = \"/messages\"\n"
        )
    ));
    let url = format!("http://127.0.0.1:{}/sse", edge.port);
    let (mut stream, mut seen, path) = open_sse(&url).await;
    let post_url = format!("http://127.0.0.1:{}{path}", edge.port);
    // Silence: nothing arrives for ten read timeouts, and the stream neither ends nor fails.
    let silence = Duration::from_millis(3000);
    match tokio::time::timeout(silence, stream.next()).await {
        Err(_) => {}
        Ok(got) => panic!("the idle stream did not stay open: {got:?}"),
    }
    for (id, method, params) in [
        (0, "initialize", initialize()["params"].clone()),
        (1, "tools/call", json!({"name":"whoami","arguments":{}})),
    ] {
        assert_eq!(
            post_message(&post_url, id, method, params).await,
            202,
            "{method}"
        );
        let reply = reply_on_stream(&mut stream, &mut seen, id).await;
        assert!(reply.get("result").is_some(), "{method}: {reply}");
        if method == "initialize" {
            legacy_notify(&post_url).await;
        }
    }
}

/// POST one legacy JSON-RPC message to an HTTP+SSE messages URL; the status.
async fn post_message(url: &str, id: i64, method: &str, params: Value) -> u16 {
    client()
        .post(url)
        .header("content-type", "application/json")
        .body(json!({"jsonrpc":"2.0","id":id,"method":method,"params":params}).to_string())
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

/// Read the event stream until the message answering `id` arrives (within PATIENCE).
async fn reply_on_stream<S>(stream: &mut S, seen: &mut String, id: i64) -> Value
where
    S: futures_util::Stream<Item = reqwest::Result<bytes::Bytes>> + Unpin,
{
    tokio::time::timeout(PATIENCE, async {
        loop {
            let chunk = stream.next().await.unwrap().unwrap();
            seen.push_str(&String::from_utf8_lossy(&chunk));
            let found = seen
                .lines()
                .filter_map(|l| l.strip_prefix("data: "))
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .find(|v| v["id"] == id);
            if let Some(v) = found {
                return v;
            }
        }
    })
    .await
    .expect("the reply never arrived on the stream")
}

/// GET an HTTP+SSE stream and read up to its `endpoint` event: the stream, what was read,
/// and the messages URL (path and query) the event announced.
async fn open_sse(
    url: &str,
) -> (
    impl futures_util::Stream<Item = reqwest::Result<bytes::Bytes>> + Unpin,
    String,
    String,
) {
    let resp = client()
        .get(url)
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200, "{url}");
    let mut stream = resp.bytes_stream();
    let mut seen = String::new();
    while !seen.contains("event: endpoint") || !seen.contains("\n\n") && !seen.contains("\r\n\r\n")
    {
        let chunk = tokio::time::timeout(PATIENCE, stream.next())
            .await
            .expect("no endpoint event")
            .unwrap()
            .unwrap();
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    let data = seen
        .lines()
        .find_map(|l| l.strip_prefix("data: "))
        .unwrap()
        .to_string();
    (stream, seen, data)
}
