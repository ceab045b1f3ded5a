//! What a platform team must be able to trust (issue 10): a request reaches an upstream at
//! most once; transient trouble is never "session gone"; early answers are readable by
//! ordinary clients; what the edge forwards carries no promise it cannot keep.

mod common;

use common::assert::*;
use common::dead::refusing;
use common::mock::{Behavior, Mock};
use common::*;
use serde_json::json;
use tokio::io::AsyncWriteExt;

/// A legacy `initialize` (no `_meta` claim): the start of a 2025 session.
fn legacy_initialize() -> String {
    json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{
        "protocolVersion":"2025-06-18","capabilities":{},
        "clientInfo":{"name":"trust","version":"1"}}})
    .to_string()
}

fn legacy_post(url: &str, body: String, token: Option<&str>) -> reqwest::RequestBuilder {
    let mut rb = client()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream");
    if let Some(t) = token {
        rb = rb
            .header("mcp-session-id", t)
            .header("mcp-protocol-version", "2025-06-18");
    }
    rb.body(body)
}

/// Open a legacy session through the edge; the token the client holds.
async fn open_session(edge: &Edge) -> String {
    let resp = legacy_post(&edge.url(), legacy_initialize(), None)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200, "initialize");
    let token = resp.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_string();
    assert_ne!(
        token, "up-1",
        "the upstream's own id must not reach the client"
    );
    token
}

fn tools_list(id: i64) -> String {
    json!({"jsonrpc":"2.0","id":id,"method":"tools/list"}).to_string()
}

/// Every request the members read in full, together.
fn executed(mocks: &[&Mock]) -> usize {
    mocks.iter().map(|m| m.requests()).sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_the_member_acted_on_is_never_sent_again() {
    // Each member answers its first request, then reads the next one (it acts on it) and
    // closes the pooled connection without answering.
    let script = || Behavior::Sequence(vec![Behavior::Json, Behavior::ActThenClose]);
    let (a, b) = (Mock::start(script()).await, Mock::start(script()).await);
    let edge = start_edge(&unchecked_pool_and_route(&[a.addr, b.addr], ""));
    let c = client();
    for id in [1, 2] {
        let body = modern_body(json!(id), "tools/list", json!({}));
        let resp = modern_request(&c, &edge.url(), &body).send().await.unwrap();
        assert_eq!(resp.status(), 200, "warm-up {id}: a pooled connection each");
    }
    assert_eq!(executed(&[&a, &b]), 2);
    let call = modern_body(
        json!(3),
        "tools/call",
        json!({"name": "pay", "arguments": {}}),
    );
    let answer = exchange(modern_request(&c, &edge.url(), &call)).await;
    assert_answer(
        &answer,
        &Expect::edge(502, "upstream_error", -32603, json!(3)),
        "a member that acted and closed",
    );
    assert_eq!(
        executed(&[&a, &b]),
        3,
        "the call reached the members more than once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_request_that_times_out_is_sent_once_and_keeps_the_session() {
    let member = Mock::start(Behavior::Sequence(vec![
        Behavior::JsonWithSession("up-1".into()),
        Behavior::Stall,
    ]))
    .await;
    let edge = start_edge(&format!(
        "[timeouts]\nupstream_read_ms = 500\n\n{}",
        unchecked_pool_and_route(&[member.addr], "")
    ));
    let token = open_session(&edge).await;
    let answer = exchange(legacy_post(&edge.url(), tools_list(2), Some(&token))).await;
    assert_answer(
        &answer,
        &Expect::edge(504, "upstream_timeout", -32603, json!(2)),
        "a slow session member is not a lost session",
    );
    assert_eq!(member.requests(), 2, "the timed-out request was sent again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transient_trouble_on_a_session_member_is_not_session_gone() {
    for (what, fault) in [
        ("garbled answer", Behavior::Garbage),
        ("closed without an answer", Behavior::ActThenClose),
    ] {
        let member = Mock::start(Behavior::Sequence(vec![
            Behavior::JsonWithSession("up-1".into()),
            fault,
        ]))
        .await;
        let edge = start_edge(&unchecked_pool_and_route(&[member.addr], ""));
        let token = open_session(&edge).await;
        let answer = exchange(legacy_post(&edge.url(), tools_list(2), Some(&token))).await;
        assert_answer(
            &answer,
            &Expect::edge(502, "upstream_error", -32603, json!(2)),
            what,
        );
        assert_eq!(member.requests(), 2, "{what}: sent more than once");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_member_that_refuses_connections_has_lost_the_session() {
    let dead = refusing();
    let edge = start_edge(&unchecked_pool_and_route(&[dead.addr], ""));
    let ring = mcp_edge::session::KeyRing::parse(&format!("1:{KEY_A}")).unwrap();
    let claims = mcp_edge::session::Claims {
        pool: edge.pool.clone(),
        member: dead.addr.to_string(),
        upstream_id: "up-1".into(),
        issued_at: mcp_edge::session::token::now_secs(),
        credential: None,
        owner: None,
    };
    let token = mcp_edge::session::token::seal(&ring, &claims).unwrap();
    let answer = exchange(legacy_post(&edge.url(), tools_list(2), Some(&token))).await;
    assert_answer(
        &answer,
        &Expect::edge(404, "session_member_gone", -32001, json!(2)),
        "a member that refuses connections",
    );
}

/// Run a small client program (Python `http.client`, Node `fetch`) against the edge and
/// return what it printed: `<status> <x-mcp-edge-error>` or the error it hit.
fn run_client(program: &str, args: &[&str], port: u16) -> String {
    let out = std::process::Command::new(program)
        .args(args)
        .env("PORT", port.to_string())
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout).trim(),
        String::from_utf8_lossy(&out.stderr).trim()
    )
}

const PY_OVERSIZED: &str = r#"
import http.client, os, sys
body = b'{"x":"' + b'y' * (5 * 1024 * 1024) + b'"}'
chunked = sys.argv[1] == 'chunked'
c = http.client.HTTPConnection('127.0.0.1', int(os.environ['PORT']), timeout=20)
try:
    if chunked:
        parts = (body[i:i + 65536] for i in range(0, len(body), 65536))
        c.request('POST', '/mcp', body=parts, encode_chunked=True,
                  headers={'content-type': 'application/json', 'transfer-encoding': 'chunked'})
    else:
        c.request('POST', '/mcp', body=body, headers={'content-type': 'application/json'})
    r = c.getresponse()
    print(r.status, r.getheader('x-mcp-edge-error'))
except Exception as e:
    print('error', type(e).__name__, e)
"#;

const NODE_OVERSIZED: &str = r#"
const body = Buffer.alloc(5 * 1024 * 1024, 121);
fetch(`http://127.0.0.1:${process.env.PORT}/mcp`, {
  method: 'POST', body, headers: { 'content-type': 'application/json' },
}).then(r => console.log(r.status, r.headers.get('x-mcp-edge-error')))
  .catch(e => console.log('error', e.name, e.cause ? e.cause.code : e.message));
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_early_answer_is_readable_by_ordinary_clients() {
    let member = Mock::start(Behavior::Json).await;
    let edge = start_edge(&unchecked_pool_and_route(&[member.addr], ""));
    let port = edge.port;
    let runs = tokio::task::spawn_blocking(move || {
        [
            (
                "python, Content-Length",
                run_client("python3", &["-c", PY_OVERSIZED, "length"], port),
            ),
            (
                "python, chunked",
                run_client("python3", &["-c", PY_OVERSIZED, "chunked"], port),
            ),
            (
                "node fetch",
                run_client("node", &["-e", NODE_OVERSIZED], port),
            ),
        ]
    })
    .await
    .unwrap();
    for (what, printed) in runs {
        assert_eq!(printed, "413 body_too_large", "{what}");
    }
    assert_eq!(member.heads(), 0, "an oversized body reached the upstream");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_405_names_what_the_endpoint_allows() {
    let member = Mock::start(Behavior::Json).await;
    let modern_only = start_edge(&unchecked_pool_and_route(
        &[member.addr],
        "versions = [\"2026-07-28\"]",
    ));
    let legacy = start_edge(&unchecked_pool_and_route(
        &[member.addr],
        "sse_path = \"/sse\"\nmessages_path = \"/messages\"",
    ));
    let cases = [
        (&modern_only, "GET", "/mcp", "POST, OPTIONS"),
        (&legacy, "PUT", "/mcp", "GET, POST, DELETE, OPTIONS"),
        (&legacy, "POST", "/sse", "GET, OPTIONS"),
        (&legacy, "GET", "/messages", "POST, OPTIONS"),
    ];
    for (edge, method, path, allow) in cases {
        let url = format!("http://127.0.0.1:{}{path}", edge.port);
        let m = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let resp = client().request(m, &url).send().await.unwrap();
        assert_eq!(resp.status(), 405, "{method} {path}");
        assert_eq!(resp.headers()["allow"], allow, "{method} {path}");
    }
    assert_eq!(member.heads(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bodiless_method_never_forwards_a_promise_of_bytes() {
    let member = Mock::start(Behavior::Json).await;
    let edge = start_edge(&unchecked_pool_and_route(&[member.addr], ""));
    // One connection, two requests in turn: a GET with a body, then a POST. The body must
    // be read (else it would be taken for the next request) and not announced upstream.
    let post = modern_body(json!(2), "tools/list", json!({})).to_string();
    let stream = tokio::net::TcpStream::connect(("127.0.0.1", edge.port))
        .await
        .unwrap();
    let mut conn = tokio::io::BufReader::new(stream);
    let requests = [
        "GET /mcp HTTP/1.1\r\nhost: x\r\naccept: text/event-stream\r\ncontent-length: 5\r\n\r\nhello".to_string(),
        format!("POST /mcp HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nmcp-protocol-version: {MODERN}\r\nmcp-method: tools/list\r\ncontent-length: {}\r\n\r\n{post}", post.len()),
    ];
    for raw in requests {
        conn.get_mut().write_all(raw.as_bytes()).await.unwrap();
        let head = tokio::time::timeout(PATIENCE, common::http1::read_head(&mut conn))
            .await
            .expect("no answer: the edge or the upstream waits for bytes nobody sends")
            .unwrap()
            .expect("connection closed");
        assert_eq!(head.status(), Some(200), "{}", head.text);
        common::http1::read_body(&mut conn, &head, 1 << 20)
            .await
            .unwrap();
    }
    assert_eq!(member.requests(), 2);
    let heads = member.all_heads();
    assert!(
        !heads[0].to_ascii_lowercase().contains("content-length"),
        "the GET went upstream with a framing header: {}",
        heads[0]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_header_outside_a_legacy_session_stays_at_the_edge() {
    let member = Mock::start(Behavior::Json).await;
    let edge = start_edge(&unchecked_pool_and_route(&[member.addr], ""));
    let c = client();
    let body = modern_body(json!(1), "tools/list", json!({}));
    let modern = modern_request(&c, &edge.url(), &body).header("mcp-session-id", "anything");
    assert_eq!(modern.send().await.unwrap().status(), 200);
    let preflight = c
        .request(reqwest::Method::OPTIONS, edge.url())
        .header("mcp-session-id", "anything");
    assert_eq!(preflight.send().await.unwrap().status(), 200);
    assert_eq!(member.requests(), 2);
    for head in member.all_heads() {
        assert!(
            !head.to_ascii_lowercase().contains("mcp-session-id"),
            "forwarded: {head}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_post_with_two_session_parameters_is_refused() {
    let member = Mock::start(Behavior::Json).await;
    let edge = start_edge(&unchecked_pool_and_route(
        &[member.addr],
        "sse_path = \"/sse\"\nmessages_path = \"/messages\"",
    ));
    for query in [
        "session_id=t&session%5Fid=raw",
        "sessionId=t&session_id=raw",
        "sessionId=t&sessionId=raw",
    ] {
        let url = format!("http://127.0.0.1:{}/messages?{query}", edge.port);
        let body = json!({"jsonrpc":"2.0","id":4,"method":"tools/list"}).to_string();
        assert_rejected(
            &member,
            query,
            &Expect::edge(400, "invalid_request", -32600, json!(4)),
            exchange(
                client()
                    .post(&url)
                    .header("content-type", "application/json")
                    .body(body),
            ),
        )
        .await;
    }
}
