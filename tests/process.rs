//! The `mcp-edge` binary as operators run it: SIGHUP reloads, SIGTERM drains (open SSE
//! streams end cleanly within the grace period), and the access log never carries secrets.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::edge_process::{spawn, temp_config};
use common::mock::{Behavior, Mock, Pace};
use common::*;
use futures_util::StreamExt;
use serde_json::json;

/// Seconds between SIGTERM and the end of the drain; long enough that "at the start of the
/// drain" and "at its end" stay apart on a loaded machine.
const GRACE_SECONDS: u64 = 4;

fn config(path: &std::path::Path, port: u16, member: SocketAddr, extra: &str) {
    // No active health checks: every connection the member sees is a request's.
    let text = format!(
        "[server]\nthreads = 1\ngrace_period_seconds = {GRACE_SECONDS}\ngraceful_shutdown_timeout_seconds = 1\n\n[[listeners]]\naddress = \"127.0.0.1:{port}\"\n\n{}{extra}{}",
        sessions_section(&format!("1:{KEY_A}")),
        unchecked_pool_and_route(&[member], "")
    );
    std::fs::write(path, text).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_and_a_bad_file_keeps_the_running_config() {
    let (a, b) = (
        Mock::start(Behavior::Json).await,
        Mock::start(Behavior::Json).await,
    );
    let (path, port) = (temp_config(), free_port());
    config(&path, port, a.addr, "");
    let edge = spawn(&path, port);
    let c = client();
    let call = || {
        modern_request(
            &c,
            &edge.url(),
            &modern_body(json!(1), "tools/list", json!({})),
        )
        .send()
    };
    assert_eq!(call().await.unwrap().status(), 200);
    assert_eq!(a.requests(), 1);

    config(&path, port, b.addr, "");
    edge.signal("-HUP");
    wait_until(
        PATIENCE,
        "SIGHUP to move traffic to the new member",
        async || {
            assert_eq!(call().await.unwrap().status(), 200);
            b.requests() > 0
        },
    )
    .await;
    std::fs::write(&path, "[[listeners]]\nbogus = 1\n").unwrap();
    edge.signal("-HUP");
    wait_until(
        PATIENCE,
        "the failed reload and its reason in the log",
        async || {
            let log = edge.log_text();
            log.contains("config reload") && log.contains("bogus")
        },
    )
    .await;
    let before = b.requests();
    assert_eq!(
        call().await.unwrap().status(),
        200,
        "still serving after a bad reload"
    );
    assert_eq!(b.requests(), before + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_ends_an_open_sse_stream_cleanly_within_the_grace_period() {
    let ack = "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/subscriptions/acknowledged\",\"params\":{}}\n\n".to_string();
    let mock = Mock::start(Behavior::Sse {
        frames: vec![(Pace::Now, ack.clone())],
        hold: Duration::from_secs(300),
    })
    .await;
    let (path, port) = (temp_config(), free_port());
    config(&path, port, mock.addr, "");
    let mut edge = spawn(&path, port);
    // One stream over HTTP/1.1, one over h2c.
    let mut streams = Vec::new();
    for c in [client(), h2c_client()] {
        let resp = modern_request(
            &c,
            &edge.url(),
            &modern_body(json!("l"), "subscriptions/listen", json!({})),
        )
        .send()
        .await
        .unwrap();
        let mut s = resp.bytes_stream();
        assert_eq!(
            String::from_utf8_lossy(&s.next().await.unwrap().unwrap()),
            ack
        );
        streams.push(s);
    }
    let started = Instant::now();
    edge.signal("-TERM");
    for (i, mut s) in streams.into_iter().enumerate() {
        // The stream ends, without an error and without more events, promptly.
        let rest = tokio::time::timeout(Duration::from_secs(GRACE_SECONDS + 5), async {
            let mut rest = Vec::new();
            while let Some(chunk) = s.next().await {
                rest.extend_from_slice(
                    &chunk.unwrap_or_else(|e| panic!("stream {i} broke instead of ending: {e:?}")),
                );
            }
            rest
        })
        .await
        .expect("stream still open after the grace period");
        assert!(rest.is_empty(), "stream {i}: unexpected bytes {rest:?}");
    }
    assert!(
        started.elapsed() < Duration::from_secs(GRACE_SECONDS - 1),
        "streams should end at the start of the drain, not after {:?}",
        started.elapsed()
    );
    // New connections are refused while draining (the process is still there), and the
    // process exits within grace + timeout.
    wait_until(
        PATIENCE,
        "the listener to close after SIGTERM",
        async || std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
    )
    .await;
    assert!(
        edge.child.try_wait().unwrap().is_none(),
        "the listener closed only because the process exited, after {:?}",
        started.elapsed()
    );
    let mut exit = None;
    let exit_within = Duration::from_secs(GRACE_SECONDS + 1 + 5); // grace + timeout + slack
    wait_until(exit_within, "the edge to exit after SIGTERM", async || {
        exit = edge.child.try_wait().unwrap();
        exit.is_some()
    })
    .await;
    let exit = exit.unwrap();
    assert!(exit.success(), "exit status {exit}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_access_log_is_json_and_never_carries_secrets() {
    let mock = Mock::start(Behavior::Json).await;
    let (path, port) = (temp_config(), free_port());
    config(&path, port, mock.addr, "");
    let edge = spawn(&path, port);
    let secret = "Bearer s3cr3t-credential-value";
    let upstream_sid = "upstream-session-id-4f1c";
    let ring = mcp_edge::session::KeyRing::parse(&format!("1:{KEY_A}")).unwrap();
    let token = mcp_edge::session::token::seal(
        &ring,
        &mcp_edge::session::Claims {
            pool: "main".into(),
            member: mock.addr.to_string(),
            upstream_id: upstream_sid.into(),
            issued_at: mcp_edge::session::token::now_secs(),
            credential: mcp_edge::session::credential_digest(Some(secret.as_bytes())),
            owner: None,
        },
    )
    .unwrap();
    let c = client();
    let body = modern_body(
        json!(1),
        "tools/call",
        json!({"name": "echo", "arguments": {"text": "private-argument"}}),
    );
    assert_eq!(
        modern_request(&c, &edge.url(), &body)
            .header("authorization", secret)
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    let legacy = c
        .post(edge.url())
        .header("content-type", "application/json")
        .header("authorization", secret)
        .header("mcp-session-id", &token)
        .body(json!({"jsonrpc":"2.0","id":2,"method":"tools/list"}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(legacy.status(), 200);
    let bad = modern_request(&c, &edge.url(), &body)
        .header("mcp-name", "other")
        .header("authorization", secret);
    assert_rejected(
        &mock,
        "Mcp-Name mismatch",
        &Expect::edge(400, "header_mismatch_name", -32020, json!(1)),
        exchange(bad),
    )
    .await;

    // Each line is written just after its answer.
    let access = |log: &str| -> Vec<serde_json::Value> {
        log.lines()
            .filter(|l| l.starts_with("{\"ts\":"))
            .map(|j| serde_json::from_str(j).unwrap_or_else(|e| panic!("not JSON ({e}): {j}")))
            .collect()
    };
    wait_until(PATIENCE, "three access log lines", async || {
        access(&edge.log_text()).len() >= 3
    })
    .await;
    let log = edge.log_text();
    let lines = access(&log);
    assert_eq!(lines.len(), 3, "one line per request:\n{log}");
    assert!(
        lines
            .iter()
            .all(|l| l["ts"].as_str().is_some_and(|t| t.ends_with('Z'))),
        "every line starts with its UTC timestamp:\n{log}"
    );
    assert_eq!(lines[0]["method"], "tools/call");
    assert_eq!(lines[0]["name"], "echo");
    assert_eq!(lines[0]["status"], 200);
    assert_eq!(lines[0]["member"], mock.addr.to_string());
    assert_eq!(lines[1]["era"], "legacy");
    // Every line has every documented field, and only those.
    let documented = access_log_fields();
    for line in &lines {
        let keys: std::collections::BTreeSet<String> = line
            .as_object()
            .expect("a JSON object")
            .keys()
            .cloned()
            .collect();
        assert_eq!(keys, documented, "docs/operations.md's fields: {line}");
    }
    // A refusal after the body was read says what was refused.
    assert_eq!(lines[2]["error"], "header_mismatch_name");
    assert_eq!(lines[2]["method"], "tools/call", "{log}");
    assert_eq!(lines[2]["name"], "echo", "the body's name: {log}");
    assert_eq!(lines[2]["era"], "modern", "{log}");
    for leaked in [
        "s3cr3t-credential-value",
        token.as_str(),
        upstream_sid,
        "private-argument",
    ] {
        assert!(!log.contains(leaked), "the log carries {leaked}:\n{log}");
    }
}

/// The fields `docs/operations.md` promises on every access-log line: the first column of
/// the table under `## Logs`, each backticked name.
fn access_log_fields() -> std::collections::BTreeSet<String> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/operations.md");
    let doc = std::fs::read_to_string(path).unwrap();
    let fields: std::collections::BTreeSet<String> = doc
        .lines()
        .skip_while(|l| !l.starts_with("## Logs"))
        .skip(1)
        .take_while(|l| !l.starts_with("## "))
        .filter(|l| l.starts_with("| `"))
        .filter_map(|l| l.split(" | ").next())
        .flat_map(|cell| {
            cell.split('`')
                .skip(1)
                .step_by(2)
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(fields.len() > 10, "no field table in docs/operations.md");
    fields
}

/// A sink that stops reading (a full disk, a stuck collector) costs log lines, never requests:
/// the lines that do not fit the queue are dropped and counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stuck_access_log_sink_never_blocks_requests_and_drops_are_counted() {
    let mock = Mock::start(Behavior::Json).await;
    let dir = std::env::temp_dir().join(format!("mcp-edge-fifo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fifo = dir.join("access.log");
    let _ = std::fs::remove_file(&fifo);
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success(), "mkfifo failed");
    // A reader that never reads: the pipe fills (64 KiB) and the writer blocks on it.
    let _reader = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags_nonblocking()
        .open(&fifo)
        .unwrap();
    let (path, port, admin) = (temp_config(), free_port(), free_port());
    let extra = format!(
        "[metrics]\naddress = \"127.0.0.1:{admin}\"\n\n[access_log]\noutput = \"{}\"\nqueue_lines = 4\n\n",
        fifo.display()
    );
    config(&path, port, mock.addr, &extra);
    let edge = spawn(&path, port);
    let c = client();
    let body = modern_body(json!(1), "tools/list", json!({}));
    // 2,000 lines of about 250 bytes: several times what the pipe and the queue hold.
    let mut edge = edge;
    for i in 0..2_000 {
        let sent = tokio::time::timeout(PATIENCE, modern_request(&c, &edge.url(), &body).send())
            .await
            .expect("a request waited on the access log");
        let r = match sent {
            Ok(r) => r,
            Err(e) => {
                let status = edge.child.try_wait();
                panic!(
                    "request {i}: {e}; the edge process: {status:?}; its log:\n{}",
                    edge.log_text()
                )
            }
        };
        assert_eq!(r.status(), 200);
    }
    assert_eq!(mock.requests(), 2_000);
    let dropped = || async {
        let text = c
            .get(format!("http://127.0.0.1:{admin}/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        text.lines()
            .find_map(|l| l.strip_prefix("mcp_edge_access_log_dropped_total "))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // Pipe and queue hold a few hundred lines at most; well over 1,000 must be dropped (the
    // count moves in the logging phase, just after each answer: wait for it).
    let mut n = 0.0;
    let counted = poll_until(PATIENCE, async || {
        n = dropped().await;
        n > 1_000.0
    })
    .await;
    assert!(counted && n <= 2_000.0, "dropped {n} of 2000 lines");
    drop(edge);
    let _ = std::fs::remove_dir_all(&dir);
}

trait NonBlocking {
    fn custom_flags_nonblocking(&mut self) -> &mut Self;
}

impl NonBlocking for std::fs::OpenOptions {
    /// Opening a FIFO's read end without a writer would block; O_NONBLOCK does not.
    fn custom_flags_nonblocking(&mut self) -> &mut Self {
        use std::os::unix::fs::OpenOptionsExt;
        self.custom_flags(0o4000)
    }
}

/// A port already taken stops the edge with a clear error and a failure status; Pingora alone
/// would panic in the listener's thread and keep the process running with nothing listening.
#[test]
fn a_listener_that_cannot_bind_stops_the_edge_with_a_clear_error() {
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = held.local_addr().unwrap().port();
    let path = temp_config();
    config(&path, port, "127.0.0.1:9".parse().unwrap(), "");
    struct KillOnDrop(std::process::Child);
    impl Drop for KillOnDrop {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut child = KillOnDrop(
        std::process::Command::new(env!("CARGO_BIN_EXE_mcp-edge"))
            .args(["--config", &path.display().to_string()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut status = None;
    wait_until_blocking(PATIENCE, "the edge to exit without its listener", || {
        status = child.0.try_wait().unwrap();
        status.is_some()
    });
    let status = status.unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.0.stderr.take().unwrap(), &mut err).unwrap();
    assert!(!status.success(), "exit status {status}");
    assert!(
        err.contains(&format!("cannot listen on 127.0.0.1:{port}")),
        "stderr: {err}"
    );
    drop(held);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_swaps_tls_certificates_and_open_connections_keep_working() {
    use common::tls::{presented, replace_file, Pki};
    let pki = Pki::new();
    let (old, new) = (pki.issue(&["localhost"]), pki.issue(&["localhost"]));
    let (cert, key) = (pki.dir.join("tls.crt"), pki.dir.join("tls.key"));
    std::fs::copy(&old.cert, &cert).unwrap();
    std::fs::copy(&old.key, &key).unwrap();
    let mock = Mock::start(Behavior::Json).await;
    let (path, port) = (temp_config(), free_port());
    // watch_ms = 0: only SIGHUP re-reads the files.
    let text = format!(
        "[[listeners]]\naddress = \"127.0.0.1:{port}\"\n[listeners.tls]\ncertificates = [{{ cert = \"{}\", key = \"{}\" }}]\nwatch_ms = 0\n\n{}",
        cert.display(),
        key.display(),
        unchecked_pool_and_route(&[mock.addr], "versions = [\"2026-07-28\"]")
    );
    std::fs::write(&path, text).unwrap();
    let edge = spawn(&path, port);
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let url = format!("https://localhost:{port}/mcp");
    // One client keeps its (HTTP/2) connection open across the swap.
    let kept = pki.client(true);
    let call = async |c: &reqwest::Client| {
        modern_request(c, &url, &modern_body(json!(1), "tools/list", json!({})))
            .send()
            .await
            .unwrap()
            .status()
    };
    assert_eq!(call(&kept).await, 200);
    assert_eq!(presented(pki.roots(), addr, "localhost").await.0, old.der);
    replace_file(&key, &std::fs::read(&new.key).unwrap());
    replace_file(&cert, &std::fs::read(&new.cert).unwrap());
    edge.signal("-HUP");
    wait_until(
        PATIENCE,
        "SIGHUP to serve the new certificate",
        async || presented(pki.roots(), addr, "localhost").await.0 == new.der,
    )
    .await;
    assert_eq!(
        call(&kept).await,
        200,
        "the connection opened before the swap"
    );
    assert_eq!(call(&pki.client(false)).await, 200, "a new connection");
    assert!(edge.log_text().contains("TLS certificates reloaded"));
}
