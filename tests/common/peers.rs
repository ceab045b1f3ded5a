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
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(p) = line.strip_prefix("LISTENING ") {
                    let _ = tx.send(p.trim().parse::<u16>().ok());
                }
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
        }
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
    let mut c = node();
    c.args([
        "ts-server.mjs",
        "--mode",
        mode,
        "--instance",
        instance,
        "--port",
        "0",
    ]);
    Peer::spawn(c, instance)
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

/// `ts-client.mjs --url <url> <args…>`.
pub fn ts_client(url: &str, args: &[&str]) -> Value {
    let mut c = node();
    c.args(["ts-client.mjs", "--url", url]).args(args);
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
