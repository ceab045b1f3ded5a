//! Session tokens that must not work: every one gets 404 with the edge's marker, and the
//! upstream is never contacted.

mod common;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use common::mock::{Behavior, Mock};
use common::*;
use mcp_edge::session::token::{self, Claims};
use mcp_edge::session::{credential_digest, KeyRing};
use serde_json::json;

fn now() -> u64 {
    mcp_edge::session::token::now_secs()
}

fn claims(edge: &Edge, member: &str) -> Claims {
    Claims {
        pool: edge.pool.clone(),
        member: member.into(),
        upstream_id: "sid-1".into(),
        issued_at: now(),
        credential: None,
        owner: None,
    }
}

fn seal_with(secret: &str, c: &Claims) -> String {
    token::seal(&KeyRing::parse(&format!("1:{secret}")).unwrap(), c).unwrap()
}

fn call(edge: &Edge, token: &str, auth: Option<&str>) -> reqwest::RequestBuilder {
    let mut rb = client()
        .post(edge.url())
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-11-25")
        .header("mcp-session-id", token);
    if let Some(a) = auth {
        rb = rb.header("authorization", a);
    }
    rb.body(json!({"jsonrpc":"2.0","id":7,"method":"tools/list"}).to_string())
}

async fn status(rb: reqwest::RequestBuilder) -> u16 {
    rb.send().await.unwrap().status().as_u16()
}

/// The token is refused with 404 and `kind`, and the upstream never hears of it.
async fn assert_404(
    edge: &Edge,
    upstream: &Mock,
    token: &str,
    auth: Option<&str>,
    kind: &'static str,
    what: &str,
) {
    assert_rejected(
        upstream,
        what,
        &Expect::edge(404, kind, -32001, json!(7)),
        exchange(call(edge, token, auth)),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_tokens_get_404_and_never_reach_the_upstream() {
    let mock = Mock::start(Behavior::Json).await;
    let edge = start_edge(&format!(
        "[sessions]\nkeys_file = \"{}\"\nmax_age_seconds = 600\n\n{}",
        key_file(&format!("1:{KEY_A}")),
        unchecked_pool_and_route(&[mock.addr], "")
    ));
    let member = mock.addr.to_string();
    let good = seal_with(KEY_A, &claims(&edge, &member));

    // Control: the good token goes through, so the 404s below are about the tokens.
    assert_eq!(status(call(&edge, &good, None)).await, 200);
    assert_eq!(mock.requests(), 1);

    // Every byte flipped (all bits of it), over HTTP.
    let raw = URL_SAFE_NO_PAD.decode(&good).unwrap();
    let failures =
        |reason: &str| format!("mcp_edge_session_token_failures_total{{reason=\"{reason}\"}}");
    let mut before = Vec::new();
    for reason in ["malformed", "unknown_key", "forged"] {
        before.push(metric(&edge, &failures(reason)).await);
    }
    for i in 0..raw.len() {
        let mut m = raw.clone();
        m[i] ^= 0xff;
        assert_404(
            &edge,
            &mock,
            &URL_SAFE_NO_PAD.encode(&m),
            None,
            "session_unknown",
            &format!("byte {i} flipped"),
        )
        .await;
    }
    // Each flip counted once, under its reason: the version byte, the key id, the rest
    // (nonce, ciphertext, tag) fails authentication. (No other test in this binary refuses
    // tokens, so the process-wide counters move only by these.)
    for (reason, (before, delta)) in ["malformed", "unknown_key", "forged"]
        .iter()
        .zip(before.into_iter().zip([1.0, 1.0, (raw.len() - 2) as f64]))
    {
        wait_delta(&edge, &failures(reason), before, delta).await;
    }
    // Truncations.
    for n in [0, 1, 2, 13, 14, 30, raw.len() - 1] {
        let t = URL_SAFE_NO_PAD.encode(&raw[..n]);
        assert_rejected(
            &mock,
            &format!("truncated to {n}"),
            &Expect::edge(404, "session_unknown", -32001, json!(7)),
            exchange(call(&edge, &t, None)),
        )
        .await;
    }
    // Sealed with another key under the same id.
    assert_404(
        &edge,
        &mock,
        &seal_with(KEY_B, &claims(&edge, &member)),
        None,
        "session_unknown",
        "wrong key",
    )
    .await;
    // Expired.
    let old = Claims {
        issued_at: now() - 601,
        ..claims(&edge, &member)
    };
    assert_404(
        &edge,
        &mock,
        &seal_with(KEY_A, &old),
        None,
        "session_expired",
        "expired",
    )
    .await;
    // Bound to another credential, and a bound token presented without one.
    let bound = Claims {
        credential: credential_digest(Some(b"Bearer alice")),
        ..claims(&edge, &member)
    };
    let t = seal_with(KEY_A, &bound);
    assert_404(
        &edge,
        &mock,
        &t,
        Some("Bearer mallory"),
        "session_foreign",
        "other credential",
    )
    .await;
    assert_404(
        &edge,
        &mock,
        &t,
        None,
        "session_foreign",
        "credential dropped",
    )
    .await;
    assert_eq!(
        status(call(&edge, &t, Some("Bearer alice"))).await,
        200,
        "the right credential"
    );
    // A member not in the pool (an SSRF attempt through a forged-but-valid token).
    assert_404(
        &edge,
        &mock,
        &seal_with(KEY_A, &claims(&edge, "169.254.169.254:80")),
        None,
        "session_member_gone",
        "foreign member",
    )
    .await;
    // Another pool's token.
    let other_pool = Claims {
        pool: "other".into(),
        ..claims(&edge, &member)
    };
    assert_404(
        &edge,
        &mock,
        &seal_with(KEY_A, &other_pool),
        None,
        "session_unknown",
        "other pool",
    )
    .await;
    // Junk and repeated headers.
    assert_404(&edge, &mock, "not-a-token", None, "session_unknown", "junk").await;
    let repeated = client()
        .post(edge.url())
        .header("content-type", "application/json")
        .header("mcp-session-id", &good)
        .header("mcp-session-id", &good)
        .body(json!({"jsonrpc":"2.0","id":7,"method":"tools/list"}).to_string());
    assert_rejected(
        &mock,
        "repeated Mcp-Session-Id",
        &Expect::edge(404, "session_unknown", -32001, json!(7)),
        exchange(repeated),
    )
    .await;

    assert_eq!(
        (mock.heads(), mock.requests()),
        (2, 2),
        "only the two good requests reached the upstream"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_upstream_session_id_is_restored_on_the_way_in() {
    let mock = Mock::start(Behavior::Json).await;
    let edge = start_edge(&pool_and_route(&[mock.addr], ""));
    let t = seal_with(KEY_A, &claims(&edge, &mock.addr.to_string()));
    assert_eq!(status(call(&edge, &t, None)).await, 200);
    let head = mock.last().unwrap().head.to_ascii_lowercase();
    assert!(head.contains("mcp-session-id: sid-1\r\n"), "{head}");
    assert!(
        !head.contains(&t.to_ascii_lowercase()),
        "the token leaked upstream"
    );
}
