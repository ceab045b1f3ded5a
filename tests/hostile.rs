//! A hostile-input corpus sent as raw bytes: every case gets its exact status (and JSON-RPC
//! code where the edge answers in JSON-RPC) and none reaches the upstream. Slow clients do not
//! stop the edge from serving others.

mod common;

use std::time::Duration;

use common::mock::{Behavior, Mock, Pace};
use common::*;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

const META: &str = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}"#;

fn post(path: &str, headers: &[&str], body: &[u8]) -> Vec<u8> {
    let mut req = format!("POST {path} HTTP/1.1\r\nHost: mcp.example\r\nConnection: close\r\n");
    for h in headers {
        req.push_str(h);
        req.push_str("\r\n");
    }
    req.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
    let mut bytes = req.into_bytes();
    bytes.extend_from_slice(body);
    bytes
}

const JSON: &str = "Content-Type: application/json";
const V: &str = "MCP-Protocol-Version: 2026-07-28";

fn modern(method: &str, name: Option<&str>, body: &[u8]) -> Vec<u8> {
    let m = format!("Mcp-Method: {method}");
    let n = name.map(|n| format!("Mcp-Name: {n}"));
    let mut h = vec![JSON, V, m.as_str()];
    if let Some(n) = &n {
        h.push(n.as_str());
    }
    post("/mcp", &h, body)
}

fn call(name: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"{name}",{META}}}}}"#
    )
}

struct Case {
    what: &'static str,
    bytes: Vec<u8>,
    want: Expect,
}

fn cases() -> Vec<Case> {
    // A JSON-RPC code where the edge answers in JSON-RPC (with its marker), else only a status.
    let c = |what, bytes, status, code: Option<i64>| Case {
        what,
        bytes,
        want: match code {
            Some(code) => Expect::code(status, code),
            None => Expect::status(status),
        },
    };
    let deep = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"x":{}{},"name":"a",{META}}}}}"#,
        "[".repeat(30_000),
        "]".repeat(30_000)
    );
    let big_header = format!("X-Big: {}", "a".repeat(40_000));
    let many: Vec<String> = (0..800).map(|i| format!("X-H{i}: {i}")).collect();
    let mut many_headers: Vec<&str> = vec![JSON, V, "Mcp-Method: tools/list"];
    many_headers.extend(many.iter().map(String::as_str));
    let long_token = format!("Mcp-Session-Id: {}", "A".repeat(5000));
    vec![
        // Malformed, truncated and odd JSON.
        c("malformed JSON", modern("tools/list", None, b"{"), 400, Some(-32700)),
        c("truncated JSON", modern("tools/call", Some("a"), br#"{"jsonrpc":"2.0","id":1,"method":"tools/ca"#), 400, Some(-32700)),
        c("empty body", modern("tools/list", None, b""), 400, Some(-32700)),
        c("null body", modern("tools/list", None, b"null"), 400, Some(-32600)),
        c("number body", modern("tools/list", None, b"42"), 400, Some(-32600)),
        c("string body", modern("tools/list", None, br#""tools/list""#), 400, Some(-32600)),
        c("bool body", modern("tools/list", None, b"true"), 400, Some(-32600)),
        c("empty batch", modern("tools/list", None, b"[]"), 400, Some(-32600)),
        c("modern batch", modern("tools/call", Some("a"), format!("[{}]", call("a")).as_bytes()), 400, Some(-32600)),
        c("legacy batch under a modern header", modern("tools/list", None, br#"[{"jsonrpc":"2.0","id":1,"method":"tools/list"}]"#), 400, Some(-32600)),
        c("posted result", modern("tools/list", None, br#"{"jsonrpc":"2.0","id":1,"result":{}}"#), 400, Some(-32600)),
        c("posted error", modern("tools/list", None, br#"{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"x"}}"#), 400, Some(-32600)),
        c("deep nesting, then a mismatch", modern("tools/call", Some("b"), deep.as_bytes()), 400, Some(-32020)),
        // Out-of-range numbers are not usable ids: rejected as invalid before any header check.
        c("huge number id", modern("tools/call", Some("b"), call("a").replace(r#""id":1"#, r#""id":1e999999"#).as_bytes()), 400, Some(-32600)),
        c("huge integer id", modern("tools/call", Some("b"), call("a").replace(r#""id":1"#, &format!(r#""id":{}"#, "9".repeat(400))).as_bytes()), 400, Some(-32600)),
        c("invalid UTF-8 in a string", modern("tools/call", Some("a"), b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"\xff\"}}"), 400, Some(-32700)),
        c("invalid UTF-8 in a key", modern("tools/list", None, b"{\"\xfe\":1}"), 400, Some(-32700)),
        c("byte order mark", modern("tools/list", None, "\u{feff}{}".as_bytes()), 400, Some(-32700)),
        c("trailing garbage", modern("tools/call", Some("a"), format!("{}x", call("a")).as_bytes()), 400, Some(-32700)),
        c("two objects", modern("tools/list", None, b"{}{}"), 400, Some(-32700)),
        c("NUL in body", modern("tools/list", None, b"{\"a\":1}\0"), 400, Some(-32700)),
        c("control character in a string", modern("tools/list", None, b"{\"a\":\"\x01\"}"), 400, Some(-32700)),
        c("null id", modern("tools/call", Some("a"), call("a").replace(r#""id":1"#, r#""id":null"#).as_bytes()), 400, Some(-32600)),
        c("object id", modern("tools/call", Some("a"), call("a").replace(r#""id":1"#, r#""id":{"x":1}"#).as_bytes()), 400, Some(-32600)),
        c("array id", modern("tools/call", Some("a"), call("a").replace(r#""id":1"#, r#""id":[1]"#).as_bytes()), 400, Some(-32600)),
        c("bool id", modern("tools/call", Some("a"), call("a").replace(r#""id":1"#, r#""id":true"#).as_bytes()), 400, Some(-32600)),
        c("jsonrpc 1.0", modern("tools/call", Some("a"), call("a").replace("2.0", "1.0").as_bytes()), 400, Some(-32600)),
        c("jsonrpc missing", modern("tools/call", Some("a"), call("a").replace(r#""jsonrpc":"2.0","#, "").as_bytes()), 400, Some(-32600)),
        c("method a number", modern("tools/call", Some("a"), call("a").replace(r#""method":"tools/call""#, r#""method":7"#).as_bytes()), 400, Some(-32600)),
        c("claim not a string", modern("tools/list", None, br#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":20260728}}}"#), 400, Some(-32602)),
        c("duplicate method key, last wins", modern("tools/list", None, format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/list","method":"tools/call","params":{{"name":"a",{META}}}}}"#).as_bytes()), 400, Some(-32020)),
        // Routing headers.
        c("raw UTF-8 in Mcp-Name", modern("tools/call", Some("h\u{e9}llo"), call("h\u{e9}llo").as_bytes()), 400, Some(-32020)),
        c("unpadded base64 Mcp-Name", modern("tools/call", Some("=?base64?aGVsbG8?="), call("hello").as_bytes()), 400, Some(-32020)),
        c("empty base64 Mcp-Name", modern("tools/call", Some("=?base64??="), call("x").as_bytes()), 400, Some(-32020)),
        c("garbage base64 Mcp-Name", modern("tools/call", Some("=?base64?!!!!?="), call("x").as_bytes()), 400, Some(-32020)),
        c("duplicate version header", post("/mcp", &[JSON, V, V, "Mcp-Method: tools/list"], br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#), 400, Some(-32020)),
        c("duplicate Mcp-Method", post("/mcp", &[JSON, V, "Mcp-Method: tools/call", "Mcp-Method: tools/call", "Mcp-Name: a"], call("a").as_bytes()), 400, Some(-32020)),
        c("unsupported version", post("/mcp", &[JSON, "MCP-Protocol-Version: 2099-01-01", "Mcp-Method: tools/list"], br#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2099-01-01"}}}"#), 400, Some(-32022)),
        // Content type and size.
        c("text/plain", post("/mcp", &["Content-Type: text/plain", V, "Mcp-Method: tools/call", "Mcp-Name: a"], call("a").as_bytes()), 415, Some(-32000)),
        c("no content type", post("/mcp", &[V, "Mcp-Method: tools/call", "Mcp-Name: a"], call("a").as_bytes()), 415, Some(-32000)),
        c("application/jsonx", post("/mcp", &["Content-Type: application/jsonx", V, "Mcp-Method: tools/call", "Mcp-Name: a"], call("a").as_bytes()), 415, Some(-32000)),
        c("multipart", post("/mcp", &["Content-Type: multipart/form-data; boundary=x", V], b"--x--"), 415, Some(-32000)),
        c("body over the limit", modern("tools/call", Some("a"), format!(r#"{{"x":"{}"}}"#, "y".repeat(70_000)).as_bytes()), 413, Some(-32000)),
        c("absurd Content-Length", b"POST /mcp HTTP/1.1\r\nHost: mcp.example\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: 99999999999999999999\r\n\r\n{}".to_vec(), 400, None),
        c("Content-Length beyond the limit, no body sent", b"POST /mcp HTTP/1.1\r\nHost: mcp.example\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: 100000000\r\n\r\n".to_vec(), 413, Some(-32000)),
        c("negative Content-Length", b"POST /mcp HTTP/1.1\r\nHost: mcp.example\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: -1\r\n\r\n{}".to_vec(), 400, None),
        // Request smuggling shapes.
        c("Content-Length and Transfer-Encoding", b"POST /mcp HTTP/1.1\r\nHost: mcp.example\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nPOST /mcp HTTP/1.1\r\n\r\n".to_vec(), 400, None),
        c("two different Content-Lengths", b"POST /mcp HTTP/1.1\r\nHost: mcp.example\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}}".to_vec(), 400, None),
        c("Transfer-Encoding chunked, gzip", b"POST /mcp HTTP/1.1\r\nHost: mcp.example\r\nConnection: close\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked, gzip\r\n\r\n2\r\n{}\r\n0\r\n\r\n".to_vec(), 400, None),
        c("bad chunk size", b"POST /mcp HTTP/1.1\r\nHost: mcp.example\r\nConnection: close\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n".to_vec(), 400, Some(-32600)),
        // Oversized and odd heads.
        c("one huge header", post("/mcp", &[JSON, V, "Mcp-Method: tools/list", big_header.as_str()], b"{}"), 431, Some(-32000)),
        // Pingora's HTTP/1 parser refuses more headers than it holds, before the edge sees them.
        c("800 headers", post("/mcp", &many_headers, b"{}"), 400, None),
        c("unknown path", post("/nope", &[JSON], b"{}"), 404, Some(-32000)),
        c("PUT", b"PUT /mcp HTTP/1.1\r\nHost: mcp.example\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{}".to_vec(), 405, Some(-32000)),
        c("TRACE", b"TRACE /mcp HTTP/1.1\r\nHost: mcp.example\r\nConnection: close\r\n\r\n".to_vec(), 405, Some(-32000)),
        // Origin and Host.
        c("evil Origin", post("/mcp", &[JSON, V, "Mcp-Method: tools/list", "Origin: https://evil.example"], b"{}"), 403, Some(-32000)),
        c("Origin null", post("/mcp", &[JSON, V, "Mcp-Method: tools/list", "Origin: null"], b"{}"), 403, Some(-32000)),
        c("lookalike Origin", post("/mcp", &[JSON, V, "Mcp-Method: tools/list", "Origin: https://app.example.evil.io"], b"{}"), 403, Some(-32000)),
        c("Origin with another port", post("/mcp", &[JSON, V, "Mcp-Method: tools/list", "Origin: https://app.example:8443"], b"{}"), 403, Some(-32000)),
        c("two Origins", post("/mcp", &[JSON, V, "Mcp-Method: tools/list", "Origin: https://app.example", "Origin: https://app.example"], b"{}"), 403, Some(-32000)),
        c("Host not allowed (DNS rebinding)", b"POST /mcp HTTP/1.1\r\nHost: attacker.example\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}".to_vec(), 403, Some(-32000)),
        // Sessions.
        c("garbage session token", post("/mcp", &[JSON, "Mcp-Session-Id: not-a-token"], br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#), 404, Some(-32001)),
        c("5000-character session token", post("/mcp", &[JSON, long_token.as_str()], br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#), 404, Some(-32001)),
        c("messages POST without a session", post("/messages", &[JSON], br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#), 400, Some(-32600)),
        c("messages POST with a forged session", post("/messages?sessionId=AQFhYmNkZWZnaGlqa2xtbm9wcXJzdHV2d3h5ejAxMjM0NTY", &[JSON], br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#), 404, Some(-32001)),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_inputs_get_exact_answers_and_never_reach_the_upstream() {
    let mock = Mock::start(Behavior::Json).await;
    let edge = start_edge(&format!(
        "[limits]\nmax_body_bytes = 65536\n\n{}sse_path = \"/sse\"\nmessages_path = \"/messages\"\nallowed_origins = [\"https://app.example\"]\nallowed_hosts = [\"mcp.example\", \"localhost\", \"127.0.0.1\"]\n",
        unchecked_pool_and_route(&[mock.addr], "")
    ));
    let all = cases();
    assert!(all.len() >= 50, "the corpus has {} cases", all.len());
    // Every case runs; the report lists all that are wrong.
    let mut wrong = Vec::new();
    for case in &all {
        if let Err(e) =
            check_rejected(&mock, &case.want, exchange_raw(edge.port, &case.bytes)).await
        {
            wrong.push(format!(
                "{}: {}",
                case.what,
                e.chars().take(300).collect::<String>()
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {} cases wrong:\n{}",
        wrong.len(),
        all.len(),
        wrong.join("\n")
    );
    assert_eq!((mock.connections(), mock.heads()), (0, 0));
    // Still serving, and the control request does reach the upstream.
    let ok = exchange_raw(
        edge.port,
        &modern("tools/call", Some("a"), call("a").as_bytes()),
    )
    .await;
    assert_eq!(ok.status, Some(200), "{}", ok.text);
    assert_eq!((mock.heads(), mock.requests()), (1, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_clients_do_not_stop_the_edge_serving_others() {
    let mock = Mock::start(Behavior::Json).await;
    let edge = start_edge(&format!(
        "[timeouts]\nrequest_body_ms = 500\n\n{}",
        pool_and_route(&[mock.addr], "")
    ));
    // 50 slowloris connections dribbling headers, 20 that stall mid-body.
    let mut slow = Vec::new();
    for _ in 0..50 {
        let mut s = TcpStream::connect(("127.0.0.1", edge.port)).await.unwrap();
        s.write_all(b"POST /mcp HTTP/1.1\r\nHost: x\r\n")
            .await
            .unwrap();
        slow.push(s);
    }
    let mut stalled = Vec::new();
    for _ in 0..20 {
        let mut s = TcpStream::connect(("127.0.0.1", edge.port)).await.unwrap();
        s.write_all(b"POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"jsonrpc\"").await.unwrap();
        stalled.push(s);
    }
    let c = client();
    for i in 0..20 {
        for s in slow.iter_mut() {
            let _ = s.write_all(b"X").await;
        }
        let resp = modern_request(
            &c,
            &edge.url(),
            &modern_body(json!(i), "tools/list", json!({})),
        )
        // A hang guard only: the slow clients must not block this request at all.
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .unwrap();
        assert_eq!(
            resp.status(),
            200,
            "request {i} while slow clients hold connections"
        );
    }
    // The stalled bodies got 408 after request_body_ms.
    for mut s in stalled {
        let mut out = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out)).await;
        let text = String::from_utf8_lossy(&out);
        assert!(text.starts_with("HTTP/1.1 408"), "stalled body: {text}");
        assert!(text.contains("body_timeout"));
    }
    assert_eq!(mock.requests(), 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_and_request_limits_answer_503() {
    let ack = "event: message\ndata: {}\n\n".to_string();
    let mock = Mock::start(Behavior::Sse {
        frames: vec![(Pace::Now, ack)],
        hold: Duration::from_secs(30),
    })
    .await;
    let edge = start_edge(&format!(
        "[limits]\nmax_streams = 2\nmax_concurrent_requests = 3\n\n{}",
        unchecked_pool_and_route(&[mock.addr], "")
    ));
    let c = client();
    let listen = || {
        modern_request(
            &c,
            &edge.url(),
            &modern_body(json!("l"), "subscriptions/listen", json!({})),
        )
    };
    let (a, b) = (
        listen().send().await.unwrap(),
        listen().send().await.unwrap(),
    );
    assert_eq!((a.status().as_u16(), b.status().as_u16()), (200, 200));
    assert_rejected(
        &mock,
        "a third stream",
        &Expect::edge(503, "overloaded", -32000, json!("l")),
        exchange(listen()),
    )
    .await;
    // Two streams + one more request in flight = 3; a fourth concurrent request is refused.
    let held = modern_request(
        &c,
        &edge.url(),
        &modern_body(json!(1), "tools/call", json!({"name":"x"})),
    )
    .send()
    .await
    .unwrap();
    let fourth = modern_request(
        &c,
        &edge.url(),
        &modern_body(json!(2), "tools/list", json!({})),
    );
    assert_rejected(
        &mock,
        "a fourth concurrent request",
        // Refused before the body is read: no id to echo.
        &Expect::edge(503, "overloaded", -32000, serde_json::Value::Null),
        exchange(fourth),
    )
    .await;
    drop((a, b, held));
    // Slots come back when the streams end.
    wait_until(PATIENCE, "a stream slot to come back", async || {
        listen().send().await.is_ok_and(|r| r.status() == 200)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_over_the_limit_are_closed_at_once() {
    let mock = Mock::start(Behavior::Json).await;
    let edge = start_edge(&format!(
        "[limits]\nmax_connections = 5\n\n{}",
        pool_and_route(&[mock.addr], "")
    ));
    let list = || modern("tools/list", None, &list_body());
    // Five connections, each served once and then idle: the edge surely counts all five.
    let mut idle = Vec::new();
    for i in 0..5 {
        let mut s = BufReader::new(TcpStream::connect(("127.0.0.1", edge.port)).await.unwrap());
        let keep_alive = String::from_utf8(list())
            .unwrap()
            .replace("Connection: close\r\n", "");
        s.get_mut().write_all(keep_alive.as_bytes()).await.unwrap();
        let head = tokio::time::timeout(PATIENCE, http1::read_head(&mut s))
            .await
            .expect("no answer")
            .unwrap()
            .expect("closed");
        assert_eq!(head.status(), Some(200), "connection {i}: {}", head.text);
        http1::read_body(&mut s, &head, 1 << 20).await.unwrap();
        idle.push(s);
    }
    let mut extra = TcpStream::connect(("127.0.0.1", edge.port)).await.unwrap();
    let _ = extra
        .write_all(b"GET /mcp HTTP/1.1\r\nHost: x\r\n\r\n")
        .await;
    let mut buf = [0u8; 64];
    // A hang guard: over the limit, the close comes at once.
    let n = tokio::time::timeout(Duration::from_secs(10), extra.read(&mut buf))
        .await
        .expect("not closed")
        .unwrap_or(0);
    assert_eq!(n, 0, "the sixth connection is closed without an answer");
    // Freed slots are usable again, once the edge has seen the closes.
    idle.clear();
    wait_until(PATIENCE, "a freed connection slot", async || {
        exchange_raw(edge.port, &list()).await.status == Some(200)
    })
    .await;
}

fn list_body() -> Vec<u8> {
    format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{{{META}}}}}"#).into_bytes()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_ssrf_through_the_request_target_or_host() {
    // A request naming another address in its absolute-form target and Host still goes to the
    // pool member, never to the named address.
    let member = Mock::start(Behavior::Json).await;
    let elsewhere = Mock::start(Behavior::Json).await;
    let edge = start_edge(&pool_and_route(&[member.addr], ""));
    let body = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{{{META}}}}}"#);
    let req = format!(
        "POST http://{0}/mcp HTTP/1.1\r\nHost: {0}\r\nConnection: close\r\n{JSON}\r\n{V}\r\nMcp-Method: tools/list\r\nContent-Length: {1}\r\n\r\n{body}",
        elsewhere.addr,
        body.len()
    );
    let answer = exchange_raw(edge.port, req.as_bytes()).await;
    assert_eq!(answer.status, Some(200), "{}", answer.text);
    assert_eq!((member.requests(), elsewhere.connections()), (1, 0));
}
