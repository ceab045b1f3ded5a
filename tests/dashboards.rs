//! Every metric a dashboard panel or alert rule uses is exported by a running edge after
//! real traffic (a renamed metric would otherwise silently blank a panel).

mod common;

use std::collections::BTreeSet;

use common::mock::{Behavior, Mock, Pace};
use common::*;
use serde_json::json;

/// `mcp_edge_*` and `mcp_server_*` metric family names referenced in a text, histogram
/// suffixes removed.
fn referenced(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for prefix in ["mcp_edge_", "mcp_server_"] {
        out.extend(referenced_with(text, prefix));
    }
    out
}

fn referenced_with(text: &str, prefix: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while let Some(pos) = text[i..].find(prefix) {
        let start = i + pos;
        let mut end = start;
        while end < bytes.len() && (bytes[end].is_ascii_alphanumeric() || bytes[end] == b'_') {
            end += 1;
        }
        let name = &text[start..end];
        let base = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| name.strip_suffix(s))
            .unwrap_or(name);
        out.insert(base.to_string());
        i = end;
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_used_by_dashboards_and_alerts_is_exported() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("dashboards");
    let mut wanted = BTreeSet::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        // Unit-test inputs for promtool hold made-up series, not queries.
        if name.ends_with("_test.yml") {
            continue;
        }
        if name.ends_with(".json") || name.ends_with(".yml") || name.ends_with(".yaml") {
            wanted.extend(referenced(&std::fs::read_to_string(&path).unwrap()));
        }
    }
    assert!(
        wanted.len() >= 10,
        "dashboards reference too few metrics: {wanted:?}"
    );

    // Traffic that makes every family appear: a dead member in an unchecked pool (so the
    // requests surely try it: connect failures), a DNS pool under active checks (members,
    // health, resolutions), a forwarded request (rate-limit decisions), an SSE stream, an
    // edge error.
    let ok = Mock::start(Behavior::Json).await;
    let sse = Mock::start(Behavior::Sse {
        frames: vec![(Pace::Now, ": hi\n\n".into())],
        hold: std::time::Duration::from_millis(10),
    })
    .await;
    let dead = refusing();
    let edge = start_edge(&format!(
        "[[pools]]\nname = \"main\"\nmembers = [\"{}\", \"{}\"]\nmax_in_flight = 8\n[pools.health]\ncheck = \"none\"\n\n\
         [[pools]]\nname = \"dns\"\ndns = \"localhost:{}\"\ndns_interval_ms = 100\n[pools.health]\ncheck = \"tcp\"\ninterval_ms = 100\n\n\
         [[routes]]\npath = \"/mcp\"\npool = \"main\"\n[routes.rate_limit]\nrequests_per_second = 1000\n\n\
         [[routes]]\npath = \"/sse\"\npool = \"dns\"\n",
        dead.addr,
        ok.addr,
        sse.addr.port()
    ));
    let c = client();
    // Round robin over two members: one of the first two requests tries the dead one.
    for i in 0..4 {
        let resp = modern_request(
            &c,
            &edge.url(),
            &modern_body(json!(i), "tools/list", json!({})),
        )
        .send()
        .await
        .unwrap();
        assert_eq!(resp.status(), 200, "request {i}");
    }
    wait_metric(
        &edge,
        &format!(
            "mcp_edge_upstream_connect_failures_total{{member=\"{}\",pool=\"{}\"}}",
            dead.addr, edge.pool
        ),
        1.0,
    )
    .await;
    let body = modern_body(json!(9), "subscriptions/listen", json!({}));
    wait_metric(
        &edge,
        &format!(
            "mcp_edge_pool_members{{pool=\"{}\"}}",
            edge.pools.name("dns")
        ),
        1.0,
    )
    .await;
    let r = modern_request(&c, &format!("http://127.0.0.1:{}/sse", edge.port), &body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    r.text().await.unwrap();
    let bad = c.post(edge.url()).body("nope").send().await.unwrap();
    assert!(bad.headers().contains_key("x-mcp-edge-error"));

    // TLS: a listener with a certificate (its expiry), and a pool that expects HTTPS from a
    // member that answers plain text at once (an upstream handshake failure).
    let plain = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let plain_addr = plain.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = plain.accept().await {
            use tokio::io::AsyncWriteExt;
            let _ = s
                .write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")
                .await;
        }
    });
    let pki = common::tls::Pki::new();
    let cert = pki.issue(&["localhost"]);
    let tls_edge = start_edge_listening(
        free_port(),
        &format!(
            "[listeners.tls]\ncertificates = [{{ cert = \"{}\", key = \"{}\" }}]\n",
            cert.cert.display(),
            cert.key.display()
        ),
        &format!(
            "[[pools]]\nname = \"main\"\nmembers = [\"{}\"]\n[pools.health]\ncheck = \"none\"\n[pools.tls]\n\n[[routes]]\npath = \"/mcp\"\npool = \"main\"\n",
            plain_addr
        ),
        Pools::fresh(),
    );
    let r = modern_request(
        &pki.client(true),
        &format!("https://localhost:{}/mcp", tls_edge.port),
        &modern_body(json!(10), "tools/list", json!({})),
    )
    .send()
    .await
    .unwrap();
    assert_eq!(r.status(), 502);

    // Families appear as their first sample is recorded (some just after an answer, some at
    // the next health check): wait for all of them.
    let families: Vec<String> = wanted.iter().map(|m| format!("# TYPE {m} ")).collect();
    let families: Vec<&str> = families.iter().map(String::as_str).collect();
    wait_series(&edge, &families).await;
}
