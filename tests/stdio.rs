//! stdio pools: official TypeScript and Python SDK servers run by the edge over stdio,
//! driven by the official clients over HTTP; requests from many clients on one process (ids
//! and progress tokens that collide), a process killed mid-call, isolation per principal
//! and per session, server-to-client requests, readiness, and stopping with the edge.

mod common;

use std::time::Duration;

use common::peers::{dir, py_client, ts_client};
use common::*;
use serde_json::{json, Value};

/// A TOML command running `ts-server.mjs` over stdio.
fn ts_command(mode: &str, instance: &str) -> String {
    format!(
        r#"["node", "{}", "--mode", "{mode}", "--instance", "{instance}"]"#,
        dir().join("ts-server.mjs").display()
    )
}

/// A TOML command running `py-server.py` over stdio.
fn py_command(instance: &str) -> String {
    format!(
        r#"["{}", "{}", "--transport", "stdio", "--instance", "{instance}"]"#,
        dir().join(".venv/bin/python").display(),
        dir().join("py-server.py").display()
    )
}

/// A stdio pool `name` on route `path`.
fn stdio_route(name: &str, path: &str, command: &str, pool: &str, route: &str) -> String {
    format!(
        "[[pools]]\nname = \"{name}\"\ncommand = {command}\n{pool}\n\n[[routes]]\npath = \"{path}\"\npool = \"{name}\"\n{route}\n\n"
    )
}

/// One ready edge with the TS server's stdio mode as pool `main` on `/mcp` (`pool`: more of
/// the pool's settings).
async fn ts_stdio_edge(instance: &str, pool: &str) -> Edge {
    let edge = start_edge(&stdio_route(
        "main",
        "/mcp",
        &ts_command("stdio", instance),
        pool,
        "",
    ));
    wait_ready(&edge).await;
    edge
}

async fn wait_ready(edge: &Edge) {
    let url = format!("http://127.0.0.1:{}/readyz", edge.metrics_port);
    let c = client();
    wait_until(PATIENCE, "the stdio pools are ready", async || {
        c.get(&url)
            .send()
            .await
            .is_ok_and(|r| r.status().as_u16() == 200)
    })
    .await;
}

fn text_of(v: &Value) -> &str {
    v["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
}

/// A 2026-07-28 `tools/call` through the edge; status and JSON body.
async fn call(c: &reqwest::Client, url: &str, id: Value, tool: &str, args: Value) -> (u16, Value) {
    let body = modern_body(id, "tools/call", json!({"name": tool, "arguments": args}));
    let r = modern_request(c, url, &body).send().await.unwrap();
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    let v = serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON ({status}): {text}"));
    (status, v)
}

/// The `data:` messages of an event-stream body.
fn events(body: &str) -> Vec<Value> {
    body.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_clients_use_stdio_servers_in_both_eras() {
    let body = format!(
        "{}{}{}",
        stdio_route(
            "main",
            "/mcp",
            &ts_command("stdio", "tsio"),
            "processes = 2",
            ""
        ),
        stdio_route("py", "/py", &py_command("pyio"), "", ""),
        stdio_route("v1", "/v1", &ts_command("stdio-v1", "v1io"), "", ""),
    );
    let edge = start_edge(&body);
    wait_ready(&edge).await;
    let base = format!("http://127.0.0.1:{}", edge.port);
    let runs = [
        ("/mcp", "tsio", "ts", "auto", "modern"),
        ("/mcp", "tsio", "ts", "legacy", "legacy"),
        ("/mcp", "tsio", "py", "", "modern"),
        ("/py", "pyio", "ts", "auto", "modern"),
        ("/py", "pyio", "ts", "legacy", "legacy"),
        ("/py", "pyio", "py", "", "modern"),
        ("/v1", "v1io", "ts", "legacy", "legacy"),
        ("/v1", "v1io", "ts", "pin", "modern"),
    ];
    for (path, instance, client, mode, era) in runs {
        let url = format!("{base}{path}");
        let out = if client == "ts" {
            ts_client(&url, &["--mode", mode])
        } else {
            py_client(&url, &[])
        };
        let what = format!("{client} client ({mode}) on {path}: {out}");
        assert_eq!(out["ok"], true, "{what}");
        assert_eq!(out["era"], era, "{what}");
        assert_eq!(out["echo"], format!("{instance}:hi"), "{what}");
        assert_eq!(out["slow"], format!("{instance}:done"), "{what}");
        assert_eq!(out["progress"], 3, "progress reached the client: {what}");
        assert_eq!(out["resource"], instance, "{what}");
        assert_eq!(
            out["prompt"],
            format!("Hello edge from {instance}"),
            "{what}"
        );
        let tools: Vec<&str> = out["tools"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .collect();
        assert!(tools.contains(&"note") && tools.contains(&"hang"), "{what}");
    }
    // Two shared processes served the TS route, one each the others.
    let gauge = format!("mcp_edge_stdio_processes{{pool=\"{}\"}}", edge.pool);
    wait_until(PATIENCE, "two processes counted", async || {
        metric(&edge, &gauge).await == 2.0
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_share_a_process_with_colliding_ids_and_progress_tokens() {
    let edge = ts_stdio_edge("one", "").await;
    let c = client();
    let url = edge.url();
    let (_, first) = call(&c, &url, json!(1), "pid", json!({})).await;
    let pid = text_of(&first).to_string();
    assert!(pid.parse::<u32>().is_ok(), "{first}");

    // 24 calls at once, half with id 1 and half with id "1": each answer has its caller's
    // id, of its caller's type, and its caller's text.
    let calls = (0..24).map(|i| {
        let (c, url) = (c.clone(), url.clone());
        async move {
            let id = if i % 2 == 0 { json!(1) } else { json!("1") };
            let (status, v) = call(
                &c,
                &url,
                id.clone(),
                "echo",
                json!({"text": format!("c{i}")}),
            )
            .await;
            (i, id, status, v)
        }
    });
    for (i, id, status, v) in futures::future::join_all(calls).await {
        assert_eq!(status, 200, "{v}");
        assert_eq!(v["id"], id, "call {i}: {v}");
        assert_eq!(text_of(&v), format!("one:c{i}"), "call {i}: {v}");
        assert_eq!(v["result"]["resultType"], "complete", "{v}");
    }

    // Two clients' `slow` calls with the same id and the same progress token, at once:
    // each stream carries exactly its own three progress notifications, then its result.
    let slow = |c: reqwest::Client, url: String| async move {
        let mut params = json!({"name": "slow", "arguments": {"steps": 3}});
        params["_meta"] = meta();
        params["_meta"]["progressToken"] = json!("p");
        let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params});
        let r = modern_request(&c, &url, &body).send().await.unwrap();
        assert_eq!(r.status().as_u16(), 200);
        events(&r.text().await.unwrap())
    };
    let (a, b) = tokio::join!(slow(c.clone(), url.clone()), slow(c.clone(), url.clone()));
    for stream in [a, b] {
        let progress: Vec<&Value> = stream
            .iter()
            .filter(|m| m["method"] == "notifications/progress")
            .collect();
        assert_eq!(progress.len(), 3, "{stream:?}");
        assert!(
            progress.iter().all(|p| p["params"]["progressToken"] == "p"),
            "{stream:?}"
        );
        let last = stream.last().unwrap();
        assert_eq!(last["id"], 7, "{stream:?}");
        assert_eq!(text_of(last), "one:done", "{stream:?}");
    }
    let (_, again) = call(&c, &url, json!(2), "pid", json!({})).await;
    assert_eq!(text_of(&again), pid, "one process served every call");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_killed_mid_call_fails_that_call_clearly_and_the_next_one_works() {
    let edge = ts_stdio_edge("k", "").await;
    let c = client();
    let url = edge.url();
    let (_, v) = call(&c, &url, json!(1), "pid", json!({})).await;
    let pid = text_of(&v).to_string();
    let exits = format!("mcp_edge_stdio_exits_total{{pool=\"{}\"}}", edge.pool);
    let before = metric(&edge, &exits).await;

    // A long call streaming progress: once its first progress arrived, the process is
    // killed under it.
    let mut params = json!({"name": "slow", "arguments": {"steps": 100}});
    params["_meta"] = meta();
    params["_meta"]["progressToken"] = json!(5);
    let body = json!({"jsonrpc": "2.0", "id": "long", "method": "tools/call", "params": params});
    let mut r = modern_request(&c, &url, &body).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let mut seen = String::new();
    while !seen.contains("notifications/progress") {
        let chunk = r
            .chunk()
            .await
            .unwrap()
            .expect("the stream ended before any progress");
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    let killed = std::process::Command::new("kill")
        .args(["-9", &pid])
        .status()
        .unwrap();
    assert!(killed.success());
    while let Some(chunk) = r.chunk().await.unwrap() {
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    let last = events(&seen).pop().unwrap();
    assert_eq!(last["id"], "long", "{seen}");
    assert_eq!(last["error"]["code"], -32603, "{seen}");
    let message = last["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("process ended before answering"),
        "{message}"
    );

    // The next call works, on a new process.
    let (status, v) = call(&c, &url, json!(2), "pid", json!({})).await;
    assert_eq!(status, 200, "{v}");
    assert_ne!(text_of(&v), pid, "a new process: {v}");
    assert_eq!(metric(&edge, &exits).await, before + 1.0);
    let (_, v) = call(&c, &url, json!(3), "echo", json!({"text": "after"})).await;
    assert_eq!(text_of(&v), "k:after", "{v}");
}

/// Two API keys: alice (tenant a) and bob (tenant b).
fn api_keys() -> String {
    let digest = |k: &str| {
        use sha2::Digest;
        sha2::Sha256::digest(k.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    };
    let path = std::env::temp_dir().join(format!(
        "mcp-edge-stdio-keys-{}-{}",
        std::process::id(),
        free_port()
    ));
    std::fs::write(
        &path,
        format!(
            "[[keys]]\nsha256 = \"{}\"\nsubject = \"alice\"\ntenant = \"a\"\n\n[[keys]]\nsha256 = \"{}\"\nsubject = \"bob\"\ntenant = \"b\"\n",
            digest("k-alice"),
            digest("k-bob")
        ),
    )
    .unwrap();
    format!("[identity]\napi_keys_file = \"{}\"\n\n", path.display())
}

/// What `note` answered, call by call, for one client run.
fn notes(out: &Value) -> Vec<String> {
    let calls = out["calls"].as_object().expect("calls");
    let mut seen: Vec<(String, String)> = calls
        .iter()
        .map(|(k, v)| (k.clone(), v["text"].as_str().unwrap_or("?").to_string()))
        .collect();
    seen.sort();
    seen.into_iter().map(|(_, t)| t).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_principal_processes_keep_one_tenants_state_from_another() {
    let route = "auth = \"required\"";
    let body = format!(
        "{}{}{}",
        api_keys(),
        stdio_route(
            "main",
            "/mcp",
            &ts_command("stdio", "iso"),
            "isolation = \"per_principal\"",
            route
        ),
        stdio_route("shared", "/shared", &ts_command("stdio", "iso"), "", route),
    );
    let edge = start_edge(&body);
    wait_ready(&edge).await;
    for (path, isolated) in [("/mcp", true), ("/shared", false)] {
        let url = format!("http://127.0.0.1:{}{path}", edge.port);
        let alice = ts_client(
            &url,
            &[
                "--mode",
                "legacy",
                "--bearer",
                "k-alice",
                "--policy-probe",
                "--call",
                "note",
            ],
        );
        assert_eq!(alice["ok"], true, "{alice}");
        assert_eq!(notes(&alice), ["x"], "{alice}");
        let alice = ts_client(
            &url,
            &[
                "--mode",
                "auto",
                "--bearer",
                "k-alice",
                "--policy-probe",
                "--call",
                "note",
            ],
        );
        assert_eq!(alice["era"], "modern", "{alice}");
        assert_eq!(
            notes(&alice),
            ["x,x"],
            "alice's own process, both eras: {alice}"
        );
        let bob = ts_client(
            &url,
            &[
                "--mode",
                "legacy",
                "--bearer",
                "k-bob",
                "--policy-probe",
                "--call",
                "note",
            ],
        );
        assert_eq!(bob["ok"], true, "{bob}");
        if isolated {
            assert_eq!(notes(&bob), ["x"], "bob sees none of alice's notes: {bob}");
        } else {
            assert_eq!(
                notes(&bob),
                ["x,x,x"],
                "a shared process shares state: {bob}"
            );
        }
    }
    let pool = format!("mcp_edge_stdio_processes{{pool=\"{}\"}}", edge.pool);
    wait_until(PATIENCE, "one process per principal", async || {
        metric(&edge, &pool).await == 2.0
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_session_processes_take_server_requests_and_are_reaped_when_idle() {
    let pool = "isolation = \"per_session\"\nidle_ms = 10000";
    let edge = ts_stdio_edge("ses", pool).await;
    let url = edge.url();
    // Each legacy session has its own process: its notes start empty; the server's
    // elicitation reaches the client that caused it, and its answer the server.
    let mut session_pids = Vec::new();
    for _ in 0..2 {
        let args = [
            "--mode",
            "legacy",
            "--policy-probe",
            "--call",
            "note,ask,pid",
        ];
        let out = ts_client(&url, &args);
        assert_eq!(out["ok"], true, "{out}");
        assert_eq!(out["calls"]["note"]["text"], "x", "{out}");
        let asked = &out["calls"]["ask"]["text"];
        assert_eq!(asked, "asked:accept:{\"ok\":true}", "{out}");
        let pid = out["calls"]["pid"]["text"].as_str().unwrap().to_string();
        assert!(running(&pid), "{out}");
        session_pids.push(pid);
    }
    assert_ne!(session_pids[0], session_pids[1], "a process per session");
    // 2026-07-28 clients have no session: they share the pool's shared process.
    let first = ts_client(
        &url,
        &["--mode", "auto", "--policy-probe", "--call", "note"],
    );
    let second = ts_client(
        &url,
        &["--mode", "auto", "--policy-probe", "--call", "note"],
    );
    assert_eq!(notes(&first), ["x"], "{first}");
    assert_eq!(notes(&second), ["x,x"], "{second}");
    // Idle sessions are forgotten and their processes stopped: the shared one is left.
    let gauge = format!("mcp_edge_stdio_processes{{pool=\"{}\"}}", edge.pool);
    wait_until(PATIENCE, "idle session processes stopped", async || {
        metric(&edge, &gauge).await == 1.0
    })
    .await;
    for pid in &session_pids {
        wait_until(PATIENCE, "the session's process ended", async || {
            !running(pid)
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_cannot_start_is_not_ready_and_requests_get_503_at_once() {
    let body = stdio_route("main", "/mcp", r#"["/nonexistent/mcp-server"]"#, "", "");
    let edge = start_edge(&body);
    let failed = format!(
        "mcp_edge_stdio_starts_total{{pool=\"{}\",result=\"failed\"}}",
        edge.pool
    );
    wait_metric(&edge, &failed, 1.0).await;
    let ready = client()
        .get(format!("http://127.0.0.1:{}/readyz", edge.metrics_port))
        .send()
        .await
        .unwrap();
    assert_eq!(ready.status().as_u16(), 503);
    let started = std::time::Instant::now();
    let (status, v) = call(
        &client(),
        &edge.url(),
        json!(1),
        "echo",
        json!({"text": "x"}),
    )
    .await;
    assert_eq!(status, 503, "{v}");
    assert_eq!(v["id"], 1, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("fails to start"),
        "{v}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "answered without waiting"
    );
}

#[test]
fn the_edge_stops_its_servers_and_what_they_started_and_logs_their_stderr() {
    use common::edge_process::{spawn, temp_config};
    let port = free_port();
    let metrics = free_port();
    let path = temp_config();
    // The server runs under a shell (a wrapper script, as `npx` is) and stays up after its
    // stdin ends: only the signal to its process group stops it.
    let term_log =
        std::env::temp_dir().join(format!("mcp-edge-term-{}-{port}", std::process::id()));
    let wrapped = format!(
        r#"["sh", "-c", "node {} --mode stdio --instance bye --linger --term-log {}; true"]"#,
        dir().join("ts-server.mjs").display(),
        term_log.display()
    );
    std::fs::write(
        &path,
        format!(
            "[server]\ngrace_period_seconds = 1\ngraceful_shutdown_timeout_seconds = 1\n\n[[listeners]]\naddress = \"127.0.0.1:{port}\"\n\n[metrics]\naddress = \"127.0.0.1:{metrics}\"\n\n{}{}",
            sessions_section(&format!("1:{KEY_A}")),
            stdio_route("tools", "/mcp", &wrapped, "processes = 2\nstop_grace_ms = 10000", "")
        ),
    )
    .unwrap();
    let edge = spawn(&path, port);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let c = client();
    let pids: Vec<String> = rt.block_on(async {
        let mut pids = Vec::new();
        wait_until(PATIENCE, "two processes answered", async || {
            let (status, v) = call(&c, &edge.url(), json!(1), "pid", json!({})).await;
            if status == 200 && !pids.contains(&text_of(&v).to_string()) {
                pids.push(text_of(&v).to_string());
            }
            pids.len() == 2
        })
        .await;
        pids
    });
    for pid in &pids {
        let line = format!("]: STDIO {pid}");
        assert!(
            edge.log_text().contains("stdio tools[") && edge.log_text().contains(&line),
            "stderr logged with a prefix: {}",
            edge.log_text()
        );
        assert!(running(pid), "{pid} runs");
    }
    edge.signal("-TERM");
    // Well within stop_grace_ms: SIGTERM reached the servers themselves.
    wait_until_blocking(
        Duration::from_secs(8),
        "the servers stopped with the edge",
        || pids.iter().all(|p| !running(p)),
    );
    // SIGTERM reached each server itself, not only the shell in front of it.
    let termed = std::fs::read_to_string(&term_log).unwrap_or_default();
    for pid in &pids {
        assert!(
            termed.lines().any(|l| l == pid),
            "{pid} got no SIGTERM: {termed:?}"
        );
    }
    let _ = std::fs::remove_file(path);
    let _ = std::fs::remove_file(term_log);
}

/// A process that runs (not a zombie waiting for its parent).
fn running(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            != Some("Z")
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_cannot_cancel_or_reset_what_others_run_on_a_shared_process() {
    let edge = ts_stdio_edge("sh", "").await;
    let c = client();
    let url = edge.url();
    // A's long call streams progress; B posts cancellations for every small number, and
    // 2025 methods the 2026-07-28 revision removed.
    let mut params = json!({"name": "slow", "arguments": {"steps": 50}});
    params["_meta"] = meta();
    params["_meta"]["progressToken"] = json!(1);
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params});
    let mut r = modern_request(&c, &url, &body).send().await.unwrap();
    let mut seen = String::new();
    while !seen.contains("notifications/progress") {
        let chunk = r.chunk().await.unwrap().expect("progress first");
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    for n in 0..20 {
        let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": n, "_meta": meta()}});
        let status = modern_request(&c, &url, &cancel)
            .send()
            .await
            .unwrap()
            .status();
        assert_eq!(status.as_u16(), 202);
    }
    for method in ["ping", "initialize", "logging/setLevel"] {
        let body = modern_body(json!(9), method, json!({"level": "debug"}));
        let r = modern_request(&c, &url, &body).send().await.unwrap();
        let status = r.status().as_u16();
        let v: Value = r.json().await.unwrap();
        assert_eq!(
            (status, v["error"]["code"].as_i64()),
            (404, Some(-32601)),
            "{method}: {v}"
        );
    }
    let rest = async {
        while let Some(chunk) = r.chunk().await.unwrap() {
            seen.push_str(&String::from_utf8_lossy(&chunk));
        }
    };
    let ended = tokio::time::timeout(PATIENCE, rest).await;
    assert!(ended.is_ok(), "A's call never ended (cancelled by B?)");
    let last = events(&seen).pop().unwrap();
    assert_eq!(text_of(&last), "sh:done", "A's call ran to its end: {seen}");
}

#[test]
fn a_reload_keeps_the_processes_of_a_pool_it_keeps_and_stops_those_of_a_pool_it_drops() {
    use common::edge_process::{spawn, temp_config};
    let port = free_port();
    let path = temp_config();
    let write = |with_extra: bool, limit: u32| {
        let extra = if with_extra {
            stdio_route("extra", "/extra", &ts_command("stdio", "extra"), "", "")
        } else {
            String::new()
        };
        let text = format!(
            "[[listeners]]\naddress = \"127.0.0.1:{port}\"\n\n[limits]\nmax_concurrent_requests = {limit}\n\n{}{}{extra}",
            sessions_section(&format!("1:{KEY_A}")),
            stdio_route("tools", "/mcp", &ts_command("stdio", "kept"), "", ""),
        );
        std::fs::write(&path, text).unwrap();
    };
    write(true, 1000);
    let edge = spawn(&path, port);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let c = client();
    let extra_url = format!("http://127.0.0.1:{port}/extra");
    let pid_of = |url: String| {
        let c = c.clone();
        rt.block_on(async move {
            let mut pid = None;
            wait_until(PATIENCE, "a process answered", async || {
                let (status, v) = call(&c, &url, json!(1), "pid", json!({})).await;
                pid = (status == 200).then(|| text_of(&v).to_string());
                pid.is_some()
            })
            .await;
            pid.unwrap()
        })
    };
    let kept = pid_of(edge.url());
    let dropped = pid_of(extra_url.clone());
    // A client connection opened before the reload stays open (kept alive, idle) through
    // it: it must not keep the old configuration, and so the dropped pool, alive.
    let idle_client = client();
    let (status, _) = rt.block_on(call(&idle_client, &extra_url, json!(2), "pid", json!({})));
    assert_eq!(status, 200);
    write(false, 999);
    edge.signal("-HUP");
    rt.block_on(async {
        wait_until(PATIENCE, "the reload dropped /extra", async || {
            let body = modern_body(
                json!(1),
                "tools/call",
                json!({"name": "pid", "arguments": {}}),
            );
            let r = modern_request(&c, &extra_url, &body).send().await.unwrap();
            r.status().as_u16() == 404
        })
        .await;
    });
    wait_until_blocking(PATIENCE, "the dropped pool's process stopped", || {
        !running(&dropped)
    });
    assert_eq!(pid_of(edge.url()), kept, "the kept pool kept its process");
    assert!(running(&kept));
    drop(idle_client);
    let _ = std::fs::remove_file(path);
}

async fn open_session(c: &reqwest::Client, url: &str) -> String {
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"}}});
    let r = legacy_request(c, url, None, &init).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let token = r.headers()["mcp-session-id"].to_str().unwrap().to_string();
    let done = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let r = legacy_request(c, url, Some(&token), &done)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 202);
    token
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_legacy_session_cancels_only_its_own_requests_on_a_shared_process() {
    let edge = ts_stdio_edge("lc", "").await;
    let c = client();
    let url = edge.url();
    let (a, b) = (open_session(&c, &url).await, open_session(&c, &url).await);
    let slow = |token: &str, id: i64, steps: i64| {
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
            "name": "slow", "arguments": {"steps": steps}, "_meta": {"progressToken": id}}});
        legacy_request(&c, &url, Some(token), &body)
    };
    let cancel = |token: &str, id: i64| {
        let body = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": id, "reason": "test"}});
        legacy_request(&c, &url, Some(token), &body)
    };
    let read_until_progress = async |r: &mut reqwest::Response| {
        let mut seen = String::new();
        while !seen.contains("notifications/progress") {
            let chunk = r.chunk().await.unwrap().expect("progress first");
            seen.push_str(&String::from_utf8_lossy(&chunk));
        }
        seen
    };
    let read_rest = async |r: &mut reqwest::Response, mut seen: String| {
        let rest = async {
            while let Some(chunk) = r.chunk().await.unwrap() {
                seen.push_str(&String::from_utf8_lossy(&chunk));
            }
            seen
        };
        tokio::time::timeout(PATIENCE, rest)
            .await
            .expect("the stream ended")
    };
    // A runs request 1, B request 2. B cancelling "1" names no request of B's: A's runs on
    // (matched on the id alone, it would be A's). B cancelling "2" ends B's own.
    let mut ra = slow(&a, 1, 30).send().await.unwrap();
    let mut rb = slow(&b, 2, 30).send().await.unwrap();
    let seen_a = read_until_progress(&mut ra).await;
    let seen_b = read_until_progress(&mut rb).await;
    assert_eq!(cancel(&b, 1).send().await.unwrap().status().as_u16(), 202);
    assert_eq!(cancel(&b, 2).send().await.unwrap().status().as_u16(), 202);
    let b_end = events(&read_rest(&mut rb, seen_b).await).pop().unwrap();
    assert_eq!(
        b_end["error"]["code"], -32800,
        "B's own request was cancelled: {b_end}"
    );
    assert_eq!(b_end["id"], 2, "{b_end}");
    let a_end = events(&read_rest(&mut ra, seen_a).await).pop().unwrap();
    assert_eq!(
        text_of(&a_end),
        "lc:done",
        "A's request 1 ran to its end: {a_end}"
    );
}
