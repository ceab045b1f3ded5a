//! Identity at the edge: JWTs checked against a JWKS served over HTTPS (keys made in the
//! test), tool policy per tenant enforced on lists and calls with the official TypeScript and
//! Python SDK clients against a TypeScript SDK server, sessions bound to the principal, rate
//! limits, credential stripping and hostile tokens.

mod common;

use std::time::{Duration, Instant};

use common::auth::{claims, jwks, now, SigningKey, StaticServer};
use common::mock::{Behavior, Mock};
use common::peers::{py_client, py_server, ts_client, ts_server, Peer};
use common::tls::Pki;
use common::*;
use jsonwebtoken::Algorithm;
use serde_json::{json, Value};

const ISS: &str = "https://issuer.test";
const AUD: &str = "https://edge.test/mcp";

/// An issuer: three keys (RS256, ES256, EdDSA) and its JWKS served over HTTPS with a
/// certificate from a CA made here.
struct Issuer {
    pki: Pki,
    jwks: StaticServer,
    rsa: SigningKey,
    ec: SigningKey,
    ed: SigningKey,
}

impl Issuer {
    async fn start() -> Issuer {
        let pki = Pki::new();
        let cert = pki.issue(&["127.0.0.1"]);
        let rsa = SigningKey::generate("rsa-1", Algorithm::RS256);
        let ec = SigningKey::generate("ec-1", Algorithm::ES256);
        let ed = SigningKey::generate("ed-1", Algorithm::EdDSA);
        let doc = jwks(&[&rsa, &ec, &ed]);
        let jwks = StaticServer::start(vec![("/jwks", 200, doc)], Some(&cert)).await;
        Issuer {
            pki,
            jwks,
            rsa,
            ec,
            ed,
        }
    }

    fn url(&self) -> String {
        format!("https://127.0.0.1:{}/jwks", self.jwks.addr.port())
    }

    /// `[identity]` trusting this issuer, plus `extra` keys for `[identity]`.
    fn section(&self, extra: &str) -> String {
        format!(
            "[identity]\n{extra}\n[identity.jwt]\nissuer = \"{ISS}\"\naudience = [\"{AUD}\"]\njwks_url = \"{}\"\njwks_ca_file = \"{}\"\ntenant_claim = \"tenant\"\ngroups_claim = \"groups\"\n\n",
            self.url(),
            self.pki.ca_pem.display()
        )
    }

    fn token(&self, key: &SigningKey, sub: &str, tenant: &str) -> String {
        key.sign(&claims(ISS, AUD, sub, tenant))
    }

    /// An edge trusting this issuer in front of `member`, its `/mcp` route given `route`;
    /// `checked`: with the default health checks (SDK servers), else none (counting mocks).
    fn edge(&self, member: std::net::SocketAddr, route: &str, checked: bool) -> Edge {
        let pool = if checked {
            pool_with_health(&[member], "", route)
        } else {
            unchecked_pool_and_route(&[member], route)
        };
        start_edge(&format!("{}{pool}", self.section("")))
    }
}

/// Tenant a may use `echo`, the `greet` prompt and `mem://` resources (and `absent_*`
/// tools, which the servers do not have: their answer for an absent tool is compared with the
/// edge's for a hidden one); tenant b `whoami` and `digest`.
const POLICY: &str = r#"auth = "required"
[[routes.policy]]
name = "tenant-a"
tenants = ["a"]
tools = ["echo", "absent_*"]
prompts = ["greet"]
resources = ["mem://"]
[[routes.policy]]
name = "tenant-b"
tenants = ["b"]
tools = ["who*", "digest"]
"#;

fn names(v: &Value, key: &str) -> Vec<String> {
    let mut n: Vec<String> = v[key]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    n.sort();
    n
}

fn tool_runs(server: &Peer, tool: &str) -> usize {
    server.stderr_lines(&format!("TOOL {tool}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_tenant_lists_and_calls_only_its_tools() {
    let issuer = Issuer::start().await;
    let server = ts_server("dual", "srv");
    let body = format!(
        "{}{}\n[[routes]]\npath = \"/mcp\"\nprefix = \"/open\"\npool = \"main\"\n",
        issuer.section(""),
        pool_and_route(&[server.addr], &format!("prefix = \"/tenants\"\n{POLICY}"))
    );
    let edge = start_edge(&body);
    let url = format!("http://127.0.0.1:{}/tenants/mcp", edge.port);
    let token_a = issuer.token(&issuer.rsa, "alice", "a");
    let token_b = issuer.token(&issuer.ed, "bob", "b");

    // Tenant a, TypeScript client (2026-07-28), then the same client pinned to legacy
    // (its list answers come as SSE events).
    for mode in ["auto", "legacy"] {
        let out = ts_client(
            &url,
            &[
                "--mode",
                mode,
                "--policy-probe",
                "--bearer",
                &token_a,
                "--call",
                "echo,whoami,absent_tool",
            ],
        );
        assert_eq!(out["ok"], true, "{mode}: {out}");
        assert_eq!(names(&out, "tools"), ["echo"], "{mode}: {out}");
        assert_eq!(names(&out, "prompts"), ["greet"], "{mode}: {out}");
        assert_eq!(names(&out, "resources"), ["mem://info"], "{mode}: {out}");
        assert_eq!(out["calls"]["echo"]["isError"], false, "{mode}: {out}");
        // A hidden tool looks exactly as an absent one does on this server.
        assert_eq!(
            out["calls"]["whoami"]["error"]["code"], -32602,
            "{mode}: {out}"
        );
        assert_eq!(
            out["calls"]["whoami"]["error"]["message"], "Tool whoami not found",
            "{mode}: {out}"
        );
        assert_eq!(
            out["calls"]["whoami"].to_string(),
            out["calls"]["absent_tool"]
                .to_string()
                .replace("absent_tool", "whoami"),
            "{mode}: the server's own answer for a tool it does not have"
        );
    }
    assert_eq!(tool_runs(&server, "echo"), 2);
    assert_eq!(
        tool_runs(&server, "whoami"),
        0,
        "a hidden call never reaches the server"
    );

    // Tenant b, Python client.
    let out = py_client(
        &url,
        &[
            "--policy-probe",
            "--bearer",
            &token_b,
            "--call",
            "whoami",
            "--call",
            "echo",
        ],
    );
    assert_eq!(out["ok"], true, "{out}");
    assert_eq!(names(&out, "tools"), ["digest", "whoami"], "{out}");
    assert_eq!(names(&out, "prompts"), Vec::<String>::new(), "{out}");
    assert_eq!(out["calls"]["whoami"]["isError"], false, "{out}");
    assert_eq!(out["calls"]["echo"]["error"]["code"], -32602, "{out}");
    assert_eq!(tool_runs(&server, "whoami"), 1);
    assert_eq!(
        tool_runs(&server, "echo"),
        2,
        "b's call to a's tool never reached it"
    );

    // The same server without the policy: every tool is listed and callable (what the
    // assertions above would see if the edge did nothing).
    let open = format!("http://127.0.0.1:{}/open/mcp", edge.port);
    let out = ts_client(&open, &["--policy-probe", "--call", "whoami"]);
    assert!(names(&out, "tools").len() >= 5, "{out}");
    assert_eq!(tool_runs(&server, "whoami"), 2, "{out}");

    // Two refusals: tenant a's call to whoami, modern and legacy (b's is under tenant-b).
    let refusals = "mcp_edge_policy_refusals_total{route=\"/tenants/mcp\",rule=\"tenant-a\"}";
    assert_eq!(metric(&edge, refusals).await, 2.0);
    // Tenant b's listings hid echo, slow, work, hang, confirm, the greet prompt and mem://info.
    let hidden = "mcp_edge_policy_hidden_entries_total{route=\"/tenants/mcp\",rule=\"tenant-b\"}";
    assert_eq!(metric(&edge, hidden).await, 7.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_answer_is_filtered_whatever_its_id() {
    let issuer = Issuer::start().await;
    let server = ts_server("dual", "srv");
    let edge = issuer.edge(server.addr, POLICY, true);
    let token = issuer.token(&issuer.rsa, "alice", "a");
    // A legacy id too long for the edge to echo (over 1 KiB), which the server accepts.
    for id in [json!("x".repeat(1100)), json!(7)] {
        let body = json!({"jsonrpc":"2.0","id":id,"method":"tools/list","params":{}});
        let text = client()
            .post(edge.url())
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-06-18")
            .bearer_auth(&token)
            .body(body.to_string())
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(text.contains("\"echo\""), "{text}");
        assert!(
            !text.contains("whoami") && !text.contains("digest"),
            "{text}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_http_sse_lists_are_filtered_on_the_stream_and_hidden_calls_run_nothing() {
    let issuer = Issuer::start().await;
    let server = ts_server("legacy-sse", "srv");
    let route = format!(
        "sse_path = \"/sse\"\nmessages_path = \"/messages\"\nabsent_as = \"typescript-v1\"\n{POLICY}"
    );
    let edge = issuer.edge(server.addr, &route, true);
    let url = format!("http://127.0.0.1:{}/sse", edge.port);
    let token_a = issuer.token(&issuer.ec, "alice", "a");
    let out = ts_client(
        &url,
        &[
            "--transport",
            "sse",
            "--sdk",
            "v1",
            "--policy-probe",
            "--bearer",
            &token_a,
            "--call",
            "echo",
            "--call",
            "whoami",
        ],
    );
    assert_eq!(out["ok"], true, "{out}");
    assert_eq!(names(&out, "tools"), ["echo"], "{out}");
    assert_eq!(names(&out, "resources"), ["mem://info"], "{out}");
    assert_eq!(out["calls"]["echo"]["isError"], false, "{out}");
    // What this server answers for a tool it does not have, with the hidden name in it.
    assert_eq!(out["calls"]["whoami"]["isError"], true, "{out}");
    assert_eq!(
        out["calls"]["whoami"]["text"], "MCP error -32602: Tool whoami not found",
        "{out}"
    );
    assert_eq!(tool_runs(&server, "whoami"), 0, "the hidden tool never ran");
    assert_eq!(tool_runs(&server, "echo"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_python_server_hidden_tools_answer_as_absent_ones_do() {
    let issuer = Issuer::start().await;
    let server = py_server(&["--transport", "streamable-http", "--stateless"], "py");
    let route = format!("absent_as = \"python\"\n{POLICY}");
    let edge = issuer.edge(server.addr, &route, true);
    let token_a = issuer.token(&issuer.ec, "alice", "a");
    let probe = [
        "--policy-probe",
        "--bearer",
        &token_a,
        "--call",
        "echo,whoami,absent_tool",
    ];
    let py = py_client(&edge.url(), &probe);
    let ts = ts_client(
        &edge.url(),
        &[&["--mode", "legacy"][..], &probe[..]].concat(),
    );
    for (who, out) in [("python (2026-07-28)", &py), ("typescript (legacy)", &ts)] {
        assert_eq!(out["ok"], true, "{who}: {out}");
        assert_eq!(names(out, "tools"), ["echo"], "{who}: {out}");
        assert_eq!(out["calls"]["echo"]["isError"], false, "{who}: {out}");
        assert_eq!(out["calls"]["whoami"]["isError"], true, "{who}: {out}");
        assert_eq!(
            out["calls"]["whoami"].to_string(),
            out["calls"]["absent_tool"]
                .to_string()
                .replace("absent_tool", "whoami"),
            "{who}: the server's own answer for a tool it does not have"
        );
    }
    assert_eq!(tool_runs(&server, "whoami"), 0, "the hidden tool never ran");
    assert_eq!(tool_runs(&server, "echo"), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_refresh_mid_session_keeps_the_legacy_session() {
    let issuer = Issuer::start().await;
    let server = ts_server("legacy-session", "srv");
    let body = format!(
        "{}{}\n[[routes]]\npath = \"/mcp\"\nprefix = \"/plain\"\npool = \"main\"\n",
        issuer.section(""),
        pool_and_route(&[server.addr], "auth = \"required\"")
    );
    let edge = start_edge(&body);
    let first = issuer.token(&issuer.ec, "alice", "a");
    // The refreshed token: another key, a later expiry, the same subject.
    let mut later = claims(ISS, AUD, "alice", "a");
    later["exp"] = json!(now() + 7200);
    let refreshed = issuer.rsa.sign(&later);
    assert_ne!(first, refreshed);
    let args = |url: &str| {
        ts_client(
            url,
            &[
                "--mode",
                "legacy",
                "--policy-probe",
                "--bearer",
                &first,
                "--bearer-after-list",
                &refreshed,
                "--call",
                "echo",
            ],
        )
    };
    let out = args(&edge.url());
    assert_eq!(out["ok"], true, "{out}");
    assert_eq!(out["sessionKept"], true, "{out}");
    assert_eq!(out["calls"]["echo"]["isError"], false, "{out}");

    // Without identity the session is bound to the exact credential: the refreshed token
    // is another caller, and its calls find no session.
    let out = args(&format!("http://127.0.0.1:{}/plain/mcp", edge.port));
    assert_eq!(out["ok"], true, "{out}");
    assert!(
        out["calls"]["echo"]["error"].is_object(),
        "a new credential's call is refused: {out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unauthenticated_clients_are_challenged_and_the_sdk_starts_its_auth_flow() {
    let issuer = Issuer::start().await;
    let server = ts_server("modern", "srv");
    let auth_server = StaticServer::start(vec![], None).await;
    let as_url = format!("http://127.0.0.1:{}", auth_server.addr.port());
    auth_server.set(
        "/.well-known/oauth-authorization-server",
        200,
        json!({
            "issuer": as_url,
            "authorization_endpoint": format!("{as_url}/authorize"),
            "token_endpoint": format!("{as_url}/token"),
            "registration_endpoint": format!("{as_url}/register"),
            "response_types_supported": ["code"],
            "code_challenge_methods_supported": ["S256"],
        })
        .to_string(),
    );
    auth_server.set(
        "/register",
        201,
        json!({"client_id": "c1", "redirect_uris": ["http://127.0.0.1:9/callback"]}).to_string(),
    );
    let body = format!(
        "{}{}",
        issuer.section(&format!(
            "authorization_servers = [\"{as_url}\"]\nscopes = [\"mcp\"]"
        )),
        pool_and_route(&[server.addr], "auth = \"required\"")
    );
    let edge = start_edge(&body);
    let c = client();
    let list = modern_body(json!(1), "tools/list", json!({}));

    let resp = exchange(modern_request(&c, &edge.url(), &list)).await;
    assert_eq!(resp.status, 401, "{resp:?}");
    let metadata_url = format!(
        "http://127.0.0.1:{}/.well-known/oauth-protected-resource/mcp",
        edge.port
    );
    assert_eq!(
        resp.header("www-authenticate"),
        Some(format!("Bearer resource_metadata=\"{metadata_url}\", scope=\"mcp\"").as_str()),
        "{resp:?}"
    );
    let mut expired = claims(ISS, AUD, "alice", "a");
    expired["exp"] = json!(now() - 3600);
    let token = issuer.ed.sign(&expired);
    let resp = exchange(modern_request(&c, &edge.url(), &list).bearer_auth(&token)).await;
    assert_eq!(resp.status, 401, "{resp:?}");
    let challenge = resp.header("www-authenticate").unwrap_or_default();
    assert!(
        challenge.contains("error=\"invalid_token\"") && challenge.contains("expired"),
        "{challenge}"
    );
    let doc: Value = c
        .get(&metadata_url)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(doc["resource"], edge.url(), "{doc}");
    assert_eq!(doc["authorization_servers"], json!([as_url]), "{doc}");
    assert_eq!(
        server.requests_of("POST"),
        0,
        "no unauthenticated request reached the server"
    );

    // The official client follows the challenge as far as it can without a browser: the
    // edge's metadata, the authorization server's, registration, then the redirect.
    let out = ts_client(&edge.url(), &["--auth-flow"]);
    let redirect = out["authFlow"]["redirect"].as_str().unwrap_or_default();
    assert!(
        redirect.starts_with(&format!("{as_url}/authorize?")) && redirect.contains("client_id=c1"),
        "{out}"
    );
    let fetched = out["authFlow"]["fetched"].to_string();
    assert!(fetched.contains(&metadata_url), "{out}");
    assert_eq!(auth_server.hits("/register"), 1, "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_over_their_rate_get_429_and_a_new_session_does_not_reset_it() {
    let issuer = Issuer::start().await;
    let mock = Mock::start(Behavior::Json).await;
    let body = format!(
        "{}{}",
        issuer.section(""),
        unchecked_pool_and_route(
            &[mock.addr],
            "auth = \"required\"\n[routes.rate_limit]\nrequests_per_second = 1\nburst = 3\n"
        )
    );
    let edge = start_edge(&body);
    let c = client();
    let a = issuer.token(&issuer.rsa, "alice", "a");
    let b = issuer.token(&issuer.rsa, "bob", "a");
    let list = modern_body(json!(9), "tools/list", json!({}));
    let started = Instant::now();
    let mut statuses = Vec::new();
    for _ in 0..4 {
        let r = exchange(modern_request(&c, &edge.url(), &list).bearer_auth(&a)).await;
        statuses.push(r.status);
        if r.status == 429 {
            // The draft SEP's answer: -32023, retryAfterMs, Retry-After and RateLimit-*.
            assert_eq!(r.header("retry-after"), Some("1"), "{r:?}");
            assert_eq!(r.header("ratelimit-limit"), Some("3"), "{r:?}");
            assert_eq!(r.header("ratelimit-remaining"), Some("0"), "{r:?}");
            assert_eq!(r.json["error"]["code"], -32023, "{r:?}");
            let wait = r.json["error"]["data"]["retryAfterMs"]
                .as_u64()
                .unwrap_or(0);
            assert!((1..=1000).contains(&wait), "{r:?}");
            assert_eq!(r.json["error"]["data"]["limit"], 3, "{r:?}");
            assert_eq!(r.json["id"], 9, "{r:?}");
        }
    }
    if started.elapsed() < Duration::from_millis(900) {
        // Three in the burst, the fourth over (unless the machine took a second to send
        // them, when a token came back in between).
        assert_eq!(statuses, [200, 200, 200, 429]);
    }
    // Another principal has its own bucket.
    let r = exchange(modern_request(&c, &edge.url(), &list).bearer_auth(&b)).await;
    assert_eq!(r.status, 200);
    // A legacy `initialize` (a new session) is counted against the same caller.
    let init = json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}});
    let mut limited = false;
    for _ in 0..5 {
        let r = exchange(
            c.post(edge.url())
                .header("content-type", "application/json")
                .header("accept", "application/json, text/event-stream")
                .bearer_auth(&a)
                .body(init.to_string()),
        )
        .await;
        limited |= r.status == 429;
    }
    assert!(limited, "re-initialising did not reset alice's bucket");
    assert!(metric(&edge, "mcp_edge_rate_limited_total{route=\"/mcp\"}").await >= 2.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_are_stripped_unless_the_route_forwards_them() {
    let issuer = Issuer::start().await;
    let mock = Mock::start(Behavior::Json).await;
    let body = format!(
        "{}{}\n[[routes]]\npath = \"/forward\"\npool = \"main\"\nauth = \"required\"\nforward_credential = true\n\n[[passthrough]]\npath = \"/oauth/token\"\npool = \"main\"\n",
        issuer.section(""),
        unchecked_pool_and_route(&[mock.addr], "auth = \"required\"")
    );
    let edge = start_edge(&body);
    let c = client();
    let token = issuer.token(&issuer.ec, "alice", "a");
    let list = modern_body(json!(1), "tools/list", json!({}));
    let r = exchange(modern_request(&c, &edge.url(), &list).bearer_auth(&token)).await;
    assert_eq!(r.status, 200, "{r:?}");
    let head = mock.last().unwrap().head.to_ascii_lowercase();
    assert!(!head.contains("authorization:"), "stripped: {head}");
    let forward = format!("http://127.0.0.1:{}/forward", edge.port);
    let r = exchange(modern_request(&c, &forward, &list).bearer_auth(&token)).await;
    assert_eq!(r.status, 200, "{r:?}");
    let head = mock.last().unwrap().head;
    assert!(
        head.contains(&format!("Bearer {token}")),
        "forwarded: {head}"
    );
    // A pass-through route (an OAuth endpoint, say) forwards requests as sent.
    let passthrough = format!("http://127.0.0.1:{}/oauth/token", edge.port);
    let r = client()
        .post(&passthrough)
        .basic_auth("client", Some("secret"))
        .body("grant_type=client_credentials")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let head = mock.last().unwrap().head;
    assert!(
        head.contains("Basic Y2xpZW50OnNlY3JldA=="),
        "passed through: {head}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_tokens_are_refused_and_never_reach_the_server() {
    use base64::Engine;
    let b64 = |v: &Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
    let issuer = Issuer::start().await;
    let mock = Mock::start(Behavior::Json).await;
    let edge = issuer.edge(mock.addr, "auth = \"required\"", false);
    let c = client();
    let good = claims(ISS, AUD, "alice", "a");
    let with = |k: &str, v: Value| {
        let mut c = good.clone();
        c[k] = v;
        c
    };
    // HS256 with the issuer's public key as the HMAC secret (the algorithm-confusion
    // attack), and a token that says `alg: none`.
    let hs256 = {
        let mut h = jsonwebtoken::Header::new(Algorithm::HS256);
        h.kid = Some(issuer.rsa.kid.clone());
        let key = jsonwebtoken::EncodingKey::from_secret(issuer.rsa.public_pem.as_bytes());
        jsonwebtoken::encode(&h, &good, &key).unwrap()
    };
    let none = format!(
        "{}.{}.",
        b64(&json!({"alg":"none","typ":"JWT","kid":"rsa-1"})),
        b64(&good)
    );
    let stranger = SigningKey::generate("rsa-1", Algorithm::RS256);
    let mut injected = jsonwebtoken::Header::new(Algorithm::RS256);
    injected.kid = Some("../../../../etc/passwd' OR '1'='1".into());
    let injected = jsonwebtoken::encode(
        &injected,
        &good,
        &jsonwebtoken::EncodingKey::from_rsa_pem(issuer.rsa.private_pem.as_bytes()).unwrap(),
    )
    .unwrap();
    let cases: Vec<(&str, String)> = vec![
        ("alg none", none),
        ("HS256 with the public key", hs256),
        (
            "wrong aud",
            issuer
                .rsa
                .sign(&with("aud", json!("https://other.test/mcp"))),
        ),
        (
            "wrong iss",
            issuer.rsa.sign(&with("iss", json!("https://evil.test"))),
        ),
        ("expired", issuer.rsa.sign(&with("exp", json!(now() - 600)))),
        (
            "not yet valid",
            issuer.rsa.sign(&with("nbf", json!(now() + 600))),
        ),
        ("no subject", issuer.rsa.sign(&with("sub", json!("")))),
        ("kid injection", injected),
        ("a stranger's key under a known kid", stranger.sign(&good)),
        (
            "oversized",
            issuer.rsa.sign(&with("pad", json!("x".repeat(9000)))),
        ),
        ("garbage", "a.b.c".into()),
        ("not a JWT, no API keys configured", "opaque-token".into()),
    ];
    let list = modern_body(json!(1), "tools/list", json!({}));
    for (what, token) in cases {
        let r = exchange(modern_request(&c, &edge.url(), &list).bearer_auth(&token)).await;
        assert_eq!(r.status, 401, "{what}: {r:?}");
        let challenge = r.header("www-authenticate").unwrap_or_default();
        assert!(
            challenge.contains("error=\"invalid_token\""),
            "{what}: {challenge}"
        );
        assert_eq!(r.header("x-mcp-edge-error"), Some("unauthorized"), "{what}");
    }
    assert_eq!(mock.requests(), 0, "no hostile token reached the server");
    let ok = issuer.rsa.sign(&good);
    let r = exchange(modern_request(&c, &edge.url(), &list).bearer_auth(&ok)).await;
    assert_eq!(r.status, 200, "the issuer's own token passes: {r:?}");
    assert_eq!(mock.requests(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_kid_fetches_the_jwks_again_and_a_hanging_jwks_costs_one_timeout() {
    let issuer = Issuer::start().await;
    let mock = Mock::start(Behavior::Json).await;
    let edge = issuer.edge(mock.addr, "auth = \"required\"", false);
    let c = client();
    let list = modern_body(json!(1), "tools/list", json!({}));
    let send = |token: String| {
        let rb = modern_request(&c, &edge.url(), &list).bearer_auth(token);
        async move { exchange(rb).await.status }
    };
    assert_eq!(send(issuer.token(&issuer.rsa, "alice", "a")).await, 200);
    // The issuer rotates in a new key: the first token naming it makes the edge fetch the
    // JWKS again, at once.
    let rotated = SigningKey::generate("rsa-2", Algorithm::RS256);
    issuer
        .jwks
        .set("/jwks", 200, jwks(&[&issuer.rsa, &rotated]));
    let fetched = issuer.jwks.hits("/jwks");
    assert_eq!(send(issuer.token(&rotated, "alice", "a")).await, 200);
    assert_eq!(issuer.jwks.hits("/jwks"), fetched + 1);
    // More unknown kids do not make the edge fetch again and again.
    let unknown = SigningKey::generate("rsa-3", Algorithm::RS256);
    for _ in 0..3 {
        assert_eq!(send(issuer.token(&unknown, "alice", "a")).await, 401);
    }
    assert!(issuer.jwks.hits("/jwks") <= fetched + 2);

    // A JWKS endpoint that accepts and never answers.
    let hanging = Mock::start(Behavior::Stall).await;
    let stalled = format!(
        "[identity]\n[identity.jwt]\nissuer = \"{ISS}\"\naudience = [\"{AUD}\"]\njwks_url = \"https://{}/jwks\"\njwks_timeout_ms = 500\n\n{}",
        hanging.addr,
        unchecked_pool_and_route(&[mock.addr], "auth = \"required\"")
    );
    let edge = start_edge(&stalled);
    let started = Instant::now();
    let rb =
        modern_request(&c, &edge.url(), &list).bearer_auth(issuer.token(&issuer.rsa, "alice", "a"));
    let r = exchange(rb).await;
    assert_eq!(r.status, 401, "{r:?}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    // The edge kept serving meanwhile (its metrics answer).
    assert!(scrape(&edge).await.contains("mcp_edge_jwks_fetches_total"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_keys_are_principals_too() {
    let mock = Mock::start(Behavior::Json).await;
    let digest = sha256_hex_of("k-alice-123");
    let keys = std::env::temp_dir().join(format!("mcp-edge-api-keys-{}", std::process::id()));
    std::fs::write(
        &keys,
        format!("[[keys]]\nsha256 = \"{digest}\"\nsubject = \"alice\"\ntenant = \"a\"\n"),
    )
    .unwrap();
    let body = format!(
        "[identity]\napi_keys_file = \"{}\"\n\n{}",
        keys.display(),
        unchecked_pool_and_route(&[mock.addr], POLICY)
    );
    let edge = start_edge(&body);
    let c = client();
    let call = |name: &str| {
        modern_body(
            json!(3),
            "tools/call",
            json!({"name": name, "arguments": {}}),
        )
    };
    let r =
        exchange(modern_request(&c, &edge.url(), &call("echo")).bearer_auth("k-alice-123")).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(mock.requests(), 1);
    let r =
        exchange(modern_request(&c, &edge.url(), &call("digest")).bearer_auth("k-alice-123")).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.json["error"]["message"], "Tool digest not found", "{r:?}");
    assert_eq!(mock.requests(), 1, "hidden: never forwarded");
    let r = exchange(modern_request(&c, &edge.url(), &call("echo")).bearer_auth("k-mallory")).await;
    assert_eq!(r.status, 401, "{r:?}");
    let _ = std::fs::remove_file(keys);
}

/// What came back: status, headers and the JSON body.
#[derive(Debug)]
struct Resp {
    status: u16,
    headers: reqwest::header::HeaderMap,
    json: Value,
}

impl Resp {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

async fn exchange(rb: reqwest::RequestBuilder) -> Resp {
    let r = rb.send().await.expect("the edge answers");
    let status = r.status().as_u16();
    let headers = r.headers().clone();
    let text = r.text().await.unwrap_or_default();
    // A JSON body, or the last message of an event stream.
    let json = serde_json::from_str(&text).unwrap_or_else(|_| {
        text.lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .filter_map(|d| serde_json::from_str(d).ok())
            .next_back()
            .unwrap_or(Value::Null)
    });
    Resp {
        status,
        headers,
        json,
    }
}

fn sha256_hex_of(s: &str) -> String {
    common::mock::sha256_hex(s.as_bytes())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_belongs_to_the_principal_that_created_it() {
    let issuer = Issuer::start().await;
    let server = Mock::start(Behavior::Tasks { prefix: "t".into() }).await;
    let edge = issuer.edge(server.addr, "auth = \"required\"", false);
    let c = client();
    let alice = issuer.token(&issuer.rsa, "alice", "a");
    let mut create = modern_body(
        json!(1),
        "tools/call",
        json!({"name": "long", "arguments": {}}),
    );
    create["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"] =
        json!({"extensions": {"io.modelcontextprotocol/tasks": {}}});
    let r = exchange(modern_request(&c, &edge.url(), &create).bearer_auth(&alice)).await;
    let task = r.json["result"]["taskId"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(task.starts_with("mcp-edge-task."), "{r:?}");
    let get = |token: String| {
        let body = modern_body(json!(2), "tasks/get", json!({ "taskId": task }));
        let rb = modern_request(&c, &edge.url(), &body)
            .header("mcp-name", task.as_str())
            .bearer_auth(token);
        async move { exchange(rb).await }
    };
    // Another principal with the id gets what a server says of an unknown task.
    let bob = issuer.token(&issuer.rsa, "bob", "a");
    let r = get(bob).await;
    assert_eq!(r.json["error"]["code"], -32602, "{r:?}");
    assert_eq!(r.header("x-mcp-edge-error"), Some("task_unknown"));
    // Its owner, with a refreshed token from another key, follows it.
    let r = get(issuer.token(&issuer.ed, "alice", "a")).await;
    assert_eq!(r.json["result"]["taskId"], task.as_str(), "{r:?}");
    assert_eq!(server.task_misses(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_verified_token_is_remembered_no_longer_than_it_is_valid() {
    let issuer = Issuer::start().await;
    let mock = Mock::start(Behavior::Json).await;
    let section = issuer.section("").replace(
        "groups_claim = \"groups\"\n",
        "groups_claim = \"groups\"\nleeway_seconds = 0\n",
    );
    let edge = start_edge(&format!(
        "{section}{}",
        unchecked_pool_and_route(&[mock.addr], "auth = \"required\"")
    ));
    let c = client();
    let list = modern_body(json!(1), "tools/list", json!({}));
    let mut short = claims(ISS, AUD, "alice", "a");
    let exp = now() + 2;
    short["exp"] = json!(exp);
    let token = issuer.ec.sign(&short);
    let status = || {
        let rb = modern_request(&c, &edge.url(), &list).bearer_auth(&token);
        async move { exchange(rb).await.status }
    };
    assert_eq!(status().await, 200);
    assert_eq!(status().await, 200, "again, from the cache");
    // Refused once it expires, though it was verified (and remembered) before.
    wait_until(PATIENCE, "the expired token refused", async || {
        status().await == 401
    })
    .await;
    assert!(now() >= exp, "refused only after its exp");
}

/// A legacy POST on a session: status, `x-mcp-edge-error`, and the JSON of its answer.
async fn legacy_post(
    url: &str,
    token: &str,
    session: &str,
    accept: &str,
    body: &Value,
) -> (u16, Option<String>, Value) {
    let r = exchange(
        client()
            .post(url)
            .header("content-type", "application/json")
            .header("accept", accept)
            .header("mcp-protocol-version", "2025-06-18")
            .header("mcp-session-id", session)
            .bearer_auth(token)
            .body(body.to_string()),
    )
    .await;
    let kind = r.header("x-mcp-edge-error").map(String::from);
    let session_echo = r.header("mcp-session-id").map(String::from);
    let mut json = r.json;
    json["_session_echoed"] = json!(session_echo.is_some());
    (r.status, kind, json)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn odd_requests_for_a_hidden_tool_get_what_they_get_for_an_absent_one() {
    let issuer = Issuer::start().await;
    let server = ts_server("legacy-session", "srv");
    let route = format!("absent_as = \"typescript-v1\"\n{POLICY}");
    let edge = issuer.edge(server.addr, &route, true);
    let token = issuer.token(&issuer.rsa, "alice", "a");
    let both = "application/json, text/event-stream";
    let init = json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}});
    let r = client()
        .post(edge.url())
        .header("content-type", "application/json")
        .header("accept", both)
        .bearer_auth(&token)
        .body(init.to_string())
        .send()
        .await
        .unwrap();
    let session = r.headers()["mcp-session-id"].to_str().unwrap().to_string();
    let initialized = json!({"jsonrpc":"2.0","method":"notifications/initialized"});
    legacy_post(&edge.url(), &token, &session, both, &initialized).await;
    let call = |id: Value, name: &str| json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":name,"arguments":{}}});
    let long = json!("i".repeat(1100));
    // (session, Accept, id): a session that does not open, an Accept servers refuse, an id
    // too long for the edge to echo, and a plain request.
    let cases = [
        ("bogus", both, json!(1)),
        (session.as_str(), "application/json", json!(2)),
        (session.as_str(), both, long),
        (session.as_str(), both, json!(3)),
    ];
    for (sid, accept, id) in cases {
        let hidden = legacy_post(
            &edge.url(),
            &token,
            sid,
            accept,
            &call(id.clone(), "whoami"),
        )
        .await;
        let absent = legacy_post(&edge.url(), &token, sid, accept, &call(id, "absent_tool")).await;
        let absent = (
            absent.0,
            absent.1,
            serde_json::from_str::<Value>(&absent.2.to_string().replace("absent_tool", "whoami"))
                .unwrap(),
        );
        assert_eq!(hidden, absent, "session {sid}, accept {accept}");
    }
    assert_eq!(tool_runs(&server, "whoami"), 0, "the hidden tool never ran");
}
