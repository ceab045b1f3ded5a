//! The front door beside TLS: CORS answered by the edge for allowed origins (and readable
//! errors), pass-through routes for OAuth discovery documents and other HTTP endpoints, and
//! forwarding headers that clients cannot spoof.

mod common;

use common::mock::{Behavior, Mock};
use common::*;
use serde_json::json;

const PAGE: &str = "https://app.example";

fn cors_route() -> String {
    format!("allowed_origins = [\"{PAGE}\"]\ncors_max_age_seconds = 300")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preflights_from_allowed_origins_are_answered_by_the_edge() {
    let mock = Mock::start(Behavior::Json).await;
    let edge = start_edge(&unchecked_pool_and_route(&[mock.addr], &cors_route()));
    let c = client();
    let r = c
        .request(reqwest::Method::OPTIONS, edge.url())
        .header("origin", PAGE)
        .header("access-control-request-method", "POST")
        .header(
            "access-control-request-headers",
            "content-type, mcp-protocol-version, mcp-method, mcp-param-region, x-other",
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    let h = r.headers();
    assert_eq!(h["access-control-allow-origin"], PAGE);
    assert_eq!(h["vary"], "Origin");
    assert_eq!(h["access-control-max-age"], "300");
    assert_eq!(
        h["access-control-allow-methods"],
        "GET, POST, DELETE, OPTIONS"
    );
    let allowed = h["access-control-allow-headers"].to_str().unwrap();
    for name in [
        "content-type",
        "accept",
        "authorization",
        "mcp-method",
        "mcp-name",
        "mcp-session-id",
        "mcp-protocol-version",
        "last-event-id",
        "mcp-param-region",
    ] {
        assert!(allowed.contains(name), "{name} missing from {allowed}");
    }
    assert!(!allowed.contains("x-other"), "{allowed}");
    let preflights = r#"mcp_edge_cors_preflights_total{route="/mcp"}"#;
    assert!(metric(&edge, preflights).await >= 1.0);

    // Another origin: 403, no grant; and neither preflight reached the upstream.
    let r = c
        .request(reqwest::Method::OPTIONS, edge.url())
        .header("origin", "https://evil.example")
        .header("access-control-request-method", "POST")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    assert!(r.headers().get("access-control-allow-origin").is_none());
    assert_eq!(mock.requests(), 0, "preflights are never forwarded");

    // Without CORS configured, OPTIONS stays the upstream's business.
    let plain = start_edge(&unchecked_pool_and_route(&[mock.addr], ""));
    let r = c
        .request(reqwest::Method::OPTIONS, plain.url())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(mock.requests(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allowed_origins_can_read_responses_and_the_edges_errors() {
    let mock = Mock::start(Behavior::JsonWithSession("upstream-session".into())).await;
    let body = format!(
        "{}\n",
        unchecked_pool_and_route(&[mock.addr], &cors_route())
    );
    let edge = start_edge(&body);
    let c = client();
    let granted = |r: &reqwest::Response| {
        let h = r.headers();
        assert_eq!(h["access-control-allow-origin"], PAGE, "{h:?}");
        assert!(h.get_all("vary").iter().any(|v| v == "Origin"), "{h:?}");
        let exposed = h["access-control-expose-headers"].to_str().unwrap();
        for name in ["mcp-session-id", "www-authenticate", "x-mcp-edge-error"] {
            assert!(exposed.contains(name), "{name} not exposed: {exposed}");
        }
    };
    // A proxied legacy initialize: the page can read the (sealed) session id.
    let init = json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"page","version":"1"}}});
    let r = c
        .post(edge.url())
        .header("origin", PAGE)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(init.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    granted(&r);
    assert!(r.headers().contains_key("mcp-session-id"));
    // The edge's own errors: an unknown session (404) and an unsupported version (-32022).
    let r = c
        .post(edge.url())
        .header("origin", PAGE)
        .header("content-type", "application/json")
        .header("mcp-session-id", "bogus")
        .header("mcp-protocol-version", "2025-06-18")
        .body(json!({"jsonrpc":"2.0","id":2,"method":"tools/list"}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    granted(&r);
    assert_eq!(r.headers()["x-mcp-edge-error"], "session_unknown");
    let mut bad = modern_body(json!(3), "tools/list", json!({}));
    bad["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!("1999-01-01");
    let r = c
        .post(edge.url())
        .header("origin", PAGE)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "1999-01-01")
        .header("mcp-method", "tools/list")
        .body(bad.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    granted(&r);
    let error: serde_json::Value = r.json().await.unwrap();
    assert_eq!(error["error"]["code"], -32022, "{error}");
    // No Origin (a non-browser client): no CORS headers at all.
    let r = modern_request(
        &c,
        &edge.url(),
        &modern_body(json!(4), "tools/list", json!({})),
    )
    .send()
    .await
    .unwrap();
    assert!(r.headers().get("access-control-allow-origin").is_none());
    // A disallowed origin: 403 with no grant.
    let r = c
        .post(edge.url())
        .header("origin", "https://evil.example")
        .header("content-type", "application/json")
        .body(init.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    assert!(r.headers().get("access-control-allow-origin").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passthrough_routes_forward_discovery_documents_untouched() {
    let challenge = "Bearer resource_metadata=\"https://edge.example/.well-known/oauth-protected-resource/mcp\"";
    let mcp = Mock::start(Behavior::Raw(format!(
        "HTTP/1.1 401 Unauthorized\r\nwww-authenticate: {challenge}\r\ncontent-length: 0\r\n\r\n"
    )))
    .await;
    let document = r#"{"resource":"https://edge.example/mcp","authorization_servers":["https://auth.example"]}"#;
    let docs = Mock::start(Behavior::Raw(format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{document}",
        document.len()
    )))
    .await;
    let body = format!(
        "{}\n[[pools]]\nname = \"docs\"\nmembers = [\"{}\"]\n[pools.health]\ncheck = \"none\"\n\n[[passthrough]]\npath = \"/.well-known/oauth-protected-resource/mcp\"\npool = \"docs\"\n\n[[passthrough]]\npath_prefix = \"/.well-known/\"\npool = \"docs\"\nallowed_origins = [\"{PAGE}\"]\n",
        unchecked_pool_and_route(&[mcp.addr], ""),
        docs.addr
    );
    let edge = start_edge(&body);
    let c = client();
    let base = format!("http://127.0.0.1:{}", edge.port);

    // The MCP server's 401 and its challenge pass through untouched.
    let r = modern_request(
        &c,
        &edge.url(),
        &modern_body(json!(1), "tools/list", json!({})),
    )
    .header("authorization", "Bearer abc")
    .send()
    .await
    .unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(r.headers()["www-authenticate"], challenge);
    assert_eq!(
        mcp.last()
            .unwrap()
            .head
            .lines()
            .filter(|l| l
                .to_ascii_lowercase()
                .starts_with("authorization: bearer abc"))
            .count(),
        1
    );

    // The document: exact path, no MCP headers needed, path and query as sent.
    let r = c
        .get(format!(
            "{base}/.well-known/oauth-protected-resource/mcp?x=1"
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.unwrap(), document);
    let head = docs.last().unwrap().head;
    assert!(
        head.starts_with("GET /.well-known/oauth-protected-resource/mcp?x=1 HTTP/1.1"),
        "{head}"
    );
    // A prefix route: any path under it, any method and body, browsers from allowed origins.
    let r = c
        .post(format!("{base}/.well-known/openid-configuration/extra"))
        .header("origin", PAGE)
        .header("content-type", "application/x-www-form-urlencoded")
        .body("a=1&b=2")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["access-control-allow-origin"], PAGE);
    let seen = docs.last().unwrap();
    assert!(seen
        .head
        .starts_with("POST /.well-known/openid-configuration/extra HTTP/1.1"));
    assert_eq!(seen.body_len, 7);
    // Outside every route: still 404; and a prefix never carries a path that a server
    // normalising dot segments would serve as another route (reqwest would normalise it
    // itself: raw bytes).
    let r = c.get(format!("{base}/other")).send().await.unwrap();
    assert_eq!(r.status(), 404);
    assert_eq!(r.headers()["x-mcp-edge-error"], "no_route");
    let before = docs.requests();
    for path in ["/.well-known/../mcp", "/.well-known/x/%2e%2e/%2e%2e/mcp"] {
        let raw = format!("GET {path} HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n\r\n");
        let answer = exchange_raw(edge.port, raw.as_bytes()).await;
        assert_eq!(answer.status, Some(404), "{path}");
    }
    assert_eq!(docs.requests(), before);
    // Without an origin list a pass-through route does not look at Origin (a same-origin
    // form post to an authorization server sends one); it grants nothing either.
    let r = c
        .get(format!("{base}/.well-known/oauth-protected-resource/mcp"))
        .header("origin", "https://anyone.example")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.headers().get("access-control-allow-origin").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstreams_own_cors_grant_never_reaches_another_origin() {
    // The upstream grants credentials to its own front end.
    let upstream = Mock::start(Behavior::Raw(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\naccess-control-allow-origin: https://upstream.example\r\naccess-control-allow-credentials: true\r\ncontent-length: 2\r\n\r\n{}".into(),
    ))
    .await;
    let edge = start_edge(&unchecked_pool_and_route(&[upstream.addr], &cors_route()));
    let c = client();
    let call = async |origin: Option<&str>| {
        let mut rb = modern_request(
            &c,
            &edge.url(),
            &modern_body(json!(1), "tools/list", json!({})),
        );
        if let Some(o) = origin {
            rb = rb.header("origin", o);
        }
        rb.send().await.unwrap()
    };
    let r = call(Some(PAGE)).await;
    assert_eq!(r.headers()["access-control-allow-origin"], PAGE);
    assert!(r
        .headers()
        .get("access-control-allow-credentials")
        .is_none());
    assert_eq!(
        r.headers()
            .get_all("access-control-allow-origin")
            .iter()
            .count(),
        1
    );
    // No Origin on a CORS route: no grant at all, and caches still key on Origin.
    let r = call(None).await;
    assert!(r.headers().get("access-control-allow-origin").is_none());
    assert!(r
        .headers()
        .get("access-control-allow-credentials")
        .is_none());
    assert!(r.headers().get_all("vary").iter().any(|v| v == "Origin"));
}

fn header_values(head: &str, name: &str) -> Vec<String> {
    head.lines()
        .filter_map(|l| l.split_once(':'))
        .filter(|(k, _)| k.trim().eq_ignore_ascii_case(name))
        .map(|(_, v)| v.trim().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarding_headers_cannot_be_spoofed_and_trace_context_passes() {
    let mock = Mock::start(Behavior::Json).await;
    let c = client();
    let send = async |edge: &Edge| {
        modern_request(
            &c,
            &edge.url(),
            &modern_body(json!(1), "tools/list", json!({})),
        )
        .header("x-forwarded-for", "198.51.100.7")
        .header("x-forwarded-proto", "https")
        .header("x-forwarded-host", "bank.example")
        .header("forwarded", "for=198.51.100.7")
        .header(
            "traceparent",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        )
        .header("tracestate", "vendor=opaque")
        .send()
        .await
        .unwrap();
        mock.last().unwrap().head
    };
    // Default: X-Forwarded-* set from the connection, whatever the client claimed.
    let edge = start_edge(&unchecked_pool_and_route(&[mock.addr], ""));
    let head = send(&edge).await;
    assert_eq!(header_values(&head, "x-forwarded-for"), ["127.0.0.1"]);
    assert_eq!(header_values(&head, "x-forwarded-proto"), ["http"]);
    assert_eq!(
        header_values(&head, "x-forwarded-host"),
        [format!("127.0.0.1:{}", edge.port)]
    );
    assert_eq!(
        header_values(&head, "traceparent"),
        ["00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"]
    );
    assert_eq!(header_values(&head, "tracestate"), ["vendor=opaque"]);
    assert!(
        header_values(&head, "forwarded").is_empty(),
        "Forwarded is off by default, and the client's claim is removed"
    );
    // From a trusted proxy, the chain is extended and its proto kept; Forwarded on.
    let trusted = format!(
        "[forwarding]\ntrusted_proxies = [\"127.0.0.0/8\"]\nforwarded = true\n\n{}",
        unchecked_pool_and_route(&[mock.addr], "")
    );
    let edge = start_edge(&trusted);
    let head = send(&edge).await;
    assert_eq!(
        header_values(&head, "x-forwarded-for"),
        ["198.51.100.7, 127.0.0.1"]
    );
    assert_eq!(header_values(&head, "x-forwarded-proto"), ["https"]);
    assert_eq!(header_values(&head, "x-forwarded-host"), ["bank.example"]);
    assert_eq!(
        header_values(&head, "forwarded"),
        [format!(
            "for=198.51.100.7, for=127.0.0.1;proto=http;host=\"127.0.0.1:{}\"",
            edge.port
        )]
    );
    // Switched off: nothing set, and still nothing a client claimed passes.
    let off = format!(
        "[forwarding]\nx_forwarded = false\n\n{}",
        unchecked_pool_and_route(&[mock.addr], "")
    );
    let edge = start_edge(&off);
    let head = send(&edge).await;
    assert!(header_values(&head, "x-forwarded-for").is_empty(), "{head}");
    assert!(
        header_values(&head, "x-forwarded-host").is_empty(),
        "{head}"
    );
}
