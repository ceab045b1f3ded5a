//! Token exchange (RFC 8693, `[pools.credential] kind = "exchange"`): the member gets a token
//! the authorization server exchanged for the caller's, never the caller's own. End to end
//! with a real authorization server (`oidc-provider`, the RFC 8693 grant registered) issuing
//! the callers' tokens and exchanging them for each client authentication, checked by the
//! official TypeScript SDK server with `jose`; and, against a token endpoint that counts and
//! misbehaves on demand, what an operator and an attacker would try: a burst of one caller's
//! calls, callers whose subjects collide, a slow, failing, lying or absent server.

mod common;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine;
use common::auth::{claims, jwks, SigningKey};
use common::mock::{Behavior, Mock};
use common::peers::{authz_server, ts_server_with};
use common::*;
use jsonwebtoken::Algorithm;
use mcp_edge::config::Config;
use serde_json::{json, Value};
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::TcpListener;

use common::http1 as wire;

const ISS: &str = "https://issuer.test";
const AUD: &str = "https://edge.test/mcp";
const RING: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";

// ---- a token endpoint that counts and misbehaves on demand ----------------------------------

/// What the token endpoint does with the next requests.
#[derive(Clone, Debug)]
enum Mode {
    /// 200 with an opaque token `xt-<n>` (n counts exchanges), valid `ttl` seconds.
    Issue { ttl: u64 },
    /// 200 with a JWT-shaped token for this audience.
    IssueFor { aud: &'static str },
    /// This status and body.
    Answer(u16, &'static str),
    /// 200 with a body larger than the edge reads.
    Huge,
}

/// A request's form and its `Authorization`.
type Asked = (HashMap<String, String>, Option<String>);

struct Endpoint {
    addr: SocketAddr,
    mode: Arc<Mutex<Mode>>,
    /// While true, answers wait (a server that is slow, or silent, until released).
    held: tokio::sync::watch::Sender<bool>,
    /// Each request's form and `Authorization`.
    seen: Arc<Mutex<Vec<Asked>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn form(body: &[u8]) -> HashMap<String, String> {
    let text = String::from_utf8_lossy(body).replace('+', " ");
    text.split('&')
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| {
            let d = |s: &str| {
                percent_encoding::percent_decode_str(s)
                    .decode_utf8_lossy()
                    .into_owned()
            };
            (d(k), d(v))
        })
        .collect()
}

impl Endpoint {
    async fn start(mode: Mode) -> Endpoint {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mode = Arc::new(Mutex::new(mode));
        let held = tokio::sync::watch::Sender::new(false);
        let gate = held.clone();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (m, s) = (mode.clone(), seen.clone());
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (m, s, mut gate) = (m.clone(), s.clone(), gate.subscribe());
                tokio::spawn(async move {
                    let mut stream = BufReader::new(stream);
                    let Ok(Some(head)) = wire::read_head(&mut stream).await else {
                        return;
                    };
                    let Ok(body) = wire::read_body(&mut stream, &head, 1 << 20).await else {
                        return;
                    };
                    let n = {
                        let mut seen = s.lock().unwrap();
                        seen.push((form(&body), head.header("authorization").map(String::from)));
                        seen.len()
                    };
                    if gate.wait_for(|held| !held).await.is_err() {
                        return;
                    }
                    let mode = m.lock().unwrap().clone();
                    let (status, body) = match mode {
                        Mode::Issue { ttl } => (
                            200,
                            json!({"access_token": format!("xt-{n}"), "token_type": "Bearer",
                                   "issued_token_type": "urn:ietf:params:oauth:token-type:access_token",
                                   "expires_in": ttl})
                            .to_string(),
                        ),
                        Mode::IssueFor { aud } => {
                            let payload = URL_SAFE_NO_PAD.encode(json!({"aud": aud, "sub": "x"}).to_string());
                            (200, json!({"access_token": format!("e30.{payload}.c2ln"), "token_type": "Bearer", "expires_in": 300}).to_string())
                        }
                        Mode::Answer(status, body) => (status, body.to_string()),
                        Mode::Huge => (
                            200,
                            json!({"access_token": "a", "token_type": "Bearer", "pad": "x".repeat(100_000)}).to_string(),
                        ),
                    };
                    let answer = format!(
                        "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = stream.get_mut().write_all(answer.as_bytes()).await;
                });
            }
        });
        Endpoint {
            addr,
            mode,
            held,
            seen,
            task,
        }
    }

    /// The answers from now on; `held`: not until [`Endpoint::release`].
    fn set(&self, mode: Mode, held: bool) {
        *self.mode.lock().unwrap() = mode;
        self.held.send_replace(held);
    }

    fn release(&self) {
        self.held.send_replace(false);
    }

    fn count(&self) -> usize {
        self.seen.lock().unwrap().len()
    }
}

struct Setup {
    edge: Edge,
    member: Mock,
    endpoint: Endpoint,
    key: SigningKey,
    _files: Vec<TempFile>,
}

const SECRET_VAR: &str = "MCP_EDGE_TEST_EXCHANGE_SECRET";

/// An edge whose pool exchanges callers' tokens at a scripted token endpoint (basic client
/// authentication, `audience` and `scope` asked for, `timeout_ms` 500 unless said); `/mcp` takes anyone,
/// an API key too.
async fn setup(mode: Mode) -> Setup {
    setup_with(mode, 500).await
}

async fn setup_with(mode: Mode, timeout_ms: u64) -> Setup {
    std::env::set_var(SECRET_VAR, "s3cret:with/odd&chars");
    let endpoint = Endpoint::start(mode).await;
    let member = Mock::start(Behavior::Json).await;
    let key = SigningKey::generate("ec-1", Algorithm::ES256);
    let jwks_file = temp_file("jwks.json", &jwks(&[&key]));
    let keys_file = temp_file(
        "keys.toml",
        &format!(
            "[[keys]]\nsha256 = \"{}\"\nsubject = \"ci\"\n",
            common::mock::sha256_hex(b"k-api-key")
        ),
    );
    let body = format!(
        "[identity]\napi_keys_file = \"{}\"\n[identity.jwt]\nissuer = \"{ISS}\"\naudience = [\"{AUD}\"]\njwks_file = \"{}\"\ntenant_claim = \"tenant\"\n\n\
         [[pools]]\nname = \"main\"\nmembers = [\"{}\"]\n[pools.health]\ncheck = \"none\"\n\
         [pools.credential]\nkind = \"exchange\"\ntoken_endpoint = \"http://{}/token\"\nclient_id = \"edge\"\nclient_secret_env = \"{SECRET_VAR}\"\naudience = \"tools-api\"\nscope = \"tools\"\ntimeout_ms = {timeout_ms}\n\n\
         [[routes]]\npath = \"/mcp\"\npool = \"main\"\nauth = \"optional\"\n",
        keys_file.0.display(),
        jwks_file.0.display(),
        member.addr,
        endpoint.addr,
    );
    Setup {
        edge: start_edge(&body),
        member,
        endpoint,
        key,
        _files: vec![jwks_file, keys_file],
    }
}

#[derive(Debug)]
struct Answer {
    status: u16,
    kind: Option<String>,
    retry_after: Option<String>,
    challenge: Option<String>,
    json: Value,
}

impl Setup {
    fn token(&self, sub: &str, tenant: &str) -> String {
        self.key.sign(&claims(ISS, AUD, sub, tenant))
    }

    async fn call(&self, bearer: Option<&str>) -> Answer {
        let body = modern_body(
            json!(7),
            "tools/call",
            json!({"name": "echo", "arguments": {}}),
        );
        let mut rb = modern_request(&client(), &self.edge.url(), &body);
        if let Some(b) = bearer {
            rb = rb.bearer_auth(b);
        }
        let r = rb.send().await.expect("the edge answers");
        let header = |n: &str| {
            r.headers()
                .get(n)
                .and_then(|v| v.to_str().ok())
                .map(String::from)
        };
        let (kind, retry_after, challenge) = (
            header("x-mcp-edge-error"),
            header("retry-after"),
            header("www-authenticate"),
        );
        Answer {
            status: r.status().as_u16(),
            kind,
            retry_after,
            challenge,
            json: r.json().await.unwrap_or(Value::Null),
        }
    }

    /// The `Authorization` of each request the member got.
    fn member_authorizations(&self) -> Vec<Option<String>> {
        self.member
            .seen()
            .iter()
            .map(|s| {
                wire::Head::parse(&s.head)
                    .header("authorization")
                    .map(String::from)
            })
            .collect()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_one_token_makes_one_exchange_and_callers_never_share_a_token() {
    // Time for the whole burst to arrive while the exchange is held, on a busy machine too.
    let s = setup_with(Mode::Issue { ttl: 300 }, 30_000).await;
    // The server holds its answer until the whole burst waits on the one exchange.
    s.endpoint.set(Mode::Issue { ttl: 300 }, true);
    let alice = s.token("alice", "a");
    let calls = futures::future::join_all((0..16).map(|_| s.call(Some(&alice))));
    let pool = &s.edge.pool;
    let joined =
        format!("mcp_edge_token_exchange_cache_total{{pool=\"{pool}\",result=\"joined\"}}");
    let release = async {
        wait_until(
            PATIENCE,
            "15 calls joining the first one's exchange",
            async || metric(&s.edge, &joined).await == 15.0,
        )
        .await;
        s.endpoint.release();
    };
    let (answers, ()) = tokio::join!(calls, release);
    for a in answers {
        assert_eq!(a.status, 200, "{a:?}");
    }
    assert_eq!(s.endpoint.count(), 1, "one exchange for the burst");
    let seen = s.member_authorizations();
    assert_eq!(seen.len(), 16);
    assert!(
        seen.iter().all(|a| a.as_deref() == Some("Bearer xt-1")),
        "{seen:?}"
    );

    // What the edge asked: RFC 8693 §2.1, basic client authentication (form-encoded first).
    let (f, auth) = s.endpoint.seen.lock().unwrap()[0].clone();
    assert_eq!(
        f["grant_type"],
        "urn:ietf:params:oauth:grant-type:token-exchange"
    );
    assert_eq!(f["subject_token"], alice);
    assert_eq!(
        f["subject_token_type"],
        "urn:ietf:params:oauth:token-type:access_token"
    );
    assert_eq!(f["audience"], "tools-api");
    assert_eq!(f["scope"], "tools");
    assert!(!f.contains_key("client_secret"), "{f:?}");
    let basic = STANDARD.encode("edge:s3cret%3Awith%2Fodd%26chars");
    assert_eq!(auth.as_deref(), Some(format!("Basic {basic}").as_str()));

    // Another subject, and the same subject of another tenant: tokens of their own.
    s.endpoint.set(Mode::Issue { ttl: 300 }, false);
    assert_eq!(s.call(Some(&s.token("bob", "a"))).await.status, 200);
    assert_eq!(s.call(Some(&s.token("alice", "b"))).await.status, 200);
    // A later call with alice's token: the cached exchange.
    assert_eq!(s.call(Some(&alice)).await.status, 200);
    assert_eq!(s.endpoint.count(), 3);
    let seen = s.member_authorizations();
    assert_eq!(seen[16].as_deref(), Some("Bearer xt-2"));
    assert_eq!(seen[17].as_deref(), Some("Bearer xt-3"));
    assert_eq!(seen[18].as_deref(), Some("Bearer xt-1"));
    // A subject of quotes, a backslash and non-ASCII text: a caller like any other.
    let odd = s.token("o'\"brien \\ 名前", "a");
    assert_eq!(s.call(Some(&odd)).await.status, 200);
    assert_eq!(s.endpoint.count(), 4);
    assert_eq!(s.endpoint.seen.lock().unwrap()[3].0["subject_token"], odd);
    // Another token of alice's (refreshed; it may say another client or level): its own
    // exchange, never the one made for the first.
    let refreshed = s.token("alice", "a");
    assert_ne!(refreshed, alice);
    assert_eq!(s.call(Some(&refreshed)).await.status, 200);
    assert_eq!(s.endpoint.count(), 5);
    let seen = s.member_authorizations();
    assert_eq!(seen[19].as_deref(), Some("Bearer xt-4"));
    assert_eq!(seen[20].as_deref(), Some("Bearer xt-5"));
    // The callers' own tokens reached the member under no name.
    let heads = s.member.all_heads().join("\n");
    assert!(!heads.contains(&alice), "{heads}");

    let pool = &s.edge.pool;
    let ok = format!("mcp_edge_token_exchanges_total{{outcome=\"ok\",pool=\"{pool}\"}}");
    assert_eq!(metric(&s.edge, &ok).await, 5.0);
    let hits = format!("mcp_edge_token_exchange_cache_total{{pool=\"{pool}\",result=\"hit\"}}");
    assert_eq!(metric(&s.edge, &hits).await, 1.0);
    assert_eq!(metric(&s.edge, &joined).await, 15.0);
    let sent = format!("mcp_edge_upstream_credentials_total{{kind=\"exchange\",pool=\"{pool}\"}}");
    assert_eq!(metric(&s.edge, &sent).await, 21.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_about_to_expire_is_not_kept_and_an_expired_callers_is_refused_first() {
    // 20 s of life is within the 30 s skew: used for its own request only.
    let s = setup(Mode::Issue { ttl: 20 }).await;
    let alice = s.token("alice", "a");
    assert_eq!(s.call(Some(&alice)).await.status, 200);
    assert_eq!(s.call(Some(&alice)).await.status, 200);
    assert_eq!(s.endpoint.count(), 2);

    // Cached now; the caller's token expires: the edge refuses it before any exchange.
    s.endpoint.set(Mode::Issue { ttl: 300 }, false);
    assert_eq!(s.call(Some(&alice)).await.status, 200);
    let mut expired = claims(ISS, AUD, "alice", "a");
    expired["exp"] = json!(expired["iat"].as_u64().unwrap() - 3600);
    let a = s.call(Some(&s.key.sign(&expired))).await;
    assert_eq!(a.status, 401, "{a:?}");
    // A token of hers for another audience: refused before the cache too.
    let elsewhere = s.key.sign(&claims(ISS, "https://other.test", "alice", "a"));
    let a = s.call(Some(&elsewhere)).await;
    assert_eq!(a.status, 401, "{a:?}");
    assert_eq!(s.endpoint.count(), 3);
    assert_eq!(s.member.requests(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unwell_or_lying_authorization_server_gets_an_honest_answer_and_nothing_reaches_the_member(
) {
    let s = setup(Mode::Answer(500, "{}")).await;
    let alice = s.token("alice", "a");
    let cases = [
        (
            Mode::Answer(500, r#"{"error":"server_error"}"#),
            false,
            503,
            "exchange_failed",
        ),
        (
            Mode::Answer(200, "<html>not json</html>"),
            false,
            503,
            "exchange_failed",
        ),
        (Mode::Huge, false, 503, "exchange_failed"),
        (
            Mode::IssueFor {
                aud: "https://somewhere-else.test",
            },
            false,
            503,
            "exchange_failed",
        ),
        (
            Mode::Answer(401, r#"{"error":"invalid_client"}"#),
            false,
            503,
            "exchange_failed",
        ),
        (
            Mode::Answer(200, r#"{"access_token":"t","token_type":"N_A"}"#),
            false,
            503,
            "exchange_failed",
        ),
        (
            Mode::Issue { ttl: 300 },
            // Silent until the test ends.
            true,
            504,
            "exchange_timeout",
        ),
        (
            Mode::Answer(
                400,
                r#"{"error":"invalid_grant","error_description":"subject token revoked"}"#,
            ),
            false,
            401,
            "unauthorized",
        ),
    ];
    for (i, (mode, held, status, kind)) in cases.into_iter().enumerate() {
        s.endpoint.set(mode.clone(), held);
        let a = s.call(Some(&alice)).await;
        assert_eq!(a.status, status, "{mode:?}: {a:?}");
        assert_eq!(a.kind.as_deref(), Some(kind), "{mode:?}: {a:?}");
        assert_eq!(a.json["id"], 7, "{mode:?}: {a:?}");
        assert!(a.json["error"]["message"].is_string(), "{mode:?}: {a:?}");
        if status == 401 {
            let c = a.challenge.unwrap_or_default();
            assert!(c.contains("error=\"invalid_token\""), "{c}");
        } else {
            assert_eq!(a.retry_after.as_deref(), Some("1"), "{mode:?}: {a:?}");
        }
        // Not cached: each call asked again.
        assert_eq!(s.endpoint.count(), i + 1, "{mode:?}");
        assert_eq!(
            s.member.requests(),
            0,
            "{mode:?}: nothing reaches the member"
        );
    }
    // Healthy again: the next call goes through with an exchanged token.
    s.endpoint.set(Mode::Issue { ttl: 300 }, false);
    assert_eq!(s.call(Some(&alice)).await.status, 200);
    assert_eq!(
        s.member_authorizations(),
        vec![Some("Bearer xt-9".to_string())]
    );
    let pool = &s.edge.pool;
    for (outcome, n) in [
        ("failed", 6.0),
        ("timeout", 1.0),
        ("refused", 1.0),
        ("ok", 1.0),
    ] {
        let name =
            format!("mcp_edge_token_exchanges_total{{outcome=\"{outcome}\",pool=\"{pool}\"}}");
        assert_eq!(metric(&s.edge, &name).await, n, "{name}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_authorization_server_at_all_is_a_503_never_the_callers_token() {
    let s = setup(Mode::Issue { ttl: 300 }).await;
    s.endpoint.task.abort();
    // The listener is gone once the aborted task is dropped: connections are refused.
    wait_until(PATIENCE, "the token endpoint to go", async || {
        tokio::net::TcpStream::connect(s.endpoint.addr)
            .await
            .is_err()
    })
    .await;
    let a = s.call(Some(&s.token("alice", "a"))).await;
    assert_eq!(a.status, 503, "{a:?}");
    assert_eq!(a.kind.as_deref(), Some("exchange_failed"));
    assert_eq!(s.member.requests(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_with_no_token_to_exchange_send_the_member_none() {
    let s = setup(Mode::Issue { ttl: 300 }).await;
    // Anonymous, an API key, a scheme the edge does not read: nothing to exchange.
    assert_eq!(s.call(None).await.status, 200);
    assert_eq!(s.call(Some("k-api-key")).await.status, 200);
    let body = modern_body(
        json!(7),
        "tools/call",
        json!({"name": "echo", "arguments": {}}),
    );
    let r = modern_request(&client(), &s.edge.url(), &body)
        .header("authorization", "Basic Y2xpZW50OnNlY3JldA==")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(s.endpoint.count(), 0);
    assert_eq!(s.member_authorizations(), vec![None, None, None]);
}

/// The configuration's errors (all of them at once).
fn refused(credential: &str) -> String {
    refused_with(credential, "", "")
}

/// With `identity` before the pools and `route` keys on its one route (and a pass-through
/// route to the pool).
fn refused_with(credential: &str, identity: &str, route: &str) -> String {
    let text = format!(
        "[[listeners]]\naddress = \"127.0.0.1:1\"\n\n{identity}[[pools]]\nname = \"jira\"\nmembers = [\"127.0.0.1:9\"]\n[pools.credential]\nkind = \"exchange\"\n{credential}\n\n[[routes]]\npath = \"/mcp\"\npool = \"jira\"\n{route}\n[[passthrough]]\npath = \"/api\"\npool = \"jira\"\n"
    );
    match Config::parse(&text) {
        Ok(_) => panic!("accepted:\n{text}"),
        Err(errs) => errs.join("\n"),
    }
}

#[test]
fn exchange_configurations_that_cannot_work_are_refused_at_load() {
    std::env::set_var("MCP_EDGE_TEST_EXCHANGE_CFG", "s");
    let good = "token_endpoint = \"https://as.test/token\"\nclient_id = \"edge\"\nclient_secret_env = \"MCP_EDGE_TEST_EXCHANGE_CFG\"\naudience = \"api\"";
    for (credential, wanted) in [
        (
            good.replace("https://as.test", "http://as.test"),
            "credential.token_endpoint",
        ),
        (
            good.replace("client_id = \"edge\"\n", ""),
            "credential.client_id",
        ),
        (
            good.replace("audience = \"api\"", ""),
            "audience or resource",
        ),
        (
            good.replace("MCP_EDGE_TEST_EXCHANGE_CFG", "MCP_EDGE_TEST_UNSET"),
            "MCP_EDGE_TEST_UNSET",
        ),
        (
            format!("{good}\nheader = \"X-Token\""),
            "credential.header: does not apply",
        ),
        (format!("{good}\ntimeout_ms = 0"), "credential.timeout_ms"),
        (
            format!("{good}\nresource = \"not a uri\""),
            "credential.resource",
        ),
        (
            good.replace(
                "client_secret_env = \"MCP_EDGE_TEST_EXCHANGE_CFG\"",
                "client_auth = \"private_key_jwt\"",
            ),
            "needs [assertions]",
        ),
    ] {
        let e = refused(&credential);
        assert!(e.contains(wanted), "{credential}\n-> {e}");
    }
    // With a JWT issuer and auth on the route, the pass-through route is what remains.
    let jwks = temp_file(
        "cfg-jwks.json",
        &jwks(&[&SigningKey::generate("k", Algorithm::ES256)]),
    );
    let identity = format!(
        "[identity]\n[identity.jwt]\nissuer = \"{ISS}\"\naudience = [\"{AUD}\"]\njwks_file = \"{}\"\n\n",
        jwks.0.display()
    );
    let e = refused_with(good, &identity, "auth = \"required\"");
    assert!(e.contains("passthrough[0].pool"), "{e}");
    assert!(
        !e.contains("routes[0].auth") && !e.contains("identity.jwt"),
        "{e}"
    );
}

// ---- the real authorization server ---------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oidc_provider_exchanges_the_callers_token_for_each_client_authentication() {
    // The edge's assertion key authenticates it as `edge-pk` (private_key_jwt): its JWKS,
    // as the edge publishes it, registered with the authorization server.
    let signer =
        mcp_edge::identity::assertion::Signer::parse(&format!("1:{RING}"), "mcp-edge".into())
            .unwrap();
    let client_jwks = temp_file("client-jwks.json", signer.jwks());
    let ring = temp_file("ring", &format!("1:{RING}\n"));
    let as_jwks = temp_file("as-jwks.json", "");
    let authz = authz_server(&[
        "--resource",
        AUD,
        "--scopes",
        "read tools",
        "--client-id",
        "edge",
        "--client-secret",
        "edge-secret",
        "--jwks-out",
        &as_jwks.0.display().to_string(),
        "--exchange",
        "--exchange-audience",
        "tools-api",
        "--client-jwks",
        &client_jwks.0.display().to_string(),
    ]);
    let issuer = format!("http://{}", authz.addr);
    let member = ts_server_with(
        "modern",
        "member",
        &[
            "--bearer-jwks",
            &format!("{issuer}/jwks"),
            "--bearer-audience",
            "tools-api",
            "--bearer-issuer",
            &issuer,
        ],
    );
    std::env::set_var("MCP_EDGE_TEST_AS_SECRET", "edge-secret");
    let pool = |name: &str, auth: &str| {
        format!(
            "[[pools]]\nname = \"{name}\"\nmembers = [\"{}\"]\n[pools.health]\ncheck = \"tcp\"\n[pools.credential]\nkind = \"exchange\"\ntoken_endpoint = \"{issuer}/token\"\naudience = \"tools-api\"\nscope = \"tools\"\n{auth}\n\n[[routes]]\nprefix = \"/{name}\"\npath = \"/mcp\"\npool = \"{name}\"\nauth = \"required\"\n\n",
            member.addr
        )
    };
    let body = format!(
        "[identity]\n[identity.jwt]\nissuer = \"{issuer}\"\naudience = [\"{AUD}\"]\njwks_file = \"{}\"\n\n[assertions]\nkeys_file = \"{}\"\n\n{}{}{}",
        as_jwks.0.display(),
        ring.0.display(),
        pool("basic", "client_id = \"edge\"\nclient_secret_env = \"MCP_EDGE_TEST_AS_SECRET\""),
        pool("post", "client_id = \"edge\"\nclient_auth = \"client_secret_post\"\nclient_secret_env = \"MCP_EDGE_TEST_AS_SECRET\""),
        pool("pk", "client_id = \"edge-pk\"\nclient_auth = \"private_key_jwt\""),
    );
    let edge = start_edge(&body);

    // The caller's token: the authorization server's own, for the edge (client credentials).
    let issued: Value = client()
        .post(format!("{issuer}/token"))
        .basic_auth("edge", Some("edge-secret"))
        .form(&[
            ("grant_type", "client_credentials"),
            ("resource", AUD),
            ("scope", "read"),
        ])
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let caller = issued["access_token"]
        .as_str()
        .expect("a token")
        .to_string();

    for (name, n) in [
        ("basic", 1),
        ("post", 2),
        ("pk", 3),
        ("basic", 4),
        ("pk", 5),
    ] {
        let url = format!("http://127.0.0.1:{}/{name}/mcp", edge.port);
        let mark = format!("{name}-{n}");
        let body = modern_body(
            json!(n),
            "tools/call",
            json!({"name": "echo", "arguments": {"text": mark}}),
        );
        let r = modern_request(&client(), &url, &body)
            .bearer_auth(&caller)
            .header("x-test-mark", &mark)
            .send()
            .await
            .unwrap();
        let status = r.status();
        let text = r.text().await.unwrap();
        assert_eq!(status, 200, "{mark}: {text}");
        assert!(text.contains(&format!("member:{mark}")), "{mark}: {text}");
        let seen = member.seen_marked(&mark).await;
        let b = &seen["bearer"];
        assert_eq!(
            b["ok"], true,
            "{mark}: the member verified the exchanged token: {seen}"
        );
        assert_eq!(b["claims"]["aud"], "tools-api", "{seen}");
        assert_eq!(b["claims"]["sub"], "edge", "the caller's subject: {seen}");
        assert_eq!(b["claims"]["scope"], "tools", "{seen}");
        let client_id = if name == "pk" { "edge-pk" } else { "edge" };
        assert_eq!(b["claims"]["act"]["sub"], client_id, "{seen}");
        assert!(!seen["headers"].to_string().contains(&caller), "{seen}");
    }
    // One exchange per pool: the repeated calls used the cached tokens.
    let exchanges = authz.stdout_lines("{\"exchange\"");
    assert_eq!(exchanges.len(), 3, "{exchanges:?}");
    let auths: Vec<String> = exchanges
        .iter()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["exchange"]["auth"]
                .as_str()
                .unwrap_or("")
                .to_string()
        })
        .collect();
    assert_eq!(auths, ["basic", "post", "private_key_jwt"]);
}
