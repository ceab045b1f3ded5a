//! The admin listener's core series move by exactly what a request did, with bounded labels.
//!
//! The only test in this binary, on purpose: the registry is process-wide and series without
//! a pool label (errors by kind, requests by route) are shared by every edge in the process,
//! so exact deltas hold only where no other test sends traffic meanwhile.

mod common;

use std::time::Duration;

use common::mock::{Behavior, Mock, Pace};
use common::*;
use futures_util::StreamExt;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn core_series_move_by_exactly_this_tests_traffic() {
    let mock = Mock::start(Behavior::Json).await;
    let event = "event: message\ndata: {}\n\n";
    let sse = Mock::start(Behavior::Sse {
        frames: vec![(Pace::Now, event.into()), (Pace::OnRelease, event.into())],
        hold: Duration::from_millis(10),
    })
    .await;
    let edge = start_edge(&format!(
        "[[pools]]\nname = \"main\"\nmembers = [\"{}\"]\n[pools.health]\ncheck = \"none\"\n\n\
         [[pools]]\nname = \"sse\"\nmembers = [\"{}\"]\n[pools.health]\ncheck = \"none\"\n\n\
         [[routes]]\npath = \"/mcp\"\npool = \"main\"\n\n[[routes]]\npath = \"/sse\"\npool = \"sse\"\n",
        mock.addr, sse.addr
    ));
    let pool = &edge.pool;
    let requests = |era: &str, method: &str, outcome: &str| {
        format!("mcp_edge_requests_total{{era=\"{era}\",method=\"{method}\",outcome=\"{outcome}\",route=\"/mcp\"}}")
    };
    let durations = |era: &str| {
        format!("mcp_edge_request_duration_seconds_count{{era=\"{era}\",route=\"/mcp\"}}")
    };
    // Each series, and how much this test's traffic must move it.
    let moves = [
        (requests("modern", "tools/list", "forwarded"), 3.0),
        // A method nobody knows is counted, as `other`, never as itself.
        (requests("modern", "other", "forwarded"), 1.0),
        // A request the rules refuse is counted as what its body asked for.
        (requests("modern", "tools/call", "rejected"), 1.0),
        (
            "mcp_edge_errors_total{kind=\"header_mismatch_name\"}".into(),
            1.0,
        ),
        (
            format!(
                "mcp_edge_upstream_responses_total{{class=\"2xx\",member=\"{}\",pool=\"{pool}\"}}",
                mock.addr
            ),
            4.0,
        ),
        (
            format!("mcp_edge_upstream_response_seconds_count{{pool=\"{pool}\"}}"),
            4.0,
        ),
        (durations("modern"), 5.0),
    ];
    let mut before = Vec::new();
    for (series, _) in &moves {
        before.push(metric(&edge, series).await);
    }

    let c = client();
    for i in 0..3 {
        let body = modern_body(json!(i), "tools/list", json!({}));
        let resp = modern_request(&c, &edge.url(), &body).send().await.unwrap();
        assert_eq!(resp.status(), 200);
    }
    let odd = modern_body(json!(9), "x/unbounded-123", json!({}));
    let resp = modern_request(&c, &edge.url(), &odd).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let mismatched = c
        .post(edge.url())
        .header("content-type", "application/json")
        .header("mcp-protocol-version", MODERN)
        .header("mcp-method", "tools/call")
        .header("mcp-name", "b")
        .body(modern_body(json!(10), "tools/call", json!({"name":"a"})).to_string());
    assert_rejected(
        &mock,
        "Mcp-Name mismatch",
        &Expect::edge(400, "header_mismatch_name", -32020, json!(10)),
        exchange(mismatched),
    )
    .await;
    for ((series, delta), before) in moves.iter().zip(before) {
        wait_delta(&edge, series, before, *delta).await;
    }
    assert!(
        !scrape(&edge).await.contains("unbounded-123"),
        "raw method leaked into labels"
    );

    // An open stream is counted while it is open, and only then.
    let gauge = "mcp_edge_active_sse_streams{era=\"modern\"}";
    let idle = metric(&edge, gauge).await;
    let listen = modern_body(json!(11), "subscriptions/listen", json!({}));
    let resp = modern_request(&c, &format!("http://127.0.0.1:{}/sse", edge.port), &listen)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let mut stream = resp.bytes_stream();
    tokio::time::timeout(PATIENCE, stream.next())
        .await
        .expect("the first event")
        .unwrap()
        .unwrap();
    wait_delta(&edge, gauge, idle, 1.0).await;
    sse.release();
    while let Some(chunk) = tokio::time::timeout(PATIENCE, stream.next())
        .await
        .expect("the stream to end")
    {
        chunk.unwrap();
    }
    wait_until(
        PATIENCE,
        "the ended stream to leave the gauge",
        async || metric(&edge, gauge).await == idle,
    )
    .await;

    assert_eq!(
        metric(
            &edge,
            &format!(
                "mcp_edge_build_info{{version=\"{}\"}}",
                env!("CARGO_PKG_VERSION")
            )
        )
        .await,
        1.0
    );
    for path in ["healthz", "readyz"] {
        let r = c
            .get(format!("http://127.0.0.1:{}/{path}", edge.metrics_port))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{path}");
    }
}
