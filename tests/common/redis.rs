//! A real Redis (Debian's `redis-server`, installed by scripts/setup.sh) on a port of its own,
//! for the fleet-wide rate limits: started, killed, restarted on the same port, stalled
//! (SIGSTOP: connections are accepted by the kernel, nothing answers) and resumed.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use super::{free_port, wait_listening};

pub struct Redis {
    child: Option<Child>,
    pub port: u16,
    args: Vec<String>,
    /// `rediss://` (TLS) rather than `redis://`.
    tls: bool,
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.resume();
        self.kill();
    }
}

impl Redis {
    /// Plain TCP, no password.
    pub fn start() -> Redis {
        Redis::with(Vec::new(), false)
    }

    /// Plain TCP, with a password.
    pub fn start_with_password(password: &str) -> Redis {
        Redis::with(vec!["--requirepass".into(), password.into()], false)
    }

    /// `redis-cli` against this server, authenticated with `password`: its output.
    pub fn cli(&self, password: &str, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args([
                "-p",
                &self.port.to_string(),
                "--no-auth-warning",
                "-a",
                password,
            ])
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("redis-cli: {e} (scripts/setup.sh installs it)"));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// TLS only (`cert`, `key` in PEM; clients not asked for certificates), with a password.
    pub fn start_tls(cert: &std::path::Path, key: &std::path::Path, password: &str) -> Redis {
        let args = [
            "--tls-cert-file",
            &cert.display().to_string(),
            "--tls-key-file",
            &key.display().to_string(),
            "--tls-auth-clients",
            "no",
            "--requirepass",
            password,
        ]
        .map(str::to_string)
        .to_vec();
        Redis::with(args, true)
    }

    fn with(extra: Vec<String>, tls: bool) -> Redis {
        let port = free_port();
        let listen = if tls { "--tls-port" } else { "--port" };
        let mut args = vec![
            listen.to_string(),
            port.to_string(),
            "--bind".into(),
            "127.0.0.1".into(),
            "--save".into(),
            String::new(),
            "--appendonly".into(),
            "no".into(),
            "--dir".into(),
            std::env::temp_dir().display().to_string(),
        ];
        if tls {
            args.extend(["--port".to_string(), "0".to_string()]);
        }
        args.extend(extra);
        let mut redis = Redis {
            child: None,
            port,
            args,
            tls,
        };
        redis.restart();
        redis
    }

    pub fn url(&self) -> String {
        let scheme = if self.tls { "rediss" } else { "redis" };
        format!("{scheme}://127.0.0.1:{}/0", self.port)
    }

    /// Killed outright (SIGKILL).
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Started again on the same port (empty: every bucket full).
    pub fn restart(&mut self) {
        self.kill();
        let child = Command::new(redis_server())
            .args(&self.args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("redis-server: {e} (scripts/setup.sh installs it)"));
        self.child = Some(child);
        wait_listening(SocketAddr::from(([127, 0, 0, 1], self.port)));
    }

    /// Holds every reply (SIGSTOP), until [`Redis::resume`].
    pub fn stall(&self) {
        self.send("-STOP");
    }

    pub fn resume(&self) {
        self.send("-CONT");
    }

    fn send(&self, sig: &str) {
        if let Some(c) = &self.child {
            let _ = Command::new("kill")
                .args([sig, &c.id().to_string()])
                .status();
        }
    }
}

fn redis_server() -> PathBuf {
    ["/usr/bin/redis-server", "/usr/local/bin/redis-server"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .unwrap_or_else(|| PathBuf::from("redis-server"))
}
