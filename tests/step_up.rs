//! Per-tool scopes with step-up (`[[routes.scopes]]`): a call naming a guarded entry needs
//! the scopes the rules require among its token's; without them 403 `insufficient_scope`
//! naming what to ask for, and nothing reaches the member. End to end with a real
//! authorization server (`oidc-provider`, client-credentials JWTs) and the official
//! TypeScript client stepping up; and, against a counting member, what an attacker and an
//! operator would try.

mod common;

use common::auth::{claims, jwks, SigningKey};
use common::mock::{Behavior, Mock};
use common::peers::{authz_server, step_up_client, ts_server};
use common::*;
use jsonwebtoken::Algorithm;
use serde_json::{json, Value};

const ISS: &str = "https://issuer.test";
const AUD: &str = "https://edge.test/mcp";

/// `deploy*` tools and `secret://` resources need `deploy`; `deploy_prod` needs `prod` too;
/// tenant `a` may see everything but `deploy_hidden`.
const ROUTE: &str = r#"auth = "optional"
[[routes.policy]]
tenants = ["a"]
tools = ["echo", "deploy", "deploy_prod"]
resources = ["secret://", "mem://"]
[[routes.policy]]
tools = ["echo"]
[[routes.scopes]]
tools = ["deploy*"]
resources = ["secret://"]
require = ["deploy"]
[[routes.scopes]]
tools = ["deploy_prod"]
require = ["prod", "deploy"]
"#;

struct Setup {
    edge: Edge,
    mock: Mock,
    key: SigningKey,
    _files: Vec<TempFile>,
}

async fn setup() -> Setup {
    setup_with(Behavior::Json, ROUTE).await
}

async fn setup_with(member: Behavior, route: &str) -> Setup {
    let mock = Mock::start(member).await;
    let key = SigningKey::generate("ec-1", Algorithm::ES256);
    let jwks_file = temp_file("jwks.json", &jwks(&[&key]));
    let keys = format!(
        "[[keys]]\nsha256 = \"{}\"\nsubject = \"ci\"\ntenant = \"a\"\nscopes = [\"deploy\"]\n\
         [[keys]]\nsha256 = \"{}\"\nsubject = \"bot\"\ntenant = \"a\"\n",
        common::mock::sha256_hex(b"k-ci-with-deploy"),
        common::mock::sha256_hex(b"k-bot-without"),
    );
    let keys_file = temp_file("keys.toml", &keys);
    let body = format!(
        "[identity]\nauthorization_servers = [\"{ISS}\"]\nscopes = [\"read\"]\napi_keys_file = \"{}\"\n\
         [identity.jwt]\nissuer = \"{ISS}\"\naudience = [\"{AUD}\"]\njwks_file = \"{}\"\ntenant_claim = \"tenant\"\n\n{}",
        keys_file.0.display(),
        jwks_file.0.display(),
        unchecked_pool_and_route(&[mock.addr], route)
    );
    Setup {
        edge: start_edge(&body),
        mock,
        key,
        _files: vec![jwks_file, keys_file],
    }
}

impl Setup {
    /// A token of tenant `a` with these claims added (`scope`, `scp`).
    fn token(&self, extra: Value) -> String {
        let mut c = claims(ISS, AUD, "alice", "a");
        for (k, v) in extra.as_object().into_iter().flatten() {
            c[k] = v.clone();
        }
        self.key.sign(&c)
    }

    async fn call(&self, method: &str, params: Value, bearer: Option<&str>) -> Answer {
        let c = client();
        let mut rb = modern_request(&c, &self.edge.url(), &modern_body(json!(7), method, params));
        if let Some(b) = bearer {
            rb = rb.bearer_auth(b);
        }
        let r = rb.send().await.expect("the edge answers");
        let status = r.status().as_u16();
        let header = |n: &str| {
            r.headers()
                .get(n)
                .and_then(|v| v.to_str().ok())
                .map(String::from)
        };
        let (challenge, kind) = (header("www-authenticate"), header("x-mcp-edge-error"));
        let json = r.json::<Value>().await.unwrap_or(Value::Null);
        Answer {
            status,
            challenge,
            kind,
            json,
        }
    }
}

#[derive(Debug)]
struct Answer {
    status: u16,
    challenge: Option<String>,
    kind: Option<String>,
    json: Value,
}

impl Answer {
    /// A step-up refusal asking for exactly `scope`.
    fn asks_for(&self, scope: &str) {
        assert_eq!(self.status, 403, "{self:?}");
        assert_eq!(self.kind.as_deref(), Some("insufficient_scope"), "{self:?}");
        let challenge = self.challenge.as_deref().unwrap_or_default();
        assert!(challenge.starts_with("Bearer "), "{self:?}");
        assert!(
            challenge.contains("error=\"insufficient_scope\""),
            "{self:?}"
        );
        assert!(
            challenge.contains(&format!("scope=\"{scope}\"")),
            "{self:?}"
        );
        assert!(
            challenge.contains("resource_metadata=\"http://127.0.0.1:"),
            "{self:?}"
        );
        assert_eq!(self.json["id"], 7, "{self:?}");
        assert_eq!(self.json["jsonrpc"], "2.0", "{self:?}");
        assert!(self.json["error"]["code"].is_i64(), "{self:?}");
    }
}

fn call(name: &str) -> Value {
    json!({"name": name, "arguments": {}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_without_the_scopes_it_needs_is_refused_naming_them_and_never_forwarded() {
    let s = setup().await;
    let read = s.token(json!({"scope": "read"}));

    // Unguarded: forwarded whatever the scopes.
    let a = s.call("tools/call", call("echo"), Some(&read)).await;
    assert_eq!(a.status, 200, "{a:?}");
    assert_eq!(s.mock.requests(), 1);

    // Guarded: the token's scopes and the missing one, so a client asking for it keeps `read`.
    s.call("tools/call", call("deploy"), Some(&read))
        .await
        .asks_for("read deploy");
    // Two rules name `deploy_prod`: it needs both of their scopes, each named once.
    s.call("tools/call", call("deploy_prod"), Some(&read))
        .await
        .asks_for("read deploy prod");
    s.call(
        "resources/read",
        json!({"uri": "secret://db/password"}),
        Some(&read),
    )
    .await
    .asks_for("read deploy");
    assert_eq!(s.mock.requests(), 1, "no refused call reached the member");

    // Stepped up: `scope` (a string) or `scp` (an array, as some issuers write it).
    let deploy = s.token(json!({"scope": "read deploy"}));
    let a = s.call("tools/call", call("deploy"), Some(&deploy)).await;
    assert_eq!(a.status, 200, "{a:?}");
    let a = s
        .call("tools/call", call("deploy_prod"), Some(&deploy))
        .await;
    a.asks_for("read deploy prod");
    // The message names what the call lacks; the challenge what to ask for.
    assert_eq!(
        a.json["error"]["message"],
        "Forbidden: the call needs the scopes 'prod' the token does not have",
        "{a:?}"
    );
    let both = s.token(json!({"scp": ["deploy", "prod"]}));
    let a = s.call("tools/call", call("deploy_prod"), Some(&both)).await;
    assert_eq!(a.status, 200, "{a:?}");
    assert_eq!(s.mock.requests(), 3);

    // A scope that only looks like one: a prefix, another case, a claim of another type,
    // `scp` beside a `scope` that lacks it (`scope` is read first).
    for fake in [
        json!({"scope": "deployer"}),
        json!({"scope": "DEPLOY"}),
        json!({"scope": 5}),
        json!({"scope": "read", "scp": ["deploy"]}),
    ] {
        let t = s.token(fake.clone());
        let a = s.call("tools/call", call("deploy"), Some(&t)).await;
        assert_eq!(a.status, 403, "{fake}: {a:?}");
    }
    // The forms issuers do write: `scope` as an array, `scp` as a string.
    for real in [json!({"scope": ["deploy"]}), json!({"scp": "read  deploy"})] {
        let t = s.token(real.clone());
        let a = s.call("tools/call", call("deploy"), Some(&t)).await;
        assert_eq!(a.status, 200, "{real}: {a:?}");
    }
    assert_eq!(s.mock.requests(), 5);
    // The registry is the process's: another test of this file may add its own refusal.
    let refused = metric(
        &s.edge,
        "mcp_edge_errors_total{kind=\"insufficient_scope\"}",
    )
    .await;
    assert!(
        refused >= 8.0,
        "every refusal counted under its kind: {refused}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hidden_entry_stays_absent_and_anonymous_and_key_callers_are_asked_too() {
    let s = setup().await;
    let read = s.token(json!({"scope": "read"}));
    // `deploy_hidden` is guarded by scope but hidden by the policy: absent, never "forbidden"
    // (a 403 would tell the caller it exists).
    let a = s
        .call("tools/call", call("deploy_hidden"), Some(&read))
        .await;
    assert_eq!(a.status, 200, "{a:?}");
    assert!(a.kind.is_none(), "{a:?}");
    assert!(
        a.json["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("not found"),
        "{a:?}"
    );
    // An anonymous caller (auth optional) sees `echo` only: `deploy` is hidden from it too.
    let a = s.call("tools/call", call("deploy"), None).await;
    assert_eq!(a.status, 200, "{a:?}");
    assert!(a.kind.is_none(), "{a:?}");
    assert_eq!(s.mock.requests(), 0);

    // API keys carry the scopes their entry lists.
    let a = s
        .call("tools/call", call("deploy"), Some("k-ci-with-deploy"))
        .await;
    assert_eq!(a.status, 200, "{a:?}");
    s.call("tools/call", call("deploy"), Some("k-bot-without"))
        .await
        .asks_for("deploy");
    assert_eq!(s.mock.requests(), 1);

    // The metadata document lists what calls may need beside `[identity] scopes`.
    let doc: Value = client()
        .get(format!(
            "http://127.0.0.1:{}/.well-known/oauth-protected-resource/mcp",
            s.edge.port
        ))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        doc["scopes_supported"],
        json!(["read", "deploy", "prod"]),
        "{doc}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_legacy_batch_that_could_hide_a_guarded_call_is_refused() {
    // Scopes without a policy: the scopes stage is the one that must refuse it.
    let route = &ROUTE[ROUTE.find("[[routes.scopes]]").unwrap()..];
    let route = format!("auth = \"optional\"\n{route}");
    let s = setup_with(Behavior::JsonWithSession("up-1".into()), &route).await;
    let read = s.token(json!({"scope": "read"}));
    let c = client();
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-03-26", "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"}}});
    let r = legacy_request(&c, &s.edge.url(), None, &init)
        .bearer_auth(&read)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let session = r.headers()["mcp-session-id"].to_str().unwrap().to_string();
    let batch = json!([
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call("echo")},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": call("deploy")},
    ]);
    let r = c
        .post(s.edge.url())
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-session-id", &session)
        .header("mcp-protocol-version", "2025-03-26")
        .bearer_auth(&read)
        .body(batch.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert_eq!(r.headers()["x-mcp-edge-error"], "invalid_request");
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], -32600, "{body}");
    assert_eq!(
        s.mock.requests(),
        1,
        "only the initialize reached the member"
    );
}

#[test]
fn scopes_the_edge_cannot_check_are_refused_at_load() {
    let cases = [
        (
            "[[pools]]\nname = \"p\"\nmembers = [\"127.0.0.1:1\"]\n[[routes]]\npath = \"/mcp\"\npool = \"p\"\n[[routes.scopes]]\ntools = [\"x\"]\nrequire = [\"deploy\"]\n",
            "needs auth",
        ),
        (
            "[identity]\napi_keys_file = \"/dev/null\"\n[[pools]]\nname = \"p\"\nmembers = [\"127.0.0.1:1\"]\n[[routes]]\npath = \"/mcp\"\npool = \"p\"\nauth = \"required\"\n[[routes.scopes]]\ntools = [\"x\"]\nrequire = []\n",
            "names no scope",
        ),
        (
            "[identity]\napi_keys_file = \"/dev/null\"\n[[pools]]\nname = \"p\"\nmembers = [\"127.0.0.1:1\"]\n[[routes]]\npath = \"/mcp\"\npool = \"p\"\nauth = \"required\"\n[[routes.scopes]]\nrequire = [\"deploy\"]\n",
            "names no tools, prompts or resources",
        ),
        (
            "[identity]\napi_keys_file = \"/dev/null\"\n[[pools]]\nname = \"p\"\nmembers = [\"127.0.0.1:1\"]\n[[routes]]\npath = \"/mcp\"\npool = \"p\"\nauth = \"required\"\n[[routes.scopes]]\ntools = [\"x\"]\nrequire = [\"a b\"]\n",
            "is not a scope token",
        ),
    ];
    for (config, wanted) in cases {
        let file = temp_file("check.toml", config);
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_mcp-edge"))
            .arg("--check")
            .arg(&file.0)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stderr).to_string()
            + &String::from_utf8_lossy(&out.stdout);
        assert!(!out.status.success(), "{config}\n{text}");
        assert!(text.contains(wanted), "wanted '{wanted}':\n{text}");
    }
}

/// The whole flow with real parts: `oidc-provider` issues client-credentials JWTs for the
/// edge's resource; the official TypeScript client starts with the scope the 401 names
/// (`read`), is refused `whoami` (needs `deploy`) and `digest` (needs `deploy` and `prod`),
/// asks for a wider token each time by itself, and the server runs each call once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_client_steps_up_at_a_real_authorization_server() {
    let server = ts_server("modern", "ts");
    let port = free_port();
    let resource = format!("http://127.0.0.1:{port}/mcp");
    let jwks_file = temp_file("authz-jwks.json", "");
    let jwks_path = jwks_file.0.display().to_string();
    let authz = authz_server(&[
        "--resource",
        &resource,
        "--scopes",
        "read deploy prod",
        "--client-id",
        "ci",
        "--client-secret",
        "s3cret-of-ci",
        "--jwks-out",
        &jwks_path,
    ]);
    let issuer = format!("http://127.0.0.1:{}", authz.addr.port());
    let body = format!(
        "[identity]\nauthorization_servers = [\"{issuer}\"]\nscopes = [\"read\"]\n\
         [identity.jwt]\nissuer = \"{issuer}\"\naudience = [\"{resource}\"]\njwks_file = \"{jwks_path}\"\n\n{}",
        pool_and_route(
            &[server.addr],
            "auth = \"required\"\nversions = [\"2026-07-28\"]\n\
             [[routes.scopes]]\ntools = [\"whoami\", \"digest\"]\nrequire = [\"deploy\"]\n\
             [[routes.scopes]]\ntools = [\"digest\"]\nrequire = [\"prod\"]\n"
        )
    );
    let edge = start_edge_on(port, &body);
    let out = tokio::task::spawn_blocking(move || {
        step_up_client(
            &resource,
            &[
                "--client-id",
                "ci",
                "--client-secret",
                "s3cret-of-ci",
                "--call",
                "echo,whoami,digest",
            ],
        )
    })
    .await
    .unwrap();
    assert_eq!(out["ok"], true, "{out}");
    for call in out["calls"].as_array().unwrap() {
        assert_eq!(call["ok"], true, "{out}");
    }
    assert_eq!(
        out["tokens"],
        json!(["read", "read deploy", "read deploy prod"]),
        "the client started with the 401's scope and widened it twice: {out}"
    );
    let refusals: Vec<&Value> = out["mcp"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["status"] == 403)
        .collect();
    assert_eq!(refusals.len(), 2, "{out}");
    let granted: Vec<Value> = authz
        .stdout_lines("{\"token\"")
        .iter()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["token"]["scope"].clone())
        .collect();
    assert_eq!(
        granted,
        vec![
            json!("read"),
            json!("read deploy"),
            json!("read deploy prod")
        ]
    );
    // The refused calls never reached the server: each tool ran once.
    for tool in ["echo", "whoami", "digest"] {
        assert_eq!(server.stderr_lines(&format!("TOOL {tool}")), 1, "{tool}");
    }
    let refused = metric(&edge, "mcp_edge_errors_total{kind=\"insufficient_scope\"}").await;
    assert!(refused >= 2.0, "{refused}");
}
