//! The `mcp-edge` binary as operators run it: SIGHUP reloads, SIGTERM drains (open SSE
//! streams end cleanly within the grace period), and the access log never carries secrets.

mod common;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::mock::{Behavior, Mock};
use common::*;
use futures_util::StreamExt;
use serde_json::json;

struct Proc {
    child: Child,
    port: u16,
    log: Arc<Mutex<Vec<String>>>,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Proc {
    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }
    fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill {sig}");
    }
    fn log_text(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }
}

fn config(path: &std::path::Path, port: u16, member: SocketAddr, extra: &str) {
    let text = format!(
        "[server]\nthreads = 1\ngrace_period_seconds = 2\ngraceful_shutdown_timeout_seconds = 1\n\n[[listeners]]\naddress = \"127.0.0.1:{port}\"\n\n{}{extra}{}",
        sessions_section(&format!("1:{KEY_A}")),
        pool_and_route(&[member], "")
    );
    std::fs::write(path, text).unwrap();
}

fn spawn(path: &std::path::Path, port: u16) -> Proc {
    let mut child = Command::new(env!("CARGO_BIN_EXE_mcp-edge"))
        .args(["--config", &path.display().to_string()])
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    let sink = log.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            sink.lock().unwrap().push(line);
        }
    });
    wait_listening(SocketAddr::from(([127, 0, 0, 1], port)));
    Proc { child, port, log }
}

fn temp_config() -> std::path::PathBuf {
    std::env::temp_dir().join(format!(
        "mcp-edge-proc-{}-{}.toml",
        std::process::id(),
        free_port()
    ))
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
    assert_eq!(a.count(), 1);

    config(&path, port, b.addr, "");
    edge.signal("-HUP");
    let deadline = Instant::now() + Duration::from_secs(5);
    while b.count() == 0 {
        assert!(
            Instant::now() < deadline,
            "SIGHUP never moved traffic to the new member"
        );
        assert_eq!(call().await.unwrap().status(), 200);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    std::fs::write(&path, "[[listeners]]\nbogus = 1\n").unwrap();
    edge.signal("-HUP");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = b.count();
    assert_eq!(
        call().await.unwrap().status(),
        200,
        "still serving after a bad reload"
    );
    assert_eq!(b.count(), before + 1);
    let log = edge.log_text();
    assert!(
        log.contains("config reload") && log.contains("bogus"),
        "the failure and its reason are logged:\n{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_ends_an_open_sse_stream_cleanly_within_the_grace_period() {
    let ack = "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/subscriptions/acknowledged\",\"params\":{}}\n\n".to_string();
    let mock = Mock::start(Behavior::Sse {
        frames: vec![(Duration::ZERO, ack.clone())],
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
        let rest = tokio::time::timeout(Duration::from_secs(3), async {
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
        started.elapsed() < Duration::from_secs(2),
        "streams should end at the start of the drain"
    );
    // New connections are refused while draining, and the process exits within grace + timeout.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
        "still accepting after SIGTERM"
    );
    let deadline = Instant::now() + Duration::from_secs(6);
    loop {
        if let Some(status) = edge.child.try_wait().unwrap() {
            assert!(status.success(), "exit status {status}");
            break;
        }
        assert!(Instant::now() < deadline, "did not exit after SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    }
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
            issued_at: mcp_edge::session::affinity::now_secs(),
            credential: mcp_edge::session::credential_digest(Some(secret.as_bytes())),
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
        .header("authorization", secret)
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);

    tokio::time::sleep(Duration::from_millis(300)).await;
    let log = edge.log_text();
    let lines: Vec<serde_json::Value> = log
        .lines()
        .filter_map(|l| l.split_once(" access] ").map(|(_, json)| json))
        .map(|j| serde_json::from_str(j).unwrap_or_else(|e| panic!("not JSON ({e}): {j}")))
        .collect();
    assert_eq!(lines.len(), 3, "one line per request:\n{log}");
    assert_eq!(lines[0]["method"], "tools/call");
    assert_eq!(lines[0]["name"], "echo");
    assert_eq!(lines[0]["status"], 200);
    assert_eq!(lines[0]["member"], mock.addr.to_string());
    assert_eq!(lines[1]["era"], "legacy");
    assert_eq!(lines[2]["error"], "header_mismatch_name");
    for leaked in [
        "s3cr3t-credential-value",
        token.as_str(),
        upstream_sid,
        "private-argument",
    ] {
        assert!(!log.contains(leaked), "the log carries {leaked}:\n{log}");
    }
}
