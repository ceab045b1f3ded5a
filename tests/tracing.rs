//! Traces, the access log as the audit record, and the MCP operation metric, against the edge
//! binary. Spans are decoded by an OTLP/HTTP collector built on the official OpenTelemetry
//! protobuf definitions (tests/peers/otlp-receiver.py); the TypeScript SDK server is traced
//! by the official OpenTelemetry JS SDK into the same collector. Each request names its own
//! trace (a client `traceparent` on the listener that continues it), so each test finds its
//! spans by trace id.

mod common;

use std::time::Duration;

use common::edge_process::{spawn, spawn_with, temp_config, Proc};
use common::mock::{Behavior, Mock, Pace};
use common::otlp::{attr, one, trace_id, Collector};
use common::peers::{dir, ts_server_traced};
use common::*;
use serde_json::{json, Value};

/// The client span id every test request names as its parent.
const CLIENT_SPAN: &str = "00f067aa0ba902b7";

fn traceparent(trace: &str) -> String {
    format!("00-{trace}-{CLIENT_SPAN}-01")
}

/// An edge process with a public listener (the default: a client's trace context is
/// linked) and a trusted one (`trace_context = "continue"`), exporting to `endpoint`.
struct Traced {
    proc: Proc,
    trusted: u16,
    metrics: u16,
}

impl Traced {
    /// `tracing`: more `[tracing]` keys; `body`: the rest of the configuration.
    fn start(endpoint: &str, tracing: &str, body: &str) -> Traced {
        let (path, port, trusted, metrics) = (temp_config(), free_port(), free_port(), free_port());
        let text = format!(
            "[server]\nthreads = 1\n\n[[listeners]]\naddress = \"127.0.0.1:{port}\"\n\n\
             [[listeners]]\naddress = \"127.0.0.1:{trusted}\"\ntrace_context = \"continue\"\n\n\
             [metrics]\naddress = \"127.0.0.1:{metrics}\"\n\n\
             [tracing]\nendpoint = \"{endpoint}\"\nflush_ms = 50\n{tracing}\n\n{}{body}",
            sessions_section(&format!("1:{KEY_A}"))
        );
        if let Err(e) = mcp_edge::config::Config::parse(&text) {
            panic!("test config invalid: {e:?}\n{text}");
        }
        std::fs::write(&path, text).unwrap();
        // The resource from the environment (the Downward API's, and the SDKs' variable, whose
        // `service.name` loses to the edge's own).
        let env = [
            ("POD_NAME", "mcp-edge-7f9c-x2"),
            (
                "OTEL_RESOURCE_ATTRIBUTES",
                "deployment.environment.name=test%20env,service.name=not-this",
            ),
        ];
        let proc = spawn_with(&path, port, &env);
        wait_listening(([127, 0, 0, 1], trusted).into());
        wait_listening(([127, 0, 0, 1], metrics).into());
        Traced {
            proc,
            trusted,
            metrics,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.proc.port)
    }

    fn trusted_url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.trusted)
    }

    async fn scrape(&self) -> String {
        let url = format!("http://127.0.0.1:{}/metrics", self.metrics);
        client()
            .get(url)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    /// A sample's value (0 when absent).
    async fn metric(&self, series: &str) -> f64 {
        self.scrape()
            .await
            .lines()
            .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
            .unwrap_or(0.0)
    }

    /// The access-log lines written so far.
    fn access(&self) -> Vec<Value> {
        self.proc
            .log_text()
            .lines()
            .filter(|l| l.starts_with("{\"ts\":"))
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
            .collect()
    }

    /// The access-log line of the request in trace `trace`, once written.
    async fn line_of(&self, trace: &str) -> Value {
        let mut found = None;
        wait_until(PATIENCE, "the request's access-log line", async || {
            found = self.access().into_iter().find(|l| l["trace_id"] == trace);
            found.is_some()
        })
        .await;
        found.unwrap()
    }
}

/// `[[pools]]` (no health checks: members count what reaches them) and its `[[routes]]`.
fn route(name: &str, path: &str, members: &[std::net::SocketAddr], route: &str) -> String {
    let list: Vec<String> = members.iter().map(|m| format!("\"{m}\"")).collect();
    format!(
        "[[pools]]\nname = \"{name}\"\nmembers = [{}]\n[pools.health]\ncheck = \"none\"\n\n\
         [[routes]]\npath = \"{path}\"\npool = \"{name}\"\n{route}\n\n",
        list.join(", ")
    )
}

fn tool_call(id: u64, name: &str) -> Value {
    modern_body(
        json!(id),
        "tools/call",
        json!({"name": name, "arguments": {"text": "hi"}}),
    )
}

/// POST `body` to `url` in trace `trace` (a modern request with its headers); the answer.
async fn traced(url: &str, trace: &str, body: &Value) -> (u16, String) {
    let r = modern_request(&client(), url, body)
        .header("traceparent", traceparent(trace))
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.text().await.unwrap())
}

fn assert_attrs(span: &Value, want: &[(&str, Value)]) {
    for (key, value) in want {
        assert_eq!(attr(span, key), value, "{key} of {span:#}");
    }
}

fn the_edges<'a>(spans: &'a [Value], kind: &str) -> Vec<&'a Value> {
    spans
        .iter()
        .filter(|s| s["kind"] == kind && s["resource"]["service.name"] == "mcp-edge")
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_tool_call_is_one_trace_from_the_client_through_the_edge_to_the_server() {
    let collector = Collector::start();
    let server = ts_server_traced("modern", "t1", &collector.endpoint());
    let edge = Traced::start(
        &collector.endpoint(),
        "",
        &route("main", "/mcp", &[server.addr], ""),
    );

    // A client that sends its trace context, on the listener that continues it.
    let trace = trace_id();
    let (status, answer) = traced(&edge.trusted_url("/mcp"), &trace, &tool_call(1, "echo")).await;
    assert_eq!(status, 200, "{answer}");
    assert!(answer.contains("t1:hi"), "{answer}");
    let spans = collector
        .trace(&trace, "the edge's two spans and the server's", |s| {
            s.len() >= 3
        })
        .await;
    assert_eq!(spans.len(), 3, "{spans:#?}");
    let server_span = one(&spans, "SERVER", "mcp-edge");
    let client_span = one(&spans, "CLIENT", "mcp-edge");
    let member_span = one(&spans, "SERVER", "ts-peer-t1");
    assert_eq!(
        server_span["parent"], CLIENT_SPAN,
        "the client's span is the parent"
    );
    assert_eq!(client_span["parent"], server_span["span_id"]);
    assert_eq!(
        member_span["parent"], client_span["span_id"],
        "the server's span is the edge CLIENT span's child (traceparent sent upstream)"
    );
    for span in [server_span, client_span] {
        assert_eq!(span["name"], "tools/call echo");
        assert_eq!(span["status"], "UNSET", "{span:#}");
        assert_attrs(
            span,
            &[
                ("mcp.method.name", json!("tools/call")),
                ("gen_ai.tool.name", json!("echo")),
                ("gen_ai.operation.name", json!("execute_tool")),
                ("network.transport", json!("tcp")),
                ("http.response.status_code", json!(200)),
                ("mcp.session.id", Value::Null),
                ("error.type", Value::Null),
            ],
        );
    }
    assert_attrs(
        server_span,
        &[
            ("jsonrpc.request.id", json!("1")),
            ("mcp.protocol.version", json!(MODERN)),
            ("client.address", json!("127.0.0.1")),
            ("network.protocol.name", json!("http")),
            ("http.request.method", json!("POST")),
            ("mcp.edge.route", json!("/mcp")),
            ("mcp.edge.outcome", json!("forwarded")),
            ("mcp.edge.era", json!("modern")),
            ("mcp.edge.attempts", json!(1)),
        ],
    );
    assert_attrs(
        client_span,
        &[
            ("server.address", json!("127.0.0.1")),
            ("server.port", json!(server.addr.port())),
        ],
    );
    let resource = &server_span["resource"];
    assert_eq!(resource["service.version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(resource["service.name"], "mcp-edge", "{resource}");
    assert_eq!(resource["k8s.pod.name"], "mcp-edge-7f9c-x2");
    assert_eq!(resource["service.instance.id"], "mcp-edge-7f9c-x2");
    assert_eq!(resource["deployment.environment.name"], "test env");
    assert_eq!(resource["telemetry.sdk.language"], "rust");

    // The access log names the same trace and span.
    let line = edge.line_of(&trace).await;
    assert_eq!(line["span_id"], server_span["span_id"], "{line}");

    // The public listener starts a trace of its own and links the client's.
    let theirs = trace_id();
    let (status, _) = traced(&edge.url("/mcp"), &theirs, &tool_call(2, "echo")).await;
    assert_eq!(status, 200);
    let linked = collector
        .wait_spans(1, "a SERVER span linked to the client's span", |s| {
            s["kind"] == "SERVER" && s["links"] == json!([[theirs, CLIENT_SPAN]])
        })
        .await;
    let ours = linked[0]["trace_id"].as_str().unwrap().to_string();
    assert_ne!(ours, theirs);
    assert_eq!(linked[0]["parent"], "", "a root: the caller chose nothing");
    let spans = collector
        .trace(&ours, "the linked trace", |s| s.len() >= 3)
        .await;
    let client_span = one(&spans, "CLIENT", "mcp-edge");
    assert_eq!(client_span["parent"], linked[0]["span_id"]);
    assert_eq!(
        one(&spans, "SERVER", "ts-peer-t1")["parent"],
        client_span["span_id"]
    );
    assert!(
        collector
            .spans()
            .await
            .iter()
            .all(|s| s["trace_id"] != theirs),
        "nothing was recorded in the client's trace"
    );
}

/// The span shapes `docs/observability.md` promises for each edge decision.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_edge_decision_has_the_span_shape_the_docs_promise() {
    let collector = Collector::start();
    let dead = refusing();
    let json_member = Mock::start(Behavior::Json).await;
    let guarded_member = Mock::start(Behavior::Json).await;
    let tasks = Mock::start(Behavior::Tasks { prefix: "t".into() }).await;
    let stream = Mock::start(Behavior::Sse {
        frames: vec![(Pace::Now, "event: message\ndata: {}\n\n".into())],
        hold: Duration::from_secs(60),
    })
    .await;
    let modern_server = ts_server_traced("modern", "b1", &collector.endpoint());
    let keys = api_keys();
    let stdio = format!(
        r#"["node", "{}", "--mode", "stdio", "--instance", "io"]"#,
        dir().join("ts-server.mjs").display()
    );
    let body = format!(
        "[identity]\napi_keys_file = \"{keys}\"\n\n{}{}{}{}{}\
         [[pools]]\nname = \"bridge\"\nmembers = [\"{}\"]\n[pools.health]\ncheck = \"mcp\"\npath = \"/mcp\"\ninterval_ms = 200\n\n\
         [[routes]]\npath = \"/mcp\"\nprefix = \"/bridge\"\npool = \"bridge\"\nbridge_legacy = true\n\n\
         [[pools]]\nname = \"io\"\ncommand = {stdio}\n\n[[routes]]\npath = \"/stdio\"\npool = \"io\"\n",
        route("main", "/mcp", &[dead.addr, json_member.addr], ""),
        route("guarded", "/guarded", &[guarded_member.addr], GUARDED),
        route("tasks", "/tasks", &[tasks.addr], ""),
        route("streams", "/streams", &[stream.addr], ""),
        "",
        modern_server.addr,
    );
    let edge = Traced::start(&collector.endpoint(), "", &body);
    let c = client();

    // A refused member, then the next: one SERVER span, two CLIENT spans.
    let mut retried = None;
    for id in 0..2 {
        let trace = trace_id();
        let (status, _) = traced(&edge.trusted_url("/mcp"), &trace, &tool_call(id, "echo")).await;
        assert_eq!(status, 200);
        let spans = collector
            .trace(&trace, "a tool call's spans", |s| {
                the_edges(s, "SERVER").len() == 1
            })
            .await;
        if attr(the_edges(&spans, "SERVER")[0], "mcp.edge.attempts") == &json!(2) {
            retried = Some(spans);
        }
    }
    let spans = retried.expect("one of two calls met the refusing member first");
    let server_span = the_edges(&spans, "SERVER")[0];
    let tries = the_edges(&spans, "CLIENT");
    assert_eq!(tries.len(), 2, "{spans:#?}");
    let refused = tries
        .iter()
        .find(|s| attr(s, "server.port") == &json!(dead.addr.port()))
        .expect("the refused try");
    let answered = tries
        .iter()
        .find(|s| attr(s, "server.port") == &json!(json_member.addr.port()))
        .expect("the answered try");
    assert_eq!(refused["status"], "ERROR", "{refused:#}");
    assert_eq!(attr(refused, "error.type"), "connect_refused");
    assert_eq!(answered["status"], "UNSET");
    assert_eq!(attr(answered, "http.response.status_code"), 200);
    for t in &tries {
        assert_eq!(t["parent"], server_span["span_id"]);
    }
    assert_eq!(server_span["status"], "UNSET", "the retry answered");

    // A -32020: the edge refuses; no try at a member.
    let trace = trace_id();
    let r = modern_request(&c, &edge.trusted_url("/mcp"), &tool_call(3, "echo"))
        .header("mcp-name", "other")
        .header("traceparent", traceparent(&trace))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let spans = collector
        .trace(&trace, "the refusal's span", |s| !s.is_empty())
        .await;
    let refusal = one(&spans, "SERVER", "mcp-edge");
    assert!(the_edges(&spans, "CLIENT").is_empty(), "{spans:#?}");
    // What was refused: the body was read, so the span is the operation's.
    assert_eq!(refusal["name"], "tools/call echo", "{refusal:#}");
    assert_attrs(
        refusal,
        &[
            ("mcp.method.name", json!("tools/call")),
            ("gen_ai.tool.name", json!("echo")),
            ("jsonrpc.request.id", json!("3")),
            ("mcp.protocol.version", json!(MODERN)),
            ("mcp.edge.era", json!("modern")),
            ("error.type", json!("header_mismatch_name")),
            ("rpc.response.status_code", json!("-32020")),
            ("mcp.edge.outcome", json!("rejected")),
            ("mcp.edge.error", json!("header_mismatch_name")),
            ("http.response.status_code", json!(400)),
        ],
    );
    assert_eq!(
        refusal["status"], "ERROR",
        "the MCP conventions: ERROR whenever error.type is set"
    );

    // A hidden tool: answered by the edge as an absent one, never forwarded.
    let trace = trace_id();
    let r = modern_request(&c, &edge.trusted_url("/guarded"), &tool_call(4, "digest"))
        .bearer_auth("k-alice")
        .header("traceparent", traceparent(&trace))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let spans = collector
        .trace(&trace, "the hidden call's span", |s| !s.is_empty())
        .await;
    let hidden = one(&spans, "SERVER", "mcp-edge");
    assert!(the_edges(&spans, "CLIENT").is_empty(), "{spans:#?}");
    assert_attrs(
        hidden,
        &[
            ("mcp.edge.policy.verdict", json!("hidden")),
            ("mcp.edge.policy.rule", json!("tenant-a")),
            ("mcp.edge.rate_limit", json!("allowed")),
            ("mcp.edge.answered", json!(true)),
            ("error.type", json!("-32602")),
            ("gen_ai.tool.name", json!("digest")),
        ],
    );
    assert_eq!(guarded_member.requests(), 0);

    // Over the rate limit: 429, no try.
    let mut limited = None;
    for id in 10..20 {
        let trace = trace_id();
        let r = modern_request(&c, &edge.trusted_url("/guarded"), &tool_call(id, "echo"))
            .bearer_auth("k-alice")
            .header("traceparent", traceparent(&trace))
            .send()
            .await
            .unwrap();
        if r.status() == 429 {
            limited = Some(trace);
            break;
        }
    }
    let trace = limited.expect("the burst of 2 ran out");
    let spans = collector
        .trace(&trace, "the 429's span", |s| !s.is_empty())
        .await;
    let span = one(&spans, "SERVER", "mcp-edge");
    assert!(the_edges(&spans, "CLIENT").is_empty(), "{spans:#?}");
    assert_attrs(
        span,
        &[
            ("error.type", json!("rate_limited")),
            ("mcp.edge.rate_limit", json!("limited")),
            ("http.response.status_code", json!(429)),
        ],
    );
    assert_eq!(span["status"], "ERROR", "error.type is set");

    // A task poll goes to the task's member.
    let mut create = tool_call(30, "long");
    create["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"] =
        json!({"extensions": {"io.modelcontextprotocol/tasks": {}}});
    let (status, answer) = traced(&edge.trusted_url("/tasks"), &trace_id(), &create).await;
    assert_eq!(status, 200, "{answer}");
    let task: Value = serde_json::from_str(&answer).unwrap();
    let task = task["result"]["taskId"].as_str().unwrap().to_string();
    let trace = trace_id();
    let poll = modern_body(json!(31), "tasks/get", json!({"taskId": task}));
    let r = modern_request(&c, &edge.trusted_url("/tasks"), &poll)
        .header("mcp-name", &task)
        .header("traceparent", traceparent(&trace))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let _ = r.text().await;
    let spans = collector
        .trace(&trace, "the poll's spans", |s| s.len() >= 2)
        .await;
    let poll_span = one(&spans, "SERVER", "mcp-edge");
    assert_eq!(poll_span["name"], "tasks/get");
    assert_attrs(poll_span, &[("mcp.edge.pinned", json!("task"))]);
    assert_attrs(
        one(&spans, "CLIENT", "mcp-edge"),
        &[("server.port", json!(tasks.addr.port()))],
    );

    // A legacy client bridged to a 2026-07-28 server.
    let learned = "mcp_edge_pool_revisions{pool=\"bridge\",revision=\"2026-07-28\"} 1";
    let mut text = String::new();
    let found = poll_until(PATIENCE, async || {
        text = edge.scrape().await;
        text.contains(learned)
    })
    .await;
    assert!(
        found,
        "the bridge learned the server: {:?}\n{}",
        text.lines()
            .filter(|l| l.contains("revisions") || l.contains("health"))
            .collect::<Vec<_>>(),
        edge.proc.log_text()
    );
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"}}});
    let r = legacy_request(&c, &edge.trusted_url("/bridge/mcp"), None, &init)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let session = r.headers()["mcp-session-id"].to_str().unwrap().to_string();
    let trace = trace_id();
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": "old"}}});
    let r = legacy_request(&c, &edge.trusted_url("/bridge/mcp"), Some(&session), &call)
        .header("traceparent", traceparent(&trace))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.text().await.unwrap().contains("b1:old"));
    let spans = collector
        .trace(&trace, "the bridged call's spans", |s| s.len() >= 3)
        .await;
    let bridged = one(&spans, "SERVER", "mcp-edge");
    assert_attrs(
        bridged,
        &[
            ("mcp.edge.bridged", json!(true)),
            ("mcp.edge.era", json!("legacy")),
            ("gen_ai.tool.name", json!("echo")),
            ("mcp.protocol.version", json!("2025-11-25")),
        ],
    );
    let try_span = one(&spans, "CLIENT", "mcp-edge");
    assert_eq!(try_span["parent"], bridged["span_id"]);
    assert_eq!(
        one(&spans, "SERVER", "ts-peer-b1")["parent"],
        try_span["span_id"]
    );

    // A stdio call: the process gets the CLIENT span's context in `params._meta`.
    wait_until(PATIENCE, "the stdio pool is ready", async || {
        let url = format!("http://127.0.0.1:{}/readyz", edge.metrics);
        c.get(url).send().await.is_ok_and(|r| r.status() == 200)
    })
    .await;
    let trace = trace_id();
    let (status, answer) =
        traced(&edge.trusted_url("/stdio"), &trace, &tool_call(40, "meta")).await;
    assert_eq!(status, 200, "{answer}");
    let spans = collector
        .trace(&trace, "the stdio call's spans", |s| s.len() >= 2)
        .await;
    let piped = one(&spans, "CLIENT", "mcp-edge");
    assert_attrs(
        piped,
        &[
            ("network.transport", json!("pipe")),
            ("mcp.edge.stdio.pool", json!("io")),
        ],
    );
    let answer: Value = serde_json::from_str(&answer).unwrap();
    let meta: Value =
        serde_json::from_str(answer["result"]["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(
        meta["traceparent"],
        format!("00-{trace}-{}-01", piped["span_id"].as_str().unwrap()),
        "{meta}"
    );

    // A long-lived stream: its spans end once it is open.
    let trace = trace_id();
    let listen = modern_body(json!(50), "subscriptions/listen", json!({}));
    let open = modern_request(&c, &edge.trusted_url("/streams"), &listen)
        .header("traceparent", traceparent(&trace))
        .send()
        .await
        .unwrap();
    assert_eq!(open.status(), 200);
    let spans = collector
        .trace(&trace, "the stream's spans while it is open", |s| {
            s.len() >= 2
        })
        .await;
    assert_attrs(
        one(&spans, "SERVER", "mcp-edge"),
        &[
            ("mcp.edge.stream", json!("opened")),
            ("mcp.method.name", json!("subscriptions/listen")),
        ],
    );
    assert_eq!(
        stream.requests(),
        1,
        "the stream is still open at the member while its spans are already exported"
    );
    drop(open);
    drop(keys);
}

/// `[identity]` API keys: `k-alice` (tenant a) and `k-bob` (tenant b). Removed on drop.
struct Keys(std::path::PathBuf);

impl std::fmt::Display for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0.display())
    }
}

impl Drop for Keys {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn api_keys() -> Keys {
    let path = std::env::temp_dir().join(format!(
        "mcp-edge-trace-keys-{}-{}",
        std::process::id(),
        free_port()
    ));
    let entry = |key: &str, subject: &str, tenant: &str| {
        format!(
            "[[keys]]\nsha256 = \"{}\"\nsubject = \"{subject}\"\ntenant = \"{tenant}\"\n",
            common::mock::sha256_hex(key.as_bytes())
        )
    };
    let text = format!(
        "{}{}",
        entry("k-alice", "alice", "a"),
        entry("k-bob", "bob", "b")
    );
    std::fs::write(&path, text).unwrap();
    Keys(path)
}

/// A route with identity, a policy (tenant a: `echo`) and a rate limit of a burst of 2.
const GUARDED: &str = r#"auth = "required"
[routes.rate_limit]
requests_per_second = 1
burst = 2
[[routes.policy]]
name = "tenant-a"
tenants = ["a"]
tools = ["echo"]
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_that_is_down_or_refusing_costs_requests_nothing() {
    for (what, collector) in [
        ("down", None),
        ("refusing", Some(Collector::with(&["--mode", "refuse"]))),
    ] {
        let dead = refusing();
        let endpoint = match &collector {
            Some(c) => c.endpoint(),
            None => format!("http://{}/v1/traces", dead.addr),
        };
        let member = Mock::start(Behavior::Json).await;
        let edge = Traced::start(
            &endpoint,
            "export_timeout_ms = 1000",
            &route("main", "/mcp", &[member.addr], ""),
        );
        for id in 0..40 {
            let (status, body) =
                traced(&edge.url("/mcp"), &trace_id(), &tool_call(id, "echo")).await;
            assert_eq!(status, 200, "{what}: {body}");
        }
        assert_eq!(member.requests(), 40, "{what}");
        let failed = "mcp_edge_trace_spans_dropped_total{reason=\"export_failed\"}";
        wait_until(PATIENCE, "the lost spans counted", async || {
            // Two spans per request.
            edge.metric(failed).await >= 80.0
        })
        .await;
        assert_eq!(
            edge.metric("mcp_edge_trace_spans_exported_total").await,
            0.0,
            "{what}"
        );
        let log = edge.proc.log_text();
        assert_eq!(
            log.matches("tracing: exporting spans failed").count(),
            1,
            "{what}: said once:\n{log}"
        );
        if let Some(c) = &collector {
            assert!(c.exports().await > 0, "the refusing collector was asked");
        }
    }
}

/// A collector that takes 30 s to answer each export: the export thread waits, requests do
/// not (each is answered well within the stall), and what no longer fits the queue is dropped
/// and counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_that_stalls_for_30_seconds_costs_requests_nothing() {
    let collector = Collector::with(&["--stall", "30"]);
    let member = Mock::start(Behavior::Json).await;
    let edge = Traced::start(
        &collector.endpoint(),
        "export_timeout_ms = 30000\nqueue_spans = 16\nbatch_spans = 8",
        &route("main", "/mcp", &[member.addr], ""),
    );
    // The first batch goes out and the collector holds it.
    let (status, _) = traced(&edge.url("/mcp"), &trace_id(), &tool_call(0, "echo")).await;
    assert_eq!(status, 200);
    wait_until(PATIENCE, "the collector holds an export", async || {
        collector.exports().await >= 1
    })
    .await;
    let c = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    for id in 1..=60 {
        let r = modern_request(&c, &edge.url("/mcp"), &tool_call(id, "echo"))
            .send()
            .await
            .unwrap_or_else(|e| panic!("request {id} while the collector stalls: {e}"));
        assert_eq!(r.status(), 200);
    }
    let full = "mcp_edge_trace_spans_dropped_total{reason=\"queue_full\"}";
    wait_until(PATIENCE, "the spans that did not fit counted", async || {
        // 120 spans into a queue of 16 behind one stalled export of at most 8.
        edge.metric(full).await >= 120.0 - 16.0 - 8.0
    })
    .await;
    let log = edge.proc.log_text();
    assert_eq!(log.matches("the span queue is full").count(), 1, "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_access_log_names_who_called_what_and_what_the_edge_decided() {
    let collector = Collector::start();
    let open_member = Mock::start(Behavior::JsonWithSession("sid-7".into())).await;
    let guarded_member = Mock::start(Behavior::Json).await;
    let stream = Mock::start(Behavior::Sse {
        frames: vec![(Pace::Now, "event: message\ndata: {}\n\n".into())],
        hold: Duration::from_secs(60),
    })
    .await;
    let keys = api_keys();
    let body = format!(
        "[access_log]\nargument_names = true\n\n[forwarding]\ntrusted_proxies = [\"127.0.0.1\"]\n\n\
         [identity]\napi_keys_file = \"{keys}\"\n\n{}{}{}",
        route("open", "/mcp", &[open_member.addr], ""),
        route("guarded", "/guarded", &[guarded_member.addr], GUARDED),
        route("streams", "/streams", &[stream.addr], ""),
    );
    let edge = Traced::start(&collector.endpoint(), "", &body);
    let c = client();

    // A modern call without identity, through a trusted proxy naming the client.
    let trace = trace_id();
    let r = modern_request(&c, &edge.trusted_url("/mcp"), &tool_call(1, "echo"))
        .header("traceparent", traceparent(&trace))
        .header("x-forwarded-for", "203.0.113.9")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let line = edge.line_of(&trace).await;
    let want = [
        ("method", json!("tools/call")),
        ("name", json!("echo")),
        ("era", json!("modern")),
        ("client", json!("203.0.113.9")),
        ("principal", Value::Null),
        ("issuer", Value::Null),
        ("tenant", Value::Null),
        ("rate_limit", Value::Null),
        ("policy", Value::Null),
        ("outcome", json!("forwarded")),
        ("arguments", json!(["text"])),
    ];
    for (key, value) in &want {
        assert_eq!(&line[*key], value, "{key}: {line}");
    }
    assert_eq!(line["span_id"].as_str().map(str::len), Some(16), "{line}");
    assert_eq!(
        line["client_trace_id"], trace,
        "the trusted listener continued it"
    );

    // A legacy session's tool call names its tool too.
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"}}});
    let r = legacy_request(&c, &edge.trusted_url("/mcp"), None, &init)
        .send()
        .await
        .unwrap();
    let token = r.headers()["mcp-session-id"].to_str().unwrap().to_string();
    let trace = trace_id();
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": "x", "count": 2}}});
    let r = legacy_request(&c, &edge.trusted_url("/mcp"), Some(&token), &call)
        .header("traceparent", traceparent(&trace))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let line = edge.line_of(&trace).await;
    assert_eq!(line["era"], "legacy", "{line}");
    assert_eq!(line["name"], "echo", "{line}");
    // In the order the body has them (serde_json writes `json!` keys sorted).
    assert_eq!(line["arguments"], json!(["count", "text"]), "{line}");
    // The span carries the member's own session id; nothing carries the token.
    let spans = collector
        .trace(&trace, "the legacy call's spans", |s| s.len() >= 2)
        .await;
    assert_eq!(
        attr(one(&spans, "SERVER", "mcp-edge"), "mcp.session.id"),
        "sid-7"
    );

    // With identity: allowed, hidden, limited.
    let mut lines = Vec::new();
    for (id, key, tool) in [
        (3, "k-alice", "echo"),
        (4, "k-alice", "digest"),
        (5, "k-bob", "echo"),
    ] {
        let trace = trace_id();
        let r = modern_request(&c, &edge.trusted_url("/guarded"), &tool_call(id, tool))
            .bearer_auth(key)
            .header("traceparent", traceparent(&trace))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        lines.push(edge.line_of(&trace).await);
    }
    let expect = [
        ("alice", "a", "allowed", "tenant-a"),
        ("alice", "a", "hidden", "tenant-a"),
        ("bob", "b", "hidden", "no-rule"),
    ];
    for (line, (who, tenant, verdict, rule)) in lines.iter().zip(expect) {
        assert_eq!(line["principal"], who, "{line}");
        assert_eq!(line["issuer"], "api-key", "{line}");
        assert_eq!(line["tenant"], tenant, "{line}");
        assert_eq!(line["rate_limit"], "allowed", "{line}");
        assert_eq!(line["policy"], verdict, "{line}");
        assert_eq!(line["policy_rule"], rule, "{line}");
    }
    let mut limited = None;
    for id in 6..20 {
        let trace = trace_id();
        let r = modern_request(&c, &edge.trusted_url("/guarded"), &tool_call(id, "echo"))
            .bearer_auth("k-alice")
            .header("traceparent", traceparent(&trace))
            .send()
            .await
            .unwrap();
        if r.status() == 429 {
            limited = Some(edge.line_of(&trace).await);
            break;
        }
    }
    let line = limited.expect("alice's burst ran out");
    assert_eq!(line["rate_limit"], "limited", "{line}");
    assert_eq!(line["error"], "rate_limited", "{line}");
    assert_eq!(line["policy"], Value::Null, "the limit came first: {line}");

    // A client that closes its own stream is not an error.
    let trace = trace_id();
    let listen = modern_body(json!(30), "subscriptions/listen", json!({}));
    let open = modern_request(&c, &edge.trusted_url("/streams"), &listen)
        .header("traceparent", traceparent(&trace))
        .send()
        .await
        .unwrap();
    assert_eq!(open.status(), 200);
    drop(open);
    let line = edge.line_of(&trace).await;
    assert_eq!(line["outcome"], "client_closed", "{line}");
    assert_eq!(line["error"], Value::Null, "{line}");
    let errors = edge.scrape().await;
    assert!(
        errors.contains("mcp_edge_errors_total{kind=\"client_error\"} 0"),
        "not counted as an error"
    );
    drop(keys);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mcp_operation_metric_keeps_its_labels_bounded() {
    let member = Mock::start(Behavior::Sequence(vec![
        Behavior::Json,
        Behavior::Json,
        Behavior::Status(
            200,
            r#"{"jsonrpc":"2.0","id":3,"error":{"code":-32603,"message":"boom"}}"#.into(),
        ),
        Behavior::Status(
            200,
            r#"{"jsonrpc":"2.0","id":4,"error":{"code":4711,"message":"own"}}"#.into(),
        ),
    ]))
    .await;
    let body = route("main", "/mcp", &[member.addr], "");
    let (path, port, metrics) = (temp_config(), free_port(), free_port());
    let text = format!(
        "[server]\nthreads = 1\n\n[[listeners]]\naddress = \"127.0.0.1:{port}\"\n\n\
         [metrics]\naddress = \"127.0.0.1:{metrics}\"\ntool_names = [\"echo\"]\n\n{}{body}",
        sessions_section(&format!("1:{KEY_A}"))
    );
    std::fs::write(&path, text).unwrap();
    let proc = spawn(&path, port);
    let url = proc.url();
    for (id, tool) in [(1, "echo"), (2, "other"), (3, "echo"), (4, "echo")] {
        let r = modern_request(&client(), &url, &tool_call(id, tool))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let _ = r.text().await;
    }
    let scrape_url = format!("http://127.0.0.1:{metrics}/metrics");
    let series = |error: &str, tool: &str| {
        format!(
            "mcp_server_operation_duration_seconds_count{{error_type=\"{error}\",gen_ai_tool_name=\"{tool}\",mcp_method_name=\"tools/call\",route=\"/mcp\"}} 1"
        )
    };
    // Refused once the body was read: the operation was still asked for.
    let refused = modern_request(&client(), &url, &tool_call(5, "echo"))
        .header("mcp-name", "other")
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 400);
    let want = [
        series("", "echo"),
        series("", "_OTHER"),
        series("-32603", "echo"),
        series("_OTHER", "echo"),
        series("header_mismatch_name", "echo"),
    ];
    let mut text = String::new();
    let all = poll_until(PATIENCE, async || {
        text = client()
            .get(&scrape_url)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        want.iter().all(|w| text.contains(w.as_str()))
    })
    .await;
    assert!(all, "want {want:#?} in:\n{text}");
    assert!(
        !text.contains("gen_ai_tool_name=\"other\""),
        "an unlisted tool is no label"
    );
}

/// What a member gets: the edge's CLIENT span in `traceparent`, the client's `tracestate`
/// only when the trace is continued; and a try that fails with no member left keeps the
/// operation's name and attributes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_member_gets_the_edges_span_and_a_last_failed_try_is_named() {
    let collector = Collector::start();
    let member = Mock::start(Behavior::Json).await;
    let dead = refusing();
    let body = format!(
        "{}{}",
        route("main", "/mcp", &[member.addr], ""),
        route("dead", "/dead", &[dead.addr], "")
    );
    let edge = Traced::start(&collector.endpoint(), "", &body);
    let c = client();
    for (url, continued) in [(edge.trusted_url("/mcp"), true), (edge.url("/mcp"), false)] {
        let trace = trace_id();
        let r = modern_request(&c, &url, &tool_call(1, "echo"))
            .header("traceparent", traceparent(&trace))
            .header("tracestate", "client=1")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let head = member
            .last()
            .expect("the member got the request")
            .head
            .to_lowercase();
        let sent = head
            .lines()
            .find_map(|l| l.strip_prefix("traceparent: "))
            .expect("a traceparent")
            .trim()
            .to_string();
        let span = sent.split('-').nth(2).unwrap().to_string();
        let spans = collector
            .wait_spans(1, "the try's CLIENT span", |s| {
                s["kind"] == "CLIENT" && s["span_id"] == span.as_str()
            })
            .await;
        assert_eq!(
            spans[0]["trace_id"] == trace.as_str(),
            continued,
            "{sent}: the client's trace only when continued"
        );
        assert_eq!(
            head.contains("tracestate: client=1"),
            continued,
            "the client's state only when continued:\n{head}"
        );
    }

    let trace = trace_id();
    let (status, _) = traced(&edge.trusted_url("/dead"), &trace, &tool_call(2, "echo")).await;
    assert_eq!(status, 502);
    let spans = collector
        .trace(&trace, "the failed call's spans", |s| s.len() >= 2)
        .await;
    let server_span = one(&spans, "SERVER", "mcp-edge");
    let try_span = one(&spans, "CLIENT", "mcp-edge");
    assert_eq!(try_span["name"], "tools/call echo");
    assert_eq!(try_span["status"], "ERROR");
    assert_attrs(
        try_span,
        &[
            ("error.type", json!("connect_refused")),
            ("mcp.method.name", json!("tools/call")),
            ("gen_ai.tool.name", json!("echo")),
        ],
    );
    assert_eq!(
        server_span["status"], "ERROR",
        "the edge's 502 is a server failure"
    );
    assert_attrs(server_span, &[("error.type", json!("connect_failed"))]);
}
