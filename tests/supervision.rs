//! stdio supervision: every process a server started stopped with it on every path, hung
//! servers noticed and restarted, processes bounded (memory, stderr), isolated processes
//! given directories of their own. The edge binary runs the official TypeScript SDK server
//! (tests/peers/ts-server.mjs) and the reference memory server
//! (`@modelcontextprotocol/server-memory`); `tests/peers/with-helper.py` starts, before the
//! server, a helper in a process group of its own that ignores SIGTERM.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::edge_process::{spawn, temp_config, Proc};
use common::peers::dir;
use common::*;
use serde_json::{json, Value};

/// A temporary file named for this test and `what`.
fn temp(what: &str) -> PathBuf {
    std::env::temp_dir().join(format!(
        "mcp-edge-supervision-{}-{what}-{}",
        std::process::id(),
        free_port()
    ))
}

/// The TS stdio server behind `with-helper.py` (the helpers' pids go to `pids`).
fn with_helper(pids: &Path, instance: &str) -> String {
    format!(
        r#"["{}", "{}", "{}", "--", "node", "{}", "--mode", "stdio", "--instance", "{instance}", "--linger"]"#,
        dir().join(".venv/bin/python").display(),
        dir().join("with-helper.py").display(),
        pids.display(),
        dir().join("ts-server.mjs").display()
    )
}

/// An edge binary with `body` (pools and routes) and `server` keys.
fn edge(body: &str, server: &str) -> (Proc, PathBuf, u16) {
    let (path, port, metrics) = (temp_config(), free_port(), free_port());
    write_config(&path, port, metrics, body, server);
    let edge = spawn(&path, port);
    wait_listening(([127, 0, 0, 1], metrics).into());
    (edge, path, metrics)
}

fn write_config(path: &Path, port: u16, metrics: u16, body: &str, server: &str) {
    let text = format!(
        "[server]\n{server}\n\n[[listeners]]\naddress = \"127.0.0.1:{port}\"\n\n\
         [metrics]\naddress = \"127.0.0.1:{metrics}\"\n\n{}{body}",
        sessions_section(&format!("1:{KEY_A}"))
    );
    if let Err(e) = mcp_edge::config::Config::parse(&text) {
        panic!("test config invalid: {e:?}\n{text}");
    }
    std::fs::write(path, text).unwrap();
}

fn pool(name: &str, command: &str, keys: &str) -> String {
    format!(
        "[[pools]]\nname = \"{name}\"\ncommand = {command}\nstop_grace_ms = 500\n{keys}\n\n\
         [[routes]]\npath = \"/{name}\"\npool = \"{name}\"\n\n"
    )
}

/// An `[identity]` section with API keys `k-alice` (alice) and `k-bob` (bob), and its file.
fn identity(what: &str) -> (String, PathBuf) {
    let keys = temp(what);
    let entry = |key: &str, subject: &str| {
        format!(
            "[[keys]]\nsha256 = \"{}\"\nsubject = \"{subject}\"\n",
            common::mock::sha256_hex(key.as_bytes())
        )
    };
    std::fs::write(
        &keys,
        format!("{}{}", entry("k-alice", "alice"), entry("k-bob", "bob")),
    )
    .unwrap();
    (
        format!("[identity]\napi_keys_file = \"{}\"\n\n", keys.display()),
        keys,
    )
}

/// `pool`'s route with `auth = "required"`.
fn required(pool_text: String, name: &str) -> String {
    pool_text.replace(
        &format!("pool = \"{name}\"\n"),
        &format!("pool = \"{name}\"\nauth = \"required\"\n"),
    )
}

/// The helpers' pids written so far.
fn helpers(pids: &Path) -> Vec<u32> {
    std::fs::read_to_string(pids)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// `/proc/<pid>/stat`'s fields after the command name.
fn stat(pid: u32) -> Option<Vec<String>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = text.rsplit_once(')')?;
    Some(rest.split_whitespace().map(str::to_string).collect())
}

/// Runs (a zombie is dead: only its parent's bookkeeping is left).
fn alive(pid: u32) -> bool {
    stat(pid).is_some_and(|f| f.first().map(String::as_str) != Some("Z"))
}

/// Every live process whose session is `sid`.
fn in_session(sid: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            stat(*pid).is_some_and(|f| {
                f.first().map(String::as_str) != Some("Z") && f[3] == sid.to_string()
            })
        })
        .collect()
}

fn wait_gone(pids: &[u32], what: &str) {
    wait_until_blocking(PATIENCE, what, || pids.iter().all(|p| !alive(*p)));
}

/// A 2026-07-28 `tools/call` (with a bearer credential when `who` is given).
async fn call(url: &str, who: Option<&str>, tool: &str, args: Value) -> (u16, Value) {
    let body = modern_body(
        json!(1),
        "tools/call",
        json!({"name": tool, "arguments": args}),
    );
    let mut rb = modern_request(&client(), url, &body);
    if let Some(who) = who {
        rb = rb.bearer_auth(who);
    }
    let r = rb.send().await.unwrap();
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

fn text_of(v: &Value) -> String {
    v["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

async fn pid_of(url: &str, who: Option<&str>) -> u32 {
    let (status, v) = call(url, who, "pid", json!({})).await;
    assert_eq!(status, 200, "{v}");
    text_of(&v).parse().unwrap_or_else(|_| panic!("a pid: {v}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_helper_that_ignores_sigterm_goes_with_its_server_on_every_path() {
    let (killed, reaped, dropped, ended, drained) = (
        temp("killed"),
        temp("reaped"),
        temp("dropped"),
        temp("ended"),
        temp("drained"),
    );
    let (identity, keys) = identity("pkeys");
    let body = format!(
        "{identity}{}{}{}{}{}",
        pool("killed", &with_helper(&killed, "k"), ""),
        required(
            pool(
                "reaped",
                &with_helper(&reaped, "r"),
                "isolation = \"per_principal\"\nidle_ms = 300",
            ),
            "reaped"
        ),
        pool("dropped", &with_helper(&dropped, "d"), ""),
        pool(
            "ended",
            &with_helper(&ended, "e"),
            "isolation = \"per_session\""
        ),
        pool("drained", &with_helper(&drained, "x"), ""),
    );
    let (edge, path, metrics) = edge(
        &body,
        "grace_period_seconds = 1\ngraceful_shutdown_timeout_seconds = 1",
    );
    let base = format!("http://127.0.0.1:{}", edge.port);
    wait_until(PATIENCE, "the pools are ready", async || {
        let url = format!("http://127.0.0.1:{metrics}/readyz");
        client()
            .get(url)
            .send()
            .await
            .is_ok_and(|r| r.status() == 200)
    })
    .await;

    // The server killed outright: what it started goes too.
    let server = pid_of(&format!("{base}/killed"), None).await;
    let sid = stat(server).unwrap()[3].parse::<u32>().unwrap();
    let helper = helpers(&killed)[0];
    assert!(alive(helper));
    let _ = std::process::Command::new("kill")
        .args(["-9", &server.to_string()])
        .status();
    wait_gone(&[helper], "the killed server's helper gone");
    assert!(in_session(sid).is_empty(), "nothing of its session is left");

    // An idle on-demand process reaped.
    // (The pool's probe start, which tells readiness, wrote a helper first.)
    let server = pid_of(&format!("{base}/reaped"), Some("k-alice")).await;
    let helper = *helpers(&reaped).last().unwrap();
    wait_gone(&[server, helper], "the idle process and its helper reaped");

    // A session's own process ended with the session (the pool's shared process, which
    // serves 2026-07-28 traffic, wrote a helper first).
    let before = helpers(&ended).len();
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"}}});
    let r = legacy_request(&client(), &format!("{base}/ended"), None, &init)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let session = r.headers()["mcp-session-id"].to_str().unwrap().to_string();
    wait_until(
        PATIENCE,
        "the session's process started its helper",
        async || helpers(&ended).len() > before,
    )
    .await;
    let helper = *helpers(&ended).last().unwrap();
    let r = client()
        .delete(format!("{base}/ended"))
        .header("mcp-session-id", &session)
        .header("mcp-protocol-version", "2025-11-25")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    wait_gone(&[helper], "the ended session's helper gone");

    // A pool dropped by a reload.
    let _ = pid_of(&format!("{base}/dropped"), None).await;
    let helper = helpers(&dropped)[0];
    let without = body.replace(&pool("dropped", &with_helper(&dropped, "d"), ""), "");
    write_config(
        &path,
        edge.port,
        metrics,
        &without,
        "grace_period_seconds = 1\ngraceful_shutdown_timeout_seconds = 1",
    );
    edge.signal("-HUP");
    wait_gone(&[helper], "the dropped pool's helper gone");

    // The edge drained on SIGTERM: it exits once its processes are gone, within its grace.
    let server = pid_of(&format!("{base}/drained"), None).await;
    let sid = stat(server).unwrap()[3].parse::<u32>().unwrap();
    let helper = helpers(&drained)[0];
    let mut edge = edge;
    edge.signal("-TERM");
    wait_until_blocking(PATIENCE, "the edge exits", || {
        edge.child.try_wait().ok().flatten().is_some()
    });
    assert!(!alive(helper), "the helper went before the edge exited");
    assert!(
        in_session(sid).is_empty(),
        "nothing of the server's session is left"
    );
    let log = edge.log_text();
    let needed = format!("stdio pool drained: process {server} and what it started did not stop within 500 ms of SIGTERM; SIGKILL");
    assert!(log.contains(&needed), "the helper needed SIGKILL:\n{log}");
    for f in [&killed, &reaped, &dropped, &ended, &drained, &path, &keys] {
        let _ = std::fs::remove_file(f);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_server_is_noticed_its_callers_answered_and_it_is_restarted() {
    let ts = format!(
        r#"["node", "{}", "--mode", "stdio", "--instance", "h"]"#,
        dir().join("ts-server.mjs").display()
    );
    let liveness = "liveness_interval_ms = 300\nliveness_timeout_ms = 2000";
    let body = format!(
        "{}{}",
        pool("frozen", &ts, liveness),
        pool("muted", &ts, liveness)
    );
    let (edge, _path, metrics) = edge(&body, "");
    let base = format!("http://127.0.0.1:{}", edge.port);
    for (route, tool) in [("frozen", "freeze"), ("muted", "mute")] {
        let url = format!("{base}/{route}");
        let before = pid_of(&url, None).await;
        // The call that hangs the server is answered with an error, long before
        // upstream_read_ms (60 s): the client's own deadline says so.
        let c = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(15))
            .build()
            .unwrap();
        let body = modern_body(
            json!(2),
            "tools/call",
            json!({"name": tool, "arguments": {}}),
        );
        let r = modern_request(&c, &url, &body).send().await.unwrap();
        let answer: Value = serde_json::from_str(&r.text().await.unwrap()).unwrap_or(Value::Null);
        if tool == "freeze" {
            assert!(
                answer["error"]["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("not answer")),
                "{route}: {answer}"
            );
        }
        // Then a new process serves.
        let mut after = before;
        wait_until(PATIENCE, "a new process serves", async || {
            let (status, v) = call(&url, None, "pid", json!({})).await;
            after = text_of(&v).parse().unwrap_or(before);
            status == 200 && after != before
        })
        .await;
        assert!(!alive(before), "{route}: the hung process was stopped");
    }
    let hung = "mcp_edge_stdio_stops_total{how=\"hung\",pool=\"frozen\"}";
    assert!(
        metric_at(metrics, hung).await >= 1.0,
        "{}",
        scrape_at(metrics).await
    );
    let log = edge.log_text();
    assert!(log.contains("did not answer a ping"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_over_its_memory_limit_is_restarted_and_the_others_are_not() {
    let (identity, keys) = identity("keys");
    let ts = format!(
        r#"["node", "{}", "--mode", "stdio", "--instance", "m"]"#,
        dir().join("ts-server.mjs").display()
    );
    let body = format!(
        "{identity}{}",
        required(
            pool(
                "mem",
                &ts,
                "isolation = \"per_principal\"\nmemory_limit_bytes = 268435456\nliveness_interval_ms = 200"
            ),
            "mem"
        )
    );
    let (edge, _path, metrics) = edge(&body, "");
    let url = format!("http://127.0.0.1:{}/mem", edge.port);
    let alice = pid_of(&url, Some("k-alice")).await;
    let bob = pid_of(&url, Some("k-bob")).await;
    assert_ne!(alice, bob);
    let (status, v) = call(&url, Some("k-alice"), "hog", json!({"mb": 400})).await;
    assert!(status == 200 || status >= 500, "{v}");
    wait_until_blocking(PATIENCE, "alice's process stopped", || !alive(alice));
    let again = pid_of(&url, Some("k-alice")).await;
    assert_ne!(again, alice, "alice's next call gets a new process");
    assert_eq!(
        pid_of(&url, Some("k-bob")).await,
        bob,
        "bob's process is untouched"
    );
    let limit = "mcp_edge_stdio_stops_total{how=\"memory_limit\",pool=\"mem\"}";
    assert_eq!(
        metric_at(metrics, limit).await,
        1.0,
        "{}",
        scrape_at(metrics).await
    );
    assert!(
        edge.log_text().contains("over its memory limit"),
        "{}",
        edge.log_text()
    );
    let _ = std::fs::remove_file(keys);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stderr_flood_does_not_grow_the_log_past_its_bound() {
    let ts = format!(
        r#"["node", "{}", "--mode", "stdio", "--instance", "s"]"#,
        dir().join("ts-server.mjs").display()
    );
    let body = pool("loud", &ts, "stderr_bytes_per_second = 4096");
    let (edge, _path, metrics) = edge(&body, "");
    let url = format!("http://127.0.0.1:{}/loud", edge.port);
    let before = edge.log_text().len();
    let started = std::time::Instant::now();
    // 2 MiB of stderr in one call.
    let (status, v) = call(&url, None, "shout", json!({"kb": 2048})).await;
    assert_eq!(status, 200, "{v}");
    let dropped = "mcp_edge_stdio_stderr_dropped_bytes_total{pool=\"loud\"}";
    wait_until(PATIENCE, "the dropped bytes counted", async || {
        metric_at(metrics, dropped).await > 1_000_000.0
    })
    .await;
    let logged = edge.log_text().len() - before;
    let seconds = started.elapsed().as_secs_f64().ceil() + 1.0;
    // The bound per second, each line with its prefix and the log's own line head.
    assert!(
        (logged as f64) < seconds * 4096.0 * 1.5 + 4096.0,
        "{logged} bytes logged in {seconds} s"
    );
    assert!(edge.log_text().contains("stderr bytes dropped"), "said so");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reference_memory_server_keeps_two_principals_graphs_apart() {
    let (identity, keys) = identity("mkeys");
    let scratch = temp("scratch");
    let memory = format!(
        r#"["node", "{}"]"#,
        dir()
            .join("node_modules/@modelcontextprotocol/server-memory/dist/index.js")
            .display()
    );
    let body = format!(
        "{identity}{}",
        required(
            pool(
                "graph",
                &memory,
                &format!(
                    "isolation = \"per_principal\"\nscratch_dir = \"{}\"\nidle_ms = 15000\n\
                     env = {{ MEMORY_FILE_PATH = \"{{scratch}}/memory.jsonl\" }}",
                    scratch.display()
                )
            ),
            "graph"
        )
    );
    let (edge, _path, _metrics) = edge(
        &body,
        "grace_period_seconds = 1\ngraceful_shutdown_timeout_seconds = 1",
    );
    let url = format!("http://127.0.0.1:{}/graph", edge.port);
    let entity = json!({"entities": [{"name": "alice-secret", "entityType": "note", "observations": ["x"]}]});
    let (status, v) = call(&url, Some("k-alice"), "create_entities", entity).await;
    assert_eq!(status, 200, "{v}");
    let (_, bobs) = call(&url, Some("k-bob"), "read_graph", json!({})).await;
    assert!(
        !bobs.to_string().contains("alice-secret"),
        "bob sees alice's graph: {bobs}"
    );
    let (_, alices) = call(&url, Some("k-alice"), "read_graph", json!({})).await;
    assert!(alices.to_string().contains("alice-secret"), "{alices}");
    // Each has a directory of its own while its process runs (the readiness probe's went
    // with the probe); stopped, it is removed (`keep_scratch` keeps it for the principal's
    // next process).
    let callers = || -> Vec<String> {
        std::fs::read_dir(scratch.join("graph"))
            .map(|d| {
                d.filter_map(|e| e.ok()?.file_name().into_string().ok())
                    .filter(|n| !n.starts_with("probe"))
                    .collect()
            })
            .unwrap_or_default()
    };
    assert_eq!(callers().len(), 2, "{:?}", callers());
    let mut edge = edge;
    edge.signal("-TERM");
    wait_until_blocking(PATIENCE, "the edge exits", || {
        edge.child.try_wait().ok().flatten().is_some()
    });
    assert!(callers().is_empty(), "removed: {:?}", callers());
    drop(edge);
    let _ = std::fs::remove_file(keys);
    let _ = std::fs::remove_dir_all(scratch);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_launcher_sets_open_files_and_cpu_time_and_a_cpu_limit_is_counted() {
    let ts = format!(
        r#"["node", "{}", "--mode", "stdio", "--instance", "c"]"#,
        dir().join("ts-server.mjs").display()
    );
    // A shell that says, on its stderr, which signals it was started with ignored.
    let sh = format!(
        r#"["sh", "-c", "grep SigIgn /proc/self/status >&2; exec node {} --mode stdio"]"#,
        dir().join("ts-server.mjs").display()
    );
    let body = format!(
        "{}{}",
        pool(
            "cpu",
            &ts,
            "open_files_limit = 256\ncpu_seconds_limit = 2\nliveness_interval_ms = 0",
        ),
        pool("signals", &sh, "")
    );
    let (edge, _path, metrics) = edge(&body, "");
    let url = format!("http://127.0.0.1:{}/cpu", edge.port);
    let pid = pid_of(&url, None).await;
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = |name: &str| {
        limits
            .lines()
            .find(|l| l.starts_with(name))
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .unwrap_or_default()
    };
    assert_eq!(line("Max open files")[3..5], ["256", "256"], "{limits}");
    assert_eq!(line("Max cpu time")[3..5], ["2", "3"], "{limits}");
    // A tool that spins: the kernel ends the process at its CPU limit.
    let (status, v) = call(&url, None, "freeze", json!({})).await;
    assert_eq!(status, 502, "{v}");
    assert_eq!(
        v["error"]["message"],
        mcp_edge::error::STDIO_EXITED,
        "the caller learns the process ended"
    );
    let counted = "mcp_edge_stdio_stops_total{how=\"cpu_limit\",pool=\"cpu\"}";
    wait_until(PATIENCE, "the CPU limit counted", async || {
        metric_at(metrics, counted).await == 1.0
    })
    .await;
    assert!(edge.log_text().contains("cpu_seconds_limit"));
    assert_ne!(pid_of(&url, None).await, pid, "a new process serves");

    // The edge ignores SIGPIPE (Rust's runtime does); its servers must not inherit that.
    let _ = pid_of(&format!("http://127.0.0.1:{}/signals", edge.port), None).await;
    let log = edge.log_text();
    let ignored = log
        .lines()
        .find_map(|l| l.split("SigIgn:").nth(1))
        .map(str::trim)
        .and_then(|hex| u64::from_str_radix(hex, 16).ok())
        .unwrap_or_else(|| panic!("the shell's SigIgn:\n{log}"));
    assert_eq!(
        ignored & (1 << 12),
        0,
        "SIGPIPE (13) is not ignored: {ignored:x}"
    );
}
