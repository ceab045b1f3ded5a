//! Answers for absent entries learned from the servers themselves: with no `absent_as` on
//! the route, the edge answers a call to a hidden tool, prompt or resource with exactly the
//! bytes the server answers for one it does not have, in every era the server speaks, for
//! the official TypeScript SDK servers (2.x modern-only and dual-era, 1.x sessionful) and the
//! Python SDK server (stateless and stateful).

mod common;

use common::peers::{py_server, ts_server, Peer};
use common::*;
use serde_json::{json, Value};

/// alice (tenant a) may use `echo` and anything `absent*`; everything else is hidden.
const POLICY: &str = r#"auth = "required"
[[routes.policy]]
name = "tenant-a"
tenants = ["a"]
tools = ["echo", "absent_*"]
prompts = ["greet", "absent_*"]
resources = ["mem://", "absent:"]
"#;

const KEY: &str = "k-alice-learned";

fn api_keys() -> String {
    let path = std::env::temp_dir().join(format!(
        "mcp-edge-learned-keys-{}-{}",
        std::process::id(),
        free_port()
    ));
    let digest = common::mock::sha256_hex(KEY.as_bytes());
    std::fs::write(
        &path,
        format!("[[keys]]\nsha256 = \"{digest}\"\nsubject = \"alice\"\ntenant = \"a\"\n"),
    )
    .unwrap();
    format!("[identity]\napi_keys_file = \"{}\"\n\n", path.display())
}

/// The edge in front of `server` with the default health check and no `absent_as`, once
/// it has learned the answers of the eras listed.
async fn edge_that_learned(server: &Peer, eras: &[&str]) -> Edge {
    let edge = start_edge(&format!(
        "{}{}",
        api_keys(),
        pool_with_health(
            &[server.addr],
            "interval_ms = 200\ntimeout_ms = 3000\n",
            POLICY
        )
    ));
    for era in eras {
        let learned = format!(
            "mcp_edge_pool_absent_answers_learned{{era=\"{era}\",pool=\"{}\"}}",
            edge.pool
        );
        assert_eq!(
            wait_metric(&edge, &learned, 3.0).await,
            3.0,
            "{era}: the tool's, the prompt's and the resource's answers"
        );
    }
    edge
}

/// (method, params naming an absent entry the policy allows, the same naming a hidden one).
fn pairs() -> [(&'static str, Value, Value, &'static str, &'static str); 3] {
    [
        (
            "tools/call",
            json!({"name": "absent_tool", "arguments": {}}),
            json!({"name": "whoami", "arguments": {}}),
            "absent_tool",
            "whoami",
        ),
        (
            "prompts/get",
            json!({"name": "absent_prompt"}),
            json!({"name": "secret_pr"}),
            "absent_prompt",
            "secret_pr",
        ),
        (
            "resources/read",
            json!({"uri": "absent:thing"}),
            json!({"uri": "hidden:thing"}),
            "absent:thing",
            "hidden:thing",
        ),
    ]
}

/// Status, framing (the media type, and whether an event's lines end in CRLF) and the
/// JSON-RPC message as written (a JSON body, or an SSE event's data).
async fn answer(rb: reqwest::RequestBuilder) -> (u16, String, String) {
    let r = rb.bearer_auth(KEY).send().await.unwrap();
    let status = r.status().as_u16();
    let media = r
        .headers()
        .get("content-type")
        .map(|v| {
            v.to_str()
                .unwrap_or("")
                .split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_owned()
        })
        .unwrap_or_default();
    let sse = media == "text/event-stream";
    let text = r.text().await.unwrap();
    if !sse {
        return (status, media, text);
    }
    let framing = format!(
        "{media}{}",
        if text.contains("\r\n") { " crlf" } else { "" }
    );
    let data = text
        .replace("\r\n", "\n")
        .split("\n\n")
        .find_map(|event| {
            let data: Vec<&str> = event
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(|d| d.strip_prefix(' ').unwrap_or(d))
                .collect();
            (!data.is_empty() && data.join("\n").contains("\"id\"")).then(|| data.join("\n"))
        })
        .unwrap_or_default();
    (status, framing, data)
}

/// Modern: each hidden entry is answered as the server answers the absent one.
async fn modern_matches(edge: &Edge, who: &str) {
    let c = client();
    for (i, (method, absent, hidden, absent_name, hidden_name)) in pairs().into_iter().enumerate() {
        let id = json!(10 + i);
        let theirs = answer(modern_request(
            &c,
            &edge.url(),
            &modern_body(id.clone(), method, absent),
        ))
        .await;
        let ours = answer(modern_request(
            &c,
            &edge.url(),
            &modern_body(id, method, hidden),
        ))
        .await;
        assert!(!theirs.2.is_empty(), "{who} {method}: {theirs:?}");
        assert_eq!(
            ours,
            (
                theirs.0,
                theirs.1.clone(),
                theirs.2.replace(absent_name, hidden_name)
            ),
            "{who} {method} (2026-07-28): the server's own answer, byte for byte"
        );
    }
}

/// Legacy: the same inside a session (or without one, for a stateless server).
async fn legacy_matches(edge: &Edge, who: &str) {
    let c = client();
    let init = json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}});
    let r = legacy_request(&c, &edge.url(), None, &init)
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{who}: initialize");
    let session = r
        .headers()
        .get("mcp-session-id")
        .map(|v| v.to_str().unwrap().to_owned());
    let initialized = json!({"jsonrpc":"2.0","method":"notifications/initialized"});
    let r = legacy_request(&c, &edge.url(), session.as_deref(), &initialized)
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{who}: initialized");
    for (i, (method, absent, hidden, absent_name, hidden_name)) in pairs().into_iter().enumerate() {
        let body = |id: usize, params: Value| json!({"jsonrpc":"2.0","id":id,"method":method,"params":params});
        let theirs = answer(legacy_request(
            &c,
            &edge.url(),
            session.as_deref(),
            &body(20 + i, absent),
        ))
        .await;
        let ours = answer(legacy_request(
            &c,
            &edge.url(),
            session.as_deref(),
            &body(20 + i, hidden),
        ))
        .await;
        assert!(!theirs.2.is_empty(), "{who} {method}: {theirs:?}");
        assert_eq!(
            ours,
            (
                theirs.0,
                theirs.1.clone(),
                theirs.2.replace(absent_name, hidden_name)
            ),
            "{who} {method} (legacy): the server's own answer, byte for byte"
        );
    }
}

fn runs(server: &Peer, tool: &str) -> usize {
    server.stderr_lines(&format!("TOOL {tool}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typescript_servers_answers_are_learned() {
    let modern = ts_server("modern", "m");
    let dual = ts_server("dual", "d");
    let v1 = ts_server("legacy-session", "v1");
    let edge = edge_that_learned(&modern, &["modern"]).await;
    modern_matches(&edge, "TS 2.x modern-only").await;
    let edge = edge_that_learned(&dual, &["modern", "legacy"]).await;
    modern_matches(&edge, "TS 2.x dual").await;
    legacy_matches(&edge, "TS 2.x dual").await;
    let edge = edge_that_learned(&v1, &["legacy"]).await;
    legacy_matches(&edge, "TS 1.x sessionful").await;
    for server in [&modern, &dual, &v1] {
        assert_eq!(runs(server, "whoami"), 0, "a hidden tool never runs");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_servers_answers_are_learned() {
    let stateless = py_server(&["--transport", "streamable-http", "--stateless"], "pys");
    let stateful = py_server(&["--transport", "streamable-http"], "pyf");
    let edge = edge_that_learned(&stateless, &["modern", "legacy"]).await;
    modern_matches(&edge, "Python stateless").await;
    legacy_matches(&edge, "Python stateless").await;
    let edge = edge_that_learned(&stateful, &["legacy"]).await;
    legacy_matches(&edge, "Python stateful").await;
    for server in [&stateless, &stateful] {
        assert_eq!(runs(server, "whoami"), 0, "a hidden tool never runs");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn absent_as_overrides_what_was_learned() {
    // A TS 2.x server told to be answered as Python: the catalogue's Python answer, not the
    // server's (the override is what an operator asked for).
    let server = ts_server("modern", "o");
    let route = format!("absent_as = \"python\"\n{POLICY}");
    let edge = start_edge(&format!(
        "{}{}",
        api_keys(),
        pool_with_health(
            &[server.addr],
            "interval_ms = 200\ntimeout_ms = 3000\n",
            &route
        )
    ));
    let learned = format!(
        "mcp_edge_pool_absent_answers_learned{{era=\"modern\",pool=\"{}\"}}",
        edge.pool
    );
    assert_eq!(wait_metric(&edge, &learned, 3.0).await, 3.0);
    let c = client();
    let call = modern_body(
        json!(1),
        "tools/call",
        json!({"name": "whoami", "arguments": {}}),
    );
    let (status, _, body) = answer(modern_request(&c, &edge.url(), &call)).await;
    assert_eq!(status, 200);
    assert!(body.contains("Unknown tool: whoami"), "{body}");
}
