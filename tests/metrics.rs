//! The admin listener exports the core series after real traffic, with bounded labels.

mod common;

use common::mock::{Behavior, Mock};
use common::*;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn core_series_are_exported_after_traffic() {
    let mock = Mock::start(Behavior::Json).await;
    let edge = start_edge(&pool_and_route(&[mock.addr], ""));
    let c = client();
    let ok_key = "mcp_edge_requests_total{era=\"modern\",method=\"tools/list\",outcome=\"forwarded\",route=\"/mcp\"}";
    let before = metric(&edge, ok_key).await;
    for i in 0..3 {
        let resp = modern_request(
            &c,
            &edge.url(),
            &modern_body(json!(i), "tools/list", json!({})),
        )
        .send()
        .await
        .unwrap();
        assert_eq!(resp.status(), 200);
    }
    // A method nobody knows must not become a label value.
    let odd = modern_body(json!(9), "x/unbounded-123", json!({}));
    modern_request(&c, &edge.url(), &odd).send().await.unwrap();
    wait_metric(&edge, ok_key, before + 3.0).await;

    // The odd request's series is recorded just after its answer: wait for every series.
    let upstream_2xx = format!(
        "mcp_edge_upstream_responses_total{{class=\"2xx\",member=\"{}\",pool=\"main\"}}",
        mock.addr
    );
    wait_series(
        &edge,
        &[
            "mcp_edge_errors_total{kind=\"header_mismatch_name\"}",
            "mcp_edge_errors_total{kind=\"connect_failed\"}",
            "mcp_edge_upstream_response_seconds_bucket{pool=\"main\"",
            "mcp_edge_request_duration_seconds_bucket{era=\"modern\"",
            &upstream_2xx,
            "mcp_edge_active_sse_streams{era=\"modern\"}",
            "mcp_edge_build_info{version=",
            "method=\"other\"",
        ],
    )
    .await;
    let text = scrape(&edge).await;
    assert!(
        !text.contains("unbounded-123"),
        "raw method leaked into labels"
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
