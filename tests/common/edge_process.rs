//! The `mcp-edge` binary as a child process, as operators run it: its log, its signals, its
//! memory.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

use super::{free_port, wait_listening};

pub struct Proc {
    pub child: Child,
    pub port: u16,
    log: Arc<Mutex<Vec<String>>>,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Proc {
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }
    pub fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill {sig}");
    }
    pub fn log_text(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }
}

/// The edge's resident memory now and at its peak so far, in bytes (`/proc/<pid>/status`).
pub fn memory(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .unwrap_or_else(|| panic!("{key} missing from /proc/{pid}/status"))
    };
    (kib("VmRSS:") * 1024, kib("VmHWM:") * 1024)
}

/// Start the binary on `path`; `env` adds variables (an allocator setting, say).
pub fn spawn(path: &std::path::Path, port: u16) -> Proc {
    spawn_with(path, port, &[])
}

pub fn spawn_with(path: &std::path::Path, port: u16, env: &[(&str, &str)]) -> Proc {
    spawn_at(path, SocketAddr::from(([127, 0, 0, 1], port)), env)
}

/// As [`spawn_with`], for an edge whose first listener is `listening` (another loopback
/// address: one replica of several).
pub fn spawn_at(path: &std::path::Path, listening: SocketAddr, env: &[(&str, &str)]) -> Proc {
    let port = listening.port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_mcp-edge"))
        .args(["--config", &path.display().to_string()])
        .env("RUST_LOG", "info")
        .envs(env.iter().copied())
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
    wait_listening(listening);
    Proc { child, port, log }
}

pub fn temp_config() -> std::path::PathBuf {
    std::env::temp_dir().join(format!(
        "mcp-edge-proc-{}-{}.toml",
        std::process::id(),
        free_port()
    ))
}
