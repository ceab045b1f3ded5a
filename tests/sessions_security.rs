//! Session tokens that must not work: every one gets 404 with the edge's marker, and the
//! upstream is never contacted.

mod common;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use common::mock::{Behavior, Mock};
use common::*;
use mcp_edge::session::token::{self, Claims};
use mcp_edge::session::{credential_digest, KeyRing};
use serde_json::{json, Value};

fn now() -> u64 {
    mcp_edge::session::affinity::now_secs()
}

fn claims(member: &str) -> Claims {
    Claims {
        pool: "main".into(),
        member: member.into(),
        upstream_id: "sid-1".into(),
        issued_at: now(),
        credential: None,
    }
}

fn seal_with(secret: &str, c: &Claims) -> String {
    token::seal(&KeyRing::parse(&format!("1:{secret}")).unwrap(), c).unwrap()
}

async fn call(edge: &Edge, token: &str, auth: Option<&str>) -> reqwest::Response {
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
        .send()
        .await
        .unwrap()
}

async fn assert_404(edge: &Edge, token: &str, auth: Option<&str>, kind: &str, what: &str) {
    let resp = call(edge, token, auth).await;
    assert_eq!(resp.status(), 404, "{what}");
    assert_eq!(resp.headers()["x-mcp-edge-error"], kind, "{what}");
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["id"], 7, "{what}");
    assert_eq!(v["error"]["code"], -32001, "{what}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_tokens_get_404_and_never_reach_the_upstream() {
    let mock = Mock::start(Behavior::Json).await;
    let edge = start_edge(&format!(
        "[sessions]\nkeys_file = \"{}\"\nmax_age_seconds = 600\n\n{}",
        key_file(&format!("1:{KEY_A}")),
        pool_and_route(&[mock.addr], "")
    ));
    let member = mock.addr.to_string();
    let good = seal_with(KEY_A, &claims(&member));

    // Control: the good token goes through, so the 404s below are about the tokens.
    let resp = call(&edge, &good, None).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(mock.count(), 1);

    // Every byte flipped (all bits of it), over HTTP.
    let raw = URL_SAFE_NO_PAD.decode(&good).unwrap();
    for i in 0..raw.len() {
        let mut m = raw.clone();
        m[i] ^= 0xff;
        assert_404(
            &edge,
            &URL_SAFE_NO_PAD.encode(&m),
            None,
            "session_unknown",
            &format!("byte {i} flipped"),
        )
        .await;
    }
    // Truncations.
    for n in [0, 1, 2, 13, 14, 30, raw.len() - 1] {
        let t = URL_SAFE_NO_PAD.encode(&raw[..n]);
        let resp = call(&edge, &t, None).await;
        assert_eq!(resp.status(), 404, "truncated to {n}");
    }
    // Sealed with another key under the same id.
    assert_404(
        &edge,
        &seal_with(KEY_B, &claims(&member)),
        None,
        "session_unknown",
        "wrong key",
    )
    .await;
    // Expired.
    let old = Claims {
        issued_at: now() - 601,
        ..claims(&member)
    };
    assert_404(
        &edge,
        &seal_with(KEY_A, &old),
        None,
        "session_expired",
        "expired",
    )
    .await;
    // Bound to another credential, and a bound token presented without one.
    let bound = Claims {
        credential: credential_digest(Some(b"Bearer alice")),
        ..claims(&member)
    };
    let t = seal_with(KEY_A, &bound);
    assert_404(
        &edge,
        &t,
        Some("Bearer mallory"),
        "session_foreign",
        "other credential",
    )
    .await;
    assert_404(&edge, &t, None, "session_foreign", "credential dropped").await;
    assert_eq!(
        call(&edge, &t, Some("Bearer alice")).await.status(),
        200,
        "the right credential"
    );
    // A member not in the pool (an SSRF attempt through a forged-but-valid token).
    assert_404(
        &edge,
        &seal_with(KEY_A, &claims("169.254.169.254:80")),
        None,
        "session_member_gone",
        "foreign member",
    )
    .await;
    // Another pool's token.
    let other_pool = Claims {
        pool: "other".into(),
        ..claims(&member)
    };
    assert_404(
        &edge,
        &seal_with(KEY_A, &other_pool),
        None,
        "session_unknown",
        "other pool",
    )
    .await;
    // Junk and repeated headers.
    assert_404(&edge, "not-a-token", None, "session_unknown", "junk").await;
    let resp = client()
        .post(edge.url())
        .header("content-type", "application/json")
        .header("mcp-session-id", &good)
        .header("mcp-session-id", &good)
        .body(json!({"jsonrpc":"2.0","id":7,"method":"tools/list"}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404, "repeated Mcp-Session-Id");

    assert_eq!(
        mock.count(),
        2,
        "only the two good requests reached the upstream"
    );
    assert!(
        wait_metric(
            &edge,
            "mcp_edge_session_token_failures_total{reason=\"forged\"}",
            1.0
        )
        .await
            >= 1.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_upstream_session_id_is_restored_on_the_way_in() {
    let mock = Mock::start(Behavior::Json).await;
    let edge = start_edge(&pool_and_route(&[mock.addr], ""));
    let t = seal_with(KEY_A, &claims(&mock.addr.to_string()));
    assert_eq!(call(&edge, &t, None).await.status(), 200);
    let head = mock.last().unwrap().head.to_ascii_lowercase();
    assert!(head.contains("mcp-session-id: sid-1\r\n"), "{head}");
    assert!(
        !head.contains(&t.to_ascii_lowercase()),
        "the token leaked upstream"
    );
}
