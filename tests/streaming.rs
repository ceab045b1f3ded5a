//! SSE responses stream through unbuffered; a client closing the stream closes the upstream
//! request; read timeouts bound silence, not stream length.

mod common;

use std::time::{Duration, Instant};

use common::mock::{Behavior, Event, Mock};
use common::*;
use futures_util::StreamExt;
use serde_json::json;

fn frame(data: &str) -> String {
    format!("event: message\ndata: {data}\n\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_event_arrives_while_the_upstream_holds_the_stream() {
    let progress = frame(
        r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":1}}"#,
    );
    let result = frame(r#"{"jsonrpc":"2.0","id":1,"result":{"content":[]}}"#);
    let mock = Mock::start(Behavior::Sse {
        frames: vec![
            (Duration::ZERO, progress.clone()),
            (Duration::from_secs(3), result.clone()),
        ],
        hold: Duration::from_millis(10),
    })
    .await;
    let edge = start_edge(&pool_and_route(&[mock.addr], ""));
    for c in [client(), h2c_client()] {
        let started = Instant::now();
        let resp = modern_request(
            &c,
            &edge.url(),
            &modern_body(json!(1), "tools/call", json!({"name":"slow"})),
        )
        .send()
        .await
        .unwrap();
        assert_eq!(resp.headers()["content-type"], "text/event-stream");
        let mut stream = resp.bytes_stream();
        let first = stream.next().await.unwrap().unwrap();
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "first event took {:?}",
            started.elapsed()
        );
        assert_eq!(String::from_utf8_lossy(&first), progress);
        let mut rest = Vec::new();
        while let Some(chunk) = stream.next().await {
            rest.extend_from_slice(&chunk.unwrap());
        }
        assert!(started.elapsed() >= Duration::from_secs(3));
        assert_eq!(String::from_utf8_lossy(&rest), result);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_the_stream_closes_the_upstream_request_within_a_second() {
    let ack = frame(
        r#"{"jsonrpc":"2.0","method":"notifications/subscriptions/acknowledged","params":{}}"#,
    );
    let mock = Mock::start(Behavior::Sse {
        frames: vec![(Duration::ZERO, ack)],
        hold: Duration::from_secs(300),
    })
    .await;
    let edge = start_edge(&pool_and_route(&[mock.addr], ""));
    for c in [client(), h2c_client()] {
        let resp = modern_request(
            &c,
            &edge.url(),
            &modern_body(
                json!("listen-1"),
                "subscriptions/listen",
                json!({"notifications":{"toolsListChanged":true}}),
            ),
        )
        .send()
        .await
        .unwrap();
        let mut stream = resp.bytes_stream();
        stream.next().await.unwrap().unwrap();
        let closed_at = Instant::now();
        drop(stream);
        drop(c);
        let seen = mock
            .wait_for(Event::Disconnected, Duration::from_secs(5))
            .await
            .expect("upstream never saw the disconnect");
        let lag = seen.saturating_duration_since(closed_at);
        assert!(
            lag < Duration::from_secs(1),
            "upstream saw the close after {lag:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keepalives_keep_a_quiet_stream_alive_past_the_read_timeout() {
    let ack = frame(
        r#"{"jsonrpc":"2.0","method":"notifications/subscriptions/acknowledged","params":{}}"#,
    );
    let mut frames = vec![(Duration::ZERO, ack)];
    for _ in 0..5 {
        frames.push((Duration::from_millis(600), ": keepalive\n\n".to_string()));
    }
    let mock = Mock::start(Behavior::Sse {
        frames,
        hold: Duration::from_millis(10),
    })
    .await;
    // 1 s read timeout, 3 s stream with a keep-alive every 0.6 s.
    let edge = start_edge(&format!(
        "[timeouts]\nupstream_read_ms = 1000\n\n{}",
        pool_and_route(&[mock.addr], "")
    ));
    let started = Instant::now();
    let resp = modern_request(
        &client(),
        &edge.url(),
        &modern_body(json!(1), "subscriptions/listen", json!({})),
    )
    .send()
    .await
    .unwrap();
    let body = resp.text().await.unwrap();
    assert!(started.elapsed() >= Duration::from_millis(2900));
    assert_eq!(body.matches(": keepalive").count(), 5, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_upstream_gets_a_504_after_the_read_timeout() {
    let mock = Mock::start(Behavior::Stall).await;
    let edge = start_edge(&format!(
        "[timeouts]\nupstream_read_ms = 500\n\n{}",
        pool_and_route(&[mock.addr], "")
    ));
    let started = Instant::now();
    let resp = modern_request(
        &client(),
        &edge.url(),
        &modern_body(json!(9), "tools/list", json!({})),
    )
    .send()
    .await
    .unwrap();
    assert_eq!(resp.status(), 504);
    assert_eq!(resp.headers()["x-mcp-edge-error"], "upstream_timeout");
    let v: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(v["id"], 9);
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_mid_response_ends_the_client_response_not_hangs() {
    let mock = Mock::start(Behavior::ResetMidResponse).await;
    let edge = start_edge(&pool_and_route(&[mock.addr], ""));
    let resp = tokio::time::timeout(
        Duration::from_secs(5),
        modern_request(
            &client(),
            &edge.url(),
            &modern_body(json!(1), "tools/list", json!({})),
        )
        .send(),
    )
    .await
    .expect("client hung");
    // Headers were already relayed: the body must end in an error, promptly.
    let resp = resp.unwrap();
    let body = tokio::time::timeout(Duration::from_secs(5), resp.bytes())
        .await
        .expect("body hung");
    assert!(body.is_err(), "a truncated body must not look complete");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sse_stream_cut_mid_event_ends_in_an_error_not_a_hang() {
    let mock = Mock::start(Behavior::SseCutMidEvent).await;
    let edge = start_edge(&pool_and_route(&[mock.addr], ""));
    let resp = modern_request(
        &client(),
        &edge.url(),
        &modern_body(json!(1), "tools/call", json!({"name":"slow"})),
    )
    .send()
    .await
    .unwrap();
    assert_eq!(resp.status(), 200);
    let mut stream = resp.bytes_stream();
    let mut got = Vec::new();
    let ended = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(chunk) = stream.next().await {
            match chunk {
                Ok(c) => got.extend_from_slice(&c),
                Err(_) => return true,
            }
        }
        false
    })
    .await
    .expect("the client hung on a cut stream");
    assert!(ended, "a cut stream must not look like a complete one");
    assert!(
        String::from_utf8_lossy(&got).starts_with("event: message\ndata: {\"a\":1}\n\n"),
        "the whole event came through"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_first_byte_is_waited_for_up_to_the_read_timeout() {
    let mock = Mock::start(Behavior::SlowFirstByte(Duration::from_millis(800))).await;
    let patient = start_edge(&format!(
        "[timeouts]\nupstream_read_ms = 2000\n\n{}",
        pool_and_route(&[mock.addr], "")
    ));
    let resp = modern_request(
        &client(),
        &patient.url(),
        &modern_body(json!(1), "tools/list", json!({})),
    )
    .send()
    .await
    .unwrap();
    assert_eq!(resp.status(), 200);
    let impatient = start_edge(&format!(
        "[timeouts]\nupstream_read_ms = 300\n\n{}",
        pool_and_route(&[mock.addr], "")
    ));
    let resp = modern_request(
        &client(),
        &impatient.url(),
        &modern_body(json!(2), "tools/list", json!({})),
    )
    .send()
    .await
    .unwrap();
    assert_eq!(resp.status(), 504);
    assert_eq!(resp.headers()["x-mcp-edge-error"], "upstream_timeout");
}
