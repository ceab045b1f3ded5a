//! SSE responses stream through unbuffered; a client closing the stream closes the upstream
//! request; read timeouts bound silence, not stream length.

mod common;

use std::time::{Duration, Instant};

use common::mock::{Behavior, Event, Mock, Pace};
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
    // The result goes out only when the test releases it, after the first event arrived: a
    // buffering edge would hold the progress event back and the read below would time out.
    let mock = Mock::start(Behavior::Sse {
        frames: vec![
            (Pace::Now, progress.clone()),
            (Pace::OnRelease, result.clone()),
        ],
        hold: Duration::from_millis(10),
    })
    .await;
    let edge = start_edge(&pool_and_route(&[mock.addr], ""));
    for (proto, c) in [("h1", client()), ("h2c", h2c_client())] {
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
        let first = tokio::time::timeout(PATIENCE, stream.next())
            .await
            .unwrap_or_else(|_| panic!("{proto}: no event while the upstream holds the stream"))
            .unwrap()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&first), progress, "{proto}");
        mock.release();
        let mut rest = Vec::new();
        while let Some(chunk) = stream.next().await {
            rest.extend_from_slice(&chunk.unwrap());
        }
        assert_eq!(String::from_utf8_lossy(&rest), result, "{proto}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_the_stream_closes_the_upstream_request_promptly() {
    let ack = frame(
        r#"{"jsonrpc":"2.0","method":"notifications/subscriptions/acknowledged","params":{}}"#,
    );
    let mock = Mock::start(Behavior::Sse {
        frames: vec![(Pace::Now, ack)],
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
        tokio::time::timeout(PATIENCE, stream.next())
            .await
            .expect("the first event")
            .unwrap()
            .unwrap();
        let closed_at = Instant::now();
        drop(stream);
        drop(c);
        let seen = mock
            .wait_for(Event::Disconnected, PATIENCE)
            .await
            .expect("upstream never saw the disconnect");
        // Caused by the close: a disconnect before it (the edge dropping the upstream early)
        // is a different bug, not a fast one.
        assert!(
            seen >= closed_at,
            "the upstream was disconnected {:?} before the client closed",
            closed_at - seen
        );
        let lag = seen - closed_at;
        // Promptly: not at the end of the upstream's 300 s hold or the 60 s read timeout (the
        // bound leaves room for a loaded machine).
        assert!(
            lag < Duration::from_secs(5),
            "upstream saw the close after {lag:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keepalives_keep_a_quiet_stream_alive_past_the_read_timeout() {
    let ack = frame(
        r#"{"jsonrpc":"2.0","method":"notifications/subscriptions/acknowledged","params":{}}"#,
    );
    let mut frames = vec![(Pace::Now, ack)];
    for _ in 0..6 {
        frames.push((
            Pace::After(Duration::from_millis(500)),
            ": keepalive\n\n".to_string(),
        ));
    }
    let mock = Mock::start(Behavior::Sse {
        frames,
        hold: Duration::from_millis(10),
    })
    .await;
    // A 1.5 s read timeout and a 3 s stream with a keep-alive every 0.5 s: the stream outlives
    // the timeout twice, and each silence leaves a second of slack for a loaded machine.
    let edge = start_edge(&format!(
        "[timeouts]\nupstream_read_ms = 1500\n\n{}",
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
    assert_eq!(resp.status(), 200);
    let body = resp.text().await.unwrap();
    assert!(started.elapsed() >= Duration::from_millis(3000));
    assert_eq!(body.matches(": keepalive").count(), 6, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_upstream_gets_a_504_after_the_read_timeout() {
    let mock = Mock::start(Behavior::Stall).await;
    let edge = start_edge(&format!(
        "[timeouts]\nupstream_read_ms = 500\n\n{}",
        pool_and_route(&[mock.addr], "")
    ));
    let started = Instant::now();
    let answer = exchange(modern_request(
        &client(),
        &edge.url(),
        &modern_body(json!(9), "tools/list", json!({})),
    ))
    .await;
    let waited = started.elapsed();
    assert_answer(
        &answer,
        &Expect::edge(504, "upstream_timeout", -32603, json!(9)),
        "silent upstream",
    );
    // The configured 500 ms, not the 60 s default (the bound leaves room for a busy machine).
    assert!(
        waited >= Duration::from_millis(500) && waited < Duration::from_secs(10),
        "answered after {waited:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_mid_response_ends_the_client_response_not_hangs() {
    let mock = Mock::start(Behavior::ResetMidResponse).await;
    let edge = start_edge(&pool_and_route(&[mock.addr], ""));
    let resp = tokio::time::timeout(
        Duration::from_secs(10),
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
    let body = tokio::time::timeout(Duration::from_secs(10), resp.bytes())
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
    let ended = tokio::time::timeout(Duration::from_secs(10), async {
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
    // 2 s of silence against a 10 s and a 0.3 s read timeout: wide margins either way.
    let mock = Mock::start(Behavior::SlowFirstByte(Duration::from_secs(2))).await;
    let patient = start_edge(&format!(
        "[timeouts]\nupstream_read_ms = 10000\n\n{}",
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
    let answer = exchange(modern_request(
        &client(),
        &impatient.url(),
        &modern_body(json!(2), "tools/list", json!({})),
    ))
    .await;
    assert_answer(
        &answer,
        &Expect::edge(504, "upstream_timeout", -32603, json!(2)),
        "impatient edge",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_stream_in_any_letter_case_gets_the_stream_idle_bound() {
    // A media type is case-insensitive (RFC 9110 §8.3.1): `Text/Event-Stream` is an event
    // stream, whose silences are bounded by `stream_idle_ms` (a day), not by the 300 ms
    // `upstream_read_ms` that bounds gaps inside an ordinary answer.
    let first = frame(
        r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":1}}"#,
    );
    let last = frame(r#"{"jsonrpc":"2.0","id":1,"result":{"content":[]}}"#);
    let mock = Mock::start(Behavior::SseTyped {
        content_type: "Text/Event-Stream",
        frames: vec![
            (Pace::Now, first.clone()),
            (Pace::After(Duration::from_millis(1500)), last.clone()),
        ],
        hold: Duration::from_millis(10),
    })
    .await;
    let edge = start_edge(&format!(
        "[timeouts]\nupstream_read_ms = 300\n\n{}",
        pool_and_route(&[mock.addr], "")
    ));
    let resp = modern_request(
        &client(),
        &edge.url(),
        &modern_body(json!(1), "tools/call", json!({"name":"slow"})),
    )
    .send()
    .await
    .unwrap();
    assert_eq!(resp.status(), 200);
    let body = tokio::time::timeout(PATIENCE, resp.text())
        .await
        .expect("the stream ended")
        .expect("the stream was cut during a silence");
    assert_eq!(body, format!("{first}{last}"));
}
