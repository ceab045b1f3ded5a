//! What a pool's members are told of the caller (`[pools.credential]`): the edge's signed
//! identity assertion, checked by the official TypeScript SDK server with `jose` against the
//! JWKS the edge serves on its admin listener (rotation by reload included), and a static
//! credential from a file or an environment variable; never the caller's own token, never a
//! header the client forged; configurations that cannot work refused at load.

mod common;

use std::path::{Path, PathBuf};

use common::auth::{claims, jwks, SigningKey};
use common::peers::{ts_server_with, Peer};
use common::*;
use jsonwebtoken::Algorithm;
use mcp_edge::config::Config;
use serde_json::{json, Value};

const ISS: &str = "https://issuer.test";
const AUD: &str = "https://edge.test/mcp";
/// Assertion ring secrets (base64 of 32 bytes).
const RING_A: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";
const RING_B: &str = "ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA=";

fn temp(name: &str, text: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!(
        "mcp-edge-credentials-{}-{}-{name}",
        std::process::id(),
        free_port()
    ));
    std::fs::write(&path, text).unwrap();
    path
}

/// The callers' issuer: one key, its JWKS in a file.
struct Caller {
    key: SigningKey,
    jwks_file: PathBuf,
}

impl Caller {
    fn new() -> Caller {
        let key = SigningKey::generate("caller-1", Algorithm::ES256);
        let jwks_file = temp("caller-jwks.json", &jwks(&[&key]));
        Caller { key, jwks_file }
    }

    fn section(&self) -> String {
        format!(
            "[identity]\n[identity.jwt]\nissuer = \"{ISS}\"\naudience = [\"{AUD}\"]\njwks_file = \"{}\"\ntenant_claim = \"tenant\"\n\n",
            self.jwks_file.display()
        )
    }

    fn token(&self, sub: &str, scope: &str) -> String {
        let mut c = claims(ISS, AUD, sub, "acme");
        c["scope"] = json!(scope);
        self.key.sign(&c)
    }
}

/// An edge from a file (reloadable), its ports chosen before its member starts: the member
/// checks assertions against this edge's JWKS.
struct Site {
    port: u16,
    metrics_port: u16,
    pools: Pools,
    path: PathBuf,
}

impl Site {
    fn new() -> Site {
        Site {
            port: free_port(),
            metrics_port: free_port(),
            pools: Pools::fresh(),
            path: edge_process::temp_config(),
        }
    }

    fn jwks_url(&self) -> String {
        format!(
            "http://127.0.0.1:{}/.well-known/jwks.json",
            self.metrics_port
        )
    }

    /// A TypeScript SDK server checking assertions for `audience` against this edge's JWKS.
    fn member(&self, audience: &str) -> Peer {
        let url = self.jwks_url();
        ts_server_with(
            "modern",
            "member",
            &["--identity-jwks", &url, "--identity-audience", audience],
        )
    }

    /// The configuration text: listeners, metrics, then `body` (pools named `main` here are
    /// this site's `main`).
    fn write(&self, body: &str) {
        let text = format!(
            "[server]\nthreads = 1\n\n[[listeners]]\naddress = \"127.0.0.1:{}\"\n\n[metrics]\naddress = \"127.0.0.1:{}\"\n\n{}{}",
            self.port,
            self.metrics_port,
            sessions_section(&format!("1:{KEY_A}")),
            body.replace("\"main\"", &format!("\"{}\"", self.pools.name("main")))
        );
        std::fs::write(&self.path, text).unwrap();
    }

    fn start(&self, body: &str) -> Edge {
        self.write(body);
        start_edge_from_file(&self.path, self.port, self.metrics_port, &self.pools)
    }
}

/// An identity pool in front of `member`: `/mcp` needs a caller, `/open/mcp` takes anyone.
fn identity_body(caller: &Caller, ring: &Path, member: &Peer) -> String {
    format!(
        "{}[assertions]\nkeys_file = \"{}\"\n\n[[pools]]\nname = \"main\"\nmembers = [\"{}\"]\n[pools.health]\ncheck = \"tcp\"\n[pools.credential]\nkind = \"identity\"\naudience = \"tools-aud\"\nttl_seconds = 30\n\n[[routes]]\npath = \"/mcp\"\npool = \"main\"\nauth = \"required\"\n\n[[routes]]\nprefix = \"/open\"\npath = \"/mcp\"\npool = \"main\"\nauth = \"optional\"\n",
        caller.section(),
        ring.display(),
        member.addr
    )
}

/// A `tools/call` of `echo` through `url`, marked so the member's record of it can be found.
async fn call(url: &str, mark: &str, headers: &[(&str, &str)]) {
    let body = modern_body(
        json!(1),
        "tools/call",
        json!({"name": "echo", "arguments": {"text": mark}}),
    );
    let mut rb = modern_request(&client(), url, &body).header("x-test-mark", mark);
    for (k, v) in headers {
        rb = rb.header(*k, *v);
    }
    let resp = rb.send().await.unwrap();
    let status = resp.status();
    let text = resp.text().await.unwrap();
    assert_eq!(status, 200, "{mark}: {text}");
    assert!(text.contains(&format!("member:{mark}")), "{mark}: {text}");
}

/// `token` checked by the member against the edge's JWKS as it is now.
async fn member_verifies(member: &Peer, token: &str) -> Value {
    client()
        .post(format!("http://{}/__verify", member.addr))
        .body(token.to_string())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_member_verifies_the_edges_assertion_and_never_sees_the_callers_token() {
    let caller = Caller::new();
    let site = Site::new();
    let member = site.member("tools-aud");
    let ring = temp("ring", &format!("1:{RING_A}\n"));
    let edge = site.start(&identity_body(&caller, &ring, &member));
    let url = edge.url();

    let alice = caller.token("alice", "tools:call files:read");
    let bearer = format!("Bearer {alice}");
    call(&url, "one", &[("authorization", &bearer)]).await;
    // A client's own identity header never passes: the member gets the edge's.
    call(
        &url,
        "two",
        &[
            ("authorization", &bearer),
            ("x-mcp-edge-identity", "forged.by.client"),
        ],
    )
    .await;

    let (one, two) = (
        member.seen_marked("one").await,
        member.seen_marked("two").await,
    );
    for e in [&one, &two] {
        let c = &e["identity"]["claims"];
        assert_eq!(c["sub"], "alice", "{e}");
        assert_eq!(c["aud"], "tools-aud", "{e}");
        assert_eq!(c["iss"], "mcp-edge", "{e}");
        assert_eq!(c["tenant"], "acme", "{e}");
        assert_eq!(c["scope"], "tools:call files:read", "{e}");
        let (iat, exp) = (c["iat"].as_u64().unwrap(), c["exp"].as_u64().unwrap());
        assert!(exp > iat && exp - iat <= 60, "{e}");
        assert_eq!(exp - iat, 30, "ttl_seconds: {e}");
        assert_eq!(e["identity"]["kid"], "1", "{e}");
        // The caller's token reaches the member under no name.
        assert!(e["headers"].get("authorization").is_none(), "{e}");
        assert!(!e["headers"].to_string().contains(&alice), "{e}");
    }
    assert_ne!(
        one["identity"]["claims"]["jti"],
        two["identity"]["claims"]["jti"]
    );
    assert_ne!(two["headers"]["x-mcp-edge-identity"], "forged.by.client");

    // A subject with quotes, a backslash and non-ASCII text arrives as it was.
    let odd = "o'\"brien \\ 名前 😀";
    let token = caller.token(odd, "");
    call(
        &url,
        "odd",
        &[("authorization", &format!("Bearer {token}"))],
    )
    .await;
    let e = member.seen_marked("odd").await;
    assert_eq!(e["identity"]["claims"]["sub"], odd, "{e}");
    assert!(e["identity"]["claims"].get("scope").is_none(), "{e}");

    // Nobody calling (an optional route, no token): no assertion, and a forged one is gone.
    let open = format!("http://127.0.0.1:{}/open/mcp", edge.port);
    call(
        &open,
        "anon",
        &[("x-mcp-edge-identity", "forged.by.client")],
    )
    .await;
    let e = member.seen_marked("anon").await;
    assert!(e["headers"].get("x-mcp-edge-identity").is_none(), "{e}");
    assert!(e["identity"].is_null(), "{e}");

    let minted = format!(
        "mcp_edge_upstream_credentials_total{{kind=\"identity\",pool=\"{}\"}}",
        edge.pool
    );
    assert_eq!(metric(&edge, &minted).await, 3.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_old_key_verifies_while_it_is_published_after_a_rotation() {
    let caller = Caller::new();
    let site = Site::new();
    let member = site.member("tools-aud");
    let ring = temp("ring", &format!("1:{RING_A}\n"));
    let body = identity_body(&caller, &ring, &member);
    let edge = site.start(&body);
    let reloader = edge.handle.reloader.clone().unwrap();
    let bearer = format!("Bearer {}", caller.token("bob", "tools:call"));

    call(&edge.url(), "before", &[("authorization", &bearer)]).await;
    let before = member.seen_marked("before").await;
    assert_eq!(before["identity"]["kid"], "1", "{before}");
    let old = before["headers"]["x-mcp-edge-identity"]
        .as_str()
        .unwrap()
        .to_string();

    // The new key first (it signs), the old one still listed (published).
    std::fs::write(&ring, format!("2:{RING_B}\n1:{RING_A}\n")).unwrap();
    reloader.reload().unwrap();
    call(&edge.url(), "after", &[("authorization", &bearer)]).await;
    let after = member.seen_marked("after").await;
    assert_eq!(after["identity"]["kid"], "2", "{after}");
    assert_eq!(after["identity"]["claims"]["sub"], "bob", "{after}");
    let v = member_verifies(&member, &old).await;
    assert_eq!(v["claims"]["sub"], "bob", "the old key's token: {v}");

    // Once the old key is dropped, its tokens no longer verify.
    std::fs::write(&ring, format!("2:{RING_B}\n")).unwrap();
    reloader.reload().unwrap();
    let v = member_verifies(&member, &old).await;
    assert!(v["error"].is_string(), "{v}");
    let keys: Value = client()
        .get(site.jwks_url())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(keys["keys"].as_array().unwrap().len(), 1, "{keys}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_static_credential_from_a_file_or_the_environment_replaces_the_clients() {
    let site = Site::new();
    let member = ts_server_with("modern", "member", &[]);
    let secret = temp("secret", "s3cret-from-file\n");
    let var = format!("MCP_EDGE_TEST_SECRET_{}", free_port());
    std::env::set_var(&var, "s3cret-from-env");
    let body = format!(
        "[[pools]]\nname = \"main\"\nmembers = [\"{m}\"]\n[pools.health]\ncheck = \"tcp\"\n[pools.credential]\nkind = \"static\"\nvalue_file = \"{}\"\n\n[[pools]]\nname = \"env\"\nmembers = [\"{m}\"]\n[pools.health]\ncheck = \"tcp\"\n[pools.credential]\nkind = \"static\"\nvalue_env = \"{var}\"\nheader = \"X-Api-Key\"\n\n[[routes]]\npath = \"/mcp\"\npool = \"main\"\n\n[[routes]]\nprefix = \"/env\"\npath = \"/mcp\"\npool = \"env\"\n",
        secret.display(),
        m = member.addr
    );
    let body = body.replace("\"env\"", &format!("\"{}\"", site.pools.name("env")));
    let edge = site.start(&body);

    // An anonymous route (the caller's Authorization would pass by default): replaced.
    call(
        &edge.url(),
        "file",
        &[("authorization", "Bearer callers-own")],
    )
    .await;
    let e = member.seen_marked("file").await;
    assert_eq!(
        e["headers"]["authorization"], "Bearer s3cret-from-file",
        "{e}"
    );

    let env = format!("http://127.0.0.1:{}/env/mcp", edge.port);
    call(
        &env,
        "env",
        &[
            ("authorization", "Bearer callers-own"),
            ("x-api-key", "forged"),
        ],
    )
    .await;
    let e = member.seen_marked("env").await;
    assert_eq!(e["headers"]["x-api-key"], "s3cret-from-env", "{e}");
    assert!(e["headers"].get("authorization").is_none(), "{e}");
    assert!(!e["headers"].to_string().contains("callers-own"), "{e}");
}

/// The configuration's errors (all of them at once).
fn refused(body: &str) -> String {
    let text = format!("[[listeners]]\naddress = \"127.0.0.1:1\"\n\n{body}");
    match Config::parse(&text) {
        Ok(_) => panic!("accepted:\n{text}"),
        Err(errs) => errs.join("\n"),
    }
}

#[test]
fn configurations_that_cannot_work_are_refused_at_load() {
    let pool = |credential: &str| {
        format!("[[pools]]\nname = \"jira\"\nmembers = [\"127.0.0.1:9\"]\n[pools.credential]\n{credential}\n\n[[routes]]\npath = \"/mcp\"\npool = \"jira\"\n")
    };
    let missing = "/nonexistent/mcp-edge/jira-key";
    let e = refused(&pool(&format!(
        "kind = \"static\"\nvalue_file = \"{missing}\""
    )));
    assert!(
        e.contains("pools[0].credential.value_file") && e.contains("'jira'") && e.contains(missing),
        "{e}"
    );
    let e = refused(&pool(
        "kind = \"static\"\nvalue_env = \"MCP_EDGE_TEST_UNSET_SECRET\"",
    ));
    assert!(
        e.contains("pools[0].credential.value_env") && e.contains("MCP_EDGE_TEST_UNSET_SECRET"),
        "{e}"
    );
    let e = refused(&pool("kind = \"identity\""));
    assert!(e.contains("needs [assertions]"), "{e}");
    let e = refused(&format!(
        "[assertions]\nkeys_file = \"{}\"\n\n{}",
        temp("ring", &format!("1:{RING_A}")).display(),
        pool("kind = \"identity\"\nttl_seconds = 61")
    ));
    assert!(e.contains("ttl_seconds"), "{e}");
    let e = refused(&pool("kind = \"identity\"\nvalue_env = \"X\""));
    assert!(e.contains("does not apply"), "{e}");
    let secret = temp("secret", "k");
    let e = refused(&format!(
        "{}forward_credential = true\n",
        pool(&format!(
            "kind = \"static\"\nvalue_file = \"{}\"",
            secret.display()
        ))
    ));
    assert!(e.contains("routes[0].forward_credential"), "{e}");
    let e = refused(&pool(&format!(
        "kind = \"static\"\nvalue_file = \"{}\"\nheader = \"Host\"",
        secret.display()
    )));
    assert!(e.contains("pools[0].credential.header"), "{e}");
}

#[test]
fn the_edge_refuses_to_start_without_a_pools_secret() {
    let path = temp(
        "config.toml",
        &format!(
            "[[listeners]]\naddress = \"127.0.0.1:{}\"\n\n[[pools]]\nname = \"jira\"\nmembers = [\"127.0.0.1:9\"]\n[pools.credential]\nkind = \"static\"\nvalue_file = \"/nonexistent/jira-key\"\n\n[[routes]]\npath = \"/mcp\"\npool = \"jira\"\n",
            free_port()
        ),
    );
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_mcp-edge"))
        .args(["--config", &path.display().to_string()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut status = None;
    wait_until_blocking(PATIENCE, "the edge to exit", || {
        status = child.try_wait().unwrap();
        status.is_some()
    });
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(!status.unwrap().success(), "{stderr}");
    assert!(
        stderr.contains("pools[0].credential.value_file") && stderr.contains("'jira'"),
        "{stderr}"
    );
}
