//! Whole bodies are read and validated before the upstream is chosen, then reach it byte for
//! byte: 1 MiB and 4 MiB `tools/call` over HTTP/1.1 and h2c, with Content-Length and with
//! chunked (h1) or length-less (h2) framing. Also: refused members are skipped.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::mock::{sha256_hex, Behavior, Mock};
use common::*;
use serde_json::{json, Value};

const MIB: usize = 1024 * 1024;

/// A modern tools/call whose serialized form is exactly `size` bytes.
fn body_of_size(size: usize) -> Vec<u8> {
    let skeleton = modern_body(
        json!(42),
        "tools/call",
        json!({"name": "digest", "arguments": {"data": ""}}),
    )
    .to_string();
    let pad = size - skeleton.len();
    let body = modern_body(
        json!(42),
        "tools/call",
        json!({"name": "digest", "arguments": {"data": "x".repeat(pad)}}),
    );
    let bytes = body.to_string().into_bytes();
    assert_eq!(bytes.len(), size);
    bytes
}

#[derive(Clone, Copy, Debug)]
enum Framing {
    Length,
    Streamed,
}

fn request(
    c: &reqwest::Client,
    url: &str,
    bytes: Vec<u8>,
    framing: Framing,
) -> reqwest::RequestBuilder {
    let body = match framing {
        Framing::Length => reqwest::Body::from(bytes),
        Framing::Streamed => {
            let chunks: Vec<Result<Bytes, std::io::Error>> = bytes
                .chunks(16 * 1024)
                .map(|c| Ok(Bytes::copy_from_slice(c)))
                .collect();
            reqwest::Body::wrap_stream(futures_util::stream::iter(chunks))
        }
    };
    c.post(url)
        .header("content-type", "application/json")
        .header("mcp-protocol-version", MODERN)
        .header("mcp-method", "tools/call")
        .header("mcp-name", "digest")
        .body(body)
}

async fn send(c: &reqwest::Client, url: &str, bytes: Vec<u8>, framing: Framing) -> Answer {
    exchange(request(c, url, bytes, framing)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn big_bodies_arrive_byte_identical_in_every_framing() {
    let mock = Mock::start(Behavior::Json).await;
    let edge = start_edge(&pool_and_route(&[mock.addr], ""));
    for (proto, c) in [("h1", client()), ("h2c", h2c_client())] {
        for size in [MIB, 4 * MIB] {
            for framing in [Framing::Length, Framing::Streamed] {
                let bytes = body_of_size(size);
                let want = sha256_hex(&bytes);
                let answer = send(&c, &edge.url(), bytes, framing).await;
                let what = format!("{proto} {size} bytes {framing:?}");
                assert_eq!(answer.status, Some(200), "{what}: {}", answer.text);
                assert_eq!(answer.json["result"]["len"], size, "{what}");
                assert_eq!(answer.json["result"]["sha256"], want, "{what}");
                let seen = mock.last().unwrap();
                assert_eq!(seen.body_sha256, want, "{what}");
                if matches!((proto, framing), ("h1", Framing::Streamed)) {
                    assert!(
                        seen.head
                            .to_ascii_lowercase()
                            .contains("transfer-encoding: chunked"),
                        "{what}: {}",
                        seen.head
                    );
                }
            }
        }
    }
    assert_eq!(mock.requests(), 8);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_one_byte_over_the_limit_is_413_in_every_framing() {
    let mock = Mock::start(Behavior::Json).await;
    let edge = start_edge(&format!(
        "[limits]\nmax_body_bytes = {}\n\n{}",
        MIB,
        unchecked_pool_and_route(&[mock.addr], "")
    ));
    for (proto, c) in [("h1", client()), ("h2c", h2c_client())] {
        for framing in [Framing::Length, Framing::Streamed] {
            assert_rejected(
                &mock,
                &format!("{proto} {framing:?} one byte over"),
                &Expect::edge(413, "body_too_large", -32000, Value::Null),
                send(&c, &edge.url(), body_of_size(MIB + 1), framing),
            )
            .await;
            let ok = exchange(request(&c, &edge.url(), body_of_size(MIB), framing)).await;
            assert_eq!(
                ok.status,
                Some(200),
                "exactly at the limit, {proto} {framing:?}"
            );
        }
    }
    assert_eq!(mock.requests(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusing_member_is_skipped_with_the_body_intact() {
    let mock = Mock::start(Behavior::Json).await;
    let (dead_1, dead_2) = (refusing(), refusing());
    // No active checks: only requests find out that a member refuses, so they surely try
    // each dead one (then it is ejected for longer than the test runs).
    let edge = start_edge(&pool_with_health(
        &[dead_1.addr, mock.addr, dead_2.addr],
        "check = \"none\"\neject_ms = 600000",
        "",
    ));
    let refusals = |dead: &Refusing| {
        format!(
            "mcp_edge_upstream_connect_failures_total{{member=\"{}\",pool=\"{}\"}}",
            dead.addr, edge.pool
        )
    };
    let before = [
        metric(&edge, &refusals(&dead_1)).await,
        metric(&edge, &refusals(&dead_2)).await,
    ];
    let c = client();
    let mut sent = Vec::new();
    for i in 0..9 {
        let bytes = body_of_size(200 * 1024 + i);
        let want = sha256_hex(&bytes);
        let answer = send(&c, &edge.url(), bytes, Framing::Streamed).await;
        assert_eq!(answer.status, Some(200), "request {i}: {}", answer.text);
        assert_eq!(answer.json["result"]["sha256"], want);
        sent.push(want);
    }
    // Each dead member was tried (and refused) once, so some bodies went to the live member
    // on a second try; every body arrived there whole, exactly once.
    for (dead, before) in [&dead_1, &dead_2].into_iter().zip(before) {
        wait_delta(&edge, &refusals(dead), before, 1.0).await;
    }
    let arrived: Vec<String> = mock.seen().into_iter().map(|s| s.body_sha256).collect();
    assert_eq!(arrived, sent, "each body once, intact, in order");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_every_member_refuses_the_client_gets_a_502() {
    let (dead_1, dead_2) = (refusing(), refusing());
    let edge = start_edge(&pool_and_route(&[dead_1.addr, dead_2.addr], ""));
    let answer = exchange(modern_request(
        &client(),
        &edge.url(),
        &modern_body(json!(5), "tools/list", json!({})),
    ))
    .await;
    assert_answer(
        &answer,
        &Expect::edge(502, "connect_failed", -32603, json!(5)),
        "every member refuses",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expect_100_continue_is_answered_by_the_edge() {
    use tokio::io::AsyncWriteExt;
    let mock = Mock::start(Behavior::Json).await;
    let edge = start_edge(&pool_and_route(&[mock.addr], ""));
    let body = modern_body(json!(1), "tools/list", json!({})).to_string();
    let s = tokio::net::TcpStream::connect(("127.0.0.1", edge.port))
        .await
        .unwrap();
    let mut s = tokio::io::BufReader::new(s);
    let head = format!(
        "POST /mcp HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nmcp-protocol-version: {MODERN}\r\nmcp-method: tools/list\r\nexpect: 100-continue\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    s.get_mut().write_all(head.as_bytes()).await.unwrap();
    let interim = read_head(&mut s).await;
    assert_eq!(interim.status(), Some(100), "{}", interim.text);
    s.get_mut().write_all(body.as_bytes()).await.unwrap();
    let last = read_head(&mut s).await;
    assert_eq!(last.status(), Some(200), "{}", last.text);
    let forwarded = mock.last().unwrap().head;
    assert!(
        !forwarded.to_ascii_lowercase().contains("expect:"),
        "{forwarded}"
    );
}

/// The next response head, within 10 s.
async fn read_head(s: &mut tokio::io::BufReader<tokio::net::TcpStream>) -> http1::Head {
    tokio::time::timeout(Duration::from_secs(10), http1::read_head(s))
        .await
        .expect("no answer within 10 s")
        .unwrap()
        .expect("the edge closed the connection")
}
