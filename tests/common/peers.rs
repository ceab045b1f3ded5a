//! Official MCP SDK peers (tests/peers): servers spawned as child processes on ephemeral
//! ports, and clients run to completion. `scripts/setup.sh` installs them.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

pub fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/peers")
}

fn python() -> PathBuf {
    let p = dir().join(".venv/bin/python");
    assert!(
        p.exists(),
        "Python peers missing: run `bash scripts/setup.sh` ({} not found)",
        p.display()
    );
    p
}

fn node() -> Command {
    assert!(
        dir().join("node_modules").exists(),
        "JS peers missing: run `bash scripts/setup.sh`"
    );
    let mut c = Command::new("node");
    c.current_dir(dir());
    c
}

/// A running SDK server; killed on drop.
pub struct Peer {
    child: Child,
    pub addr: SocketAddr,
    pub instance: String,
    stderr: Arc<Mutex<Vec<String>>>,
    stdout: Arc<Mutex<Vec<String>>>,
}

impl Peer {
    fn spawn(mut cmd: Command, instance: &str) -> Peer {
        cmd.stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .stdin(Stdio::null());
        let mut child = cmd.spawn().expect("spawn peer");
        let stdout = child.stdout.take().expect("stdout");
        let stderr_pipe = child.stderr.take().expect("stderr");
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let sink = stderr.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr_pipe).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        let (tx, rx) = mpsc::channel();
        let out = Arc::new(Mutex::new(Vec::new()));
        let out_sink = out.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                // SDK servers say LISTENING, the authorization server READY.
                let port = line
                    .strip_prefix("LISTENING ")
                    .or_else(|| line.strip_prefix("READY "));
                if let Some(p) = port {
                    let _ = tx.send(p.trim().parse::<u16>().ok());
                }
                out_sink.lock().unwrap().push(line);
            }
        });
        let port = match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(Some(p)) => p,
            _ => {
                let _ = child.kill();
                panic!(
                    "peer {instance} did not start; stderr: {:?}",
                    stderr.lock().unwrap()
                );
            }
        };
        Peer {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            instance: instance.into(),
            stderr,
            stdout: out,
        }
    }

    /// What a TS server (`ts-server.mjs`) recorded of the POST whose `x-test-mark` header is
    /// `mark` (its `GET /__seen` entry: headers, identity assertion, bearer token).
    pub async fn seen_marked(&self, mark: &str) -> Value {
        let all: Value = reqwest::Client::builder()
            .no_proxy()
            .build()
            .unwrap()
            .get(format!("http://{}/__seen", self.addr))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        all.as_array()
            .unwrap()
            .iter()
            .find(|e| e["headers"]["x-test-mark"] == mark)
            .cloned()
            .unwrap_or_else(|| panic!("the member saw no request marked {mark}: {all}"))
    }

    /// stdout lines that start with `prefix`.
    pub fn stdout_lines(&self, prefix: &str) -> Vec<String> {
        self.stdout
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.starts_with(prefix))
            .cloned()
            .collect()
    }

    /// HTTP requests this server has received so far.
    pub fn requests(&self) -> usize {
        self.stderr
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.starts_with("REQ "))
            .count()
    }

    /// Requests with this HTTP method the server has received so far.
    pub fn requests_of(&self, method: &str) -> usize {
        self.stderr_lines(&format!("REQ {method} "))
    }

    /// stderr lines that start with `prefix`.
    pub fn stderr_lines(&self, prefix: &str) -> usize {
        self.stderr
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.starts_with(prefix))
            .count()
    }

    pub fn stderr_has(&self, prefix: &str) -> bool {
        self.stderr
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.starts_with(prefix))
    }

    /// Wait until a stderr line starts with `prefix`; panic naming `what` after `within`.
    pub fn wait_stderr(&self, prefix: &str, within: Duration, what: &str) {
        super::wait_until_blocking(within, what, || self.stderr_has(prefix));
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `ts-server.mjs --mode <mode>` (modern | dual | legacy-session | legacy-sse).
pub fn ts_server(mode: &str, instance: &str) -> Peer {
    ts_server_with(mode, instance, &[])
}

/// [`ts_server`] with more arguments (`--tls-cert F --tls-key F`: HTTPS).
pub fn ts_server_with(mode: &str, instance: &str, extra: &[&str]) -> Peer {
    let mut c = node();
    c.args([
        "ts-server.mjs",
        "--mode",
        mode,
        "--instance",
        instance,
        "--port",
        "0",
    ])
    .args(extra);
    Peer::spawn(c, instance)
}

/// [`ts_server`] traced with the official OpenTelemetry JS SDK (`otel.cjs`): a SERVER span
/// per HTTP request, exported to `traces` (an OTLP/HTTP traces URL) as it ends.
pub fn ts_server_traced(mode: &str, instance: &str, traces: &str) -> Peer {
    let mut c = node();
    c.args(["--require", "./otel.cjs", "ts-server.mjs", "--mode", mode])
        .args(["--instance", instance, "--port", "0"])
        .env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", traces)
        .env("OTEL_SERVICE_NAME", format!("ts-peer-{instance}"));
    Peer::spawn(c, instance)
}

/// `otlp-receiver.py` (an OTLP/HTTP collector decoding with the official protobuf
/// definitions), with its args (`--mode refuse`, `--stall SECONDS`).
pub fn otlp_receiver(args: &[&str]) -> Peer {
    let mut c = Command::new(python());
    c.current_dir(dir()).arg("otlp-receiver.py").args(args);
    Peer::spawn(c, "otlp-receiver")
}

/// `faulty-server.py --defect <defect>`: a 2026-07-28 server right in everything the doctor
/// checks but one (`none`: in everything).
pub fn faulty_server(defect: &str) -> Peer {
    let mut c = Command::new(python());
    c.current_dir(dir())
        .args(["faulty-server.py", "--defect", defect, "--port", "0"]);
    Peer::spawn(c, &format!("faulty-{defect}"))
}

/// `py-server.py` with extra args (e.g. `--transport streamable-http --stateless`).
pub fn py_server(args: &[&str], instance: &str) -> Peer {
    let mut c = Command::new(python());
    c.current_dir(dir()).arg("py-server.py").args(args).args([
        "--instance",
        instance,
        "--port",
        "0",
    ]);
    Peer::spawn(c, instance)
}

/// Run a client script to completion; its one JSON line.
fn run(mut cmd: Command) -> Value {
    let out = cmd.output().expect("run client");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .unwrap_or("");
    serde_json::from_str(line).unwrap_or_else(|_| {
        panic!(
            "client printed no JSON: stdout={stdout} stderr={}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// `authz-server.mjs <args…>`: an `oidc-provider` authorization server issuing
/// client-credentials JWTs (its stdout has a `{"token":…}` line per token it issued).
pub fn authz_server(args: &[&str]) -> Peer {
    let mut c = node();
    c.arg("authz-server.mjs").args(args);
    Peer::spawn(c, "authz")
}

/// `step-up-client.mjs --url <url> <args…>`: the official client with a client-credentials
/// provider, stepping up on 403 `insufficient_scope`.
pub fn step_up_client(url: &str, args: &[&str]) -> Value {
    let mut c = node();
    c.args(["step-up-client.mjs", "--url", url]).args(args);
    run(c)
}

/// `ts-client.mjs --url <url> <args…>`.
pub fn ts_client(url: &str, args: &[&str]) -> Value {
    ts_client_env(url, args, &[])
}

/// [`ts_client`] with environment variables (`NODE_EXTRA_CA_CERTS` for https).
pub fn ts_client_env(url: &str, args: &[&str], env: &[(&str, &str)]) -> Value {
    let mut c = node();
    c.args(["ts-client.mjs", "--url", url])
        .args(args)
        .envs(env.iter().copied());
    run(c)
}

/// `py-client.py --url <url> <args…>`.
pub fn py_client(url: &str, args: &[&str]) -> Value {
    let mut c = Command::new(python());
    c.current_dir(dir())
        .args(["py-client.py", "--url", url])
        .args(args);
    run(c)
}

/// Origin A for browser tests: `browser/serve.py` serves `page.html` and writes the page's
/// report to `report` (see tests/peers/browser/README.md).
pub fn browser_origin(report: &std::path::Path) -> Peer {
    let mut c = Command::new("python3");
    c.current_dir(dir().join("browser"))
        .arg("serve.py")
        .args(["--port", "0", "--report-file"])
        .arg(report);
    Peer::spawn(c, "browser-origin")
}

/// Load `url` in headless Chromium (Debian's `chromium`, installed by `scripts/setup.sh`)
/// and let it run until the page is done (`--virtual-time-budget`), at most `within`.
pub fn chromium(url: &str, within: Duration) {
    let profile = std::env::temp_dir().join(format!(
        "mcp-edge-chromium-{}-{}",
        std::process::id(),
        url.len()
    ));
    let mut child = Command::new("chromium")
        .args([
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--virtual-time-budget=15000",
            "--dump-dom",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(url)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromium is missing: run `bash scripts/setup.sh` (Debian package chromium)");
    let deadline = std::time::Instant::now() + within;
    loop {
        if child.try_wait().ok().flatten().is_some() {
            break;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = std::fs::remove_dir_all(&profile);
}
