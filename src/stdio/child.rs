//! One server's operating-system side: started through the launcher as the leader of a
//! session of its own ([`super::launcher`]; a process group without it), watched until it
//! exits without being reaped, stopped whole, reaped once nothing of its session is left.
//!
//! - **Stopped whole.** SIGTERM to the server and to every process of its session (or
//!   group), then SIGKILL to whatever of them is still running after the grace, whether or
//!   not the server itself has gone. A server that ends on its own is stopped the same way:
//!   what it left behind goes with it.
//! - **No signal to a reused id.** The server is not reaped while anything of its session
//!   runs: its id, which is the session's, stays taken, so no other process can come to lead
//!   a session of that id. Every other member is opened as a pidfd, checked to still be in
//!   the session, and signalled through the pidfd ([`super::tree`]).
//! - **How it ended** is counted (`mcp_edge_stdio_stops_total{pool,how}`), and what its
//!   session holds is in `mcp_edge_stdio_tree_processes{pool}` until it is gone.

use std::collections::BTreeMap;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use nix::sys::signal::Signal;
use tokio::io::unix::AsyncFd;
use tokio::sync::watch;

use super::launcher::{self, Launch};
use super::scratch::{Place, Scratch};
use super::tree::{self, Scope};
use super::Spec;
use crate::metrics::{self, StdioStop};

/// The edge's environment variables a process gets (as the MCP SDKs' stdio clients pass).
pub const PASSED_ENV: &[&str] = &[
    "HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "LANG", "LC_ALL", "TZ", "TMPDIR",
];

/// Servers started and not reaped yet: what [`reap_orphans`] leaves alone, and what
/// [`close`] stops.
static HELD: Mutex<Held> = Mutex::new(Held {
    servers: BTreeMap::new(),
    closed: false,
});

struct Held {
    servers: BTreeMap<u32, Weak<Child>>,
    /// The edge is stopping: no process starts after that.
    closed: bool,
}

fn held() -> MutexGuard<'static, Held> {
    HELD.lock().unwrap_or_else(|e| e.into_inner())
}

/// The edge is stopping: no process starts from now on; every one not reaped yet.
pub(super) fn close() -> Vec<Arc<Child>> {
    let mut held = held();
    held.closed = true;
    held.servers.values().filter_map(Weak::upgrade).collect()
}

/// The server `pid` is reaped (or about to be): it is no longer held.
pub(super) fn release(pid: u32) {
    held().servers.remove(&pid);
}

/// Reap, once a second, the zombies that are the edge's children but no server it holds:
/// the orphans a container's PID 1 inherits. Each is checked under the lock a start holds
/// while it registers its server, so a server is never taken for an orphan.
pub(super) async fn reap_orphans() {
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let zombies = tokio::task::spawn_blocking(tree::zombie_children)
            .await
            .unwrap_or_default();
        let held = held();
        for pid in zombies {
            if !held.servers.contains_key(&pid) {
                tree::reap(pid);
            }
        }
    }
}

/// Why the edge stops a process (stronger causes later: the strongest recorded is counted).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Cause {
    /// It is no longer wanted (idle, its session ended, a reload, shutdown), or it ended on
    /// its own and what it left is cleared.
    Asked,
    /// It answers nothing: it did not answer a ping.
    Hung,
    /// Its session's resident memory passed `memory_limit_bytes`.
    MemoryLimit,
}

/// What the server's own end was (its wait status, read without reaping it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exit {
    pub code: Option<i32>,
    pub signal: Option<i32>,
}

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.code, self.signal) {
            (Some(c), _) => write!(f, "exit status {c}"),
            (None, Some(s)) => match Signal::try_from(s) {
                Ok(sig) => write!(f, "killed by {sig}"),
                Err(_) => write!(f, "killed by signal {s}"),
            },
            (None, None) => write!(f, "ended"),
        }
    }
}

/// The standard streams of a started process.
pub struct Pipes {
    pub stdin: tokio::process::ChildStdin,
    pub stdout: tokio::process::ChildStdout,
    pub stderr: tokio::process::ChildStderr,
}

pub struct Child {
    pub pid: u32,
    pub scope: Scope,
    pub(super) pool: Arc<str>,
    /// The server, held open: signals and waits go through it.
    pub(super) pidfd: Option<OwnedFd>,
    /// The server exited (it is not reaped yet).
    pub(super) exit: watch::Receiver<Option<Exit>>,
    pub(super) stopping: AtomicBool,
    /// The strongest reason it was stopped for ([`Cause`] as a number): a stop counted as
    /// hung stays hung whoever asked first.
    cause: AtomicU8,
    /// The whole session is gone and the server reaped: how it ended.
    pub(super) stopped: watch::Sender<Option<StdioStop>>,
    pub(super) scratch: Option<Scratch>,
    /// What this process adds to `mcp_edge_stdio_tree_processes` now.
    pub(super) counted: AtomicI64,
}

impl std::fmt::Debug for Child {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "process {} of stdio pool {}", self.pid, self.pool)
    }
}

/// Start `spec`'s command for `place` (its scratch directory made first, the placeholders
/// of `env` and the arguments filled in).
pub fn spawn(spec: &Spec, pool: &Arc<str>, place: &Place) -> std::io::Result<(Arc<Child>, Pipes)> {
    let scratch = match &spec.scratch_dir {
        Some(dir) => Some(Scratch::create(dir, pool, &place.key, spec.keep_scratch)?),
        None => None,
    };
    let mut command = command(spec, place, scratch.as_ref())?;
    // Registered under the lock the orphan reaper takes, so it never reaps this server.
    let mut held = held();
    if held.closed {
        return Err(std::io::Error::other("the edge is stopping"));
    }
    // A std child, not tokio's: tokio reaps the children it knows of, and this one must
    // not be reaped before its session is empty.
    let mut child = command.spawn()?;
    let pid = child.id();
    let pidfd = tree::open(pid);
    let pipes = match (child.stdin.take(), child.stdout.take(), child.stderr.take()) {
        (Some(i), Some(o), Some(e)) => Pipes {
            stdin: tokio::process::ChildStdin::from_std(i)?,
            stdout: tokio::process::ChildStdout::from_std(o)?,
            stderr: tokio::process::ChildStderr::from_std(e)?,
        },
        _ => return Err(std::io::Error::other("the child's pipes are missing")),
    };
    let scope = match launcher::binary() {
        Some(_) => Scope::Session(pid),
        None => Scope::Group(pid),
    };
    let (exit_tx, exit) = watch::channel(None);
    let watched = pidfd.as_ref().and_then(|fd| fd.try_clone().ok());
    tokio::spawn(watch_exit(pid, watched, exit_tx));
    let child = Arc::new(Child {
        pid,
        scope,
        pool: pool.clone(),
        pidfd,
        exit,
        stopping: AtomicBool::new(false),
        cause: AtomicU8::new(Cause::Asked as u8),
        stopped: watch::channel(None).0,
        scratch,
        counted: AtomicI64::new(0),
    });
    held.servers.insert(pid, Arc::downgrade(&child));
    drop(held);
    child.count(1);
    Ok((child, pipes))
}

/// The process's command: through the launcher (a session of its own, the limits), else
/// in a process group of its own; only the environment it is given; pipes.
fn command(
    spec: &Spec,
    place: &Place,
    scratch: Option<&Scratch>,
) -> std::io::Result<std::process::Command> {
    let vars = place.vars(scratch);
    let program = vars.fill_all(&spec.command);
    let launch = Launch {
        open_files: spec.open_files_limit,
        cpu_seconds: spec.cpu_seconds_limit,
    };
    let mut command = match launcher::binary() {
        Some(bin) => {
            let mut c = std::process::Command::new(bin);
            c.args(launcher::args(&launch, &program));
            c
        }
        None => {
            let (first, rest) = program
                .split_first()
                .ok_or_else(|| std::io::Error::other("empty command"))?;
            let mut c = std::process::Command::new(first);
            c.args(rest);
            std::os::unix::process::CommandExt::process_group(&mut c, 0);
            c
        }
    };
    let passed = PASSED_ENV
        .iter()
        .filter_map(|k| std::env::var_os(k).map(|v| (*k, v)));
    let env = spec.env.iter().map(|(k, v)| (k.clone(), vars.fill(v)));
    command
        .env_clear()
        .envs(passed)
        .envs(env)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    if let Some(cwd) = &spec.cwd {
        command.current_dir(cwd);
    }
    Ok(command)
}

impl Child {
    /// Resolves once the server has exited (reaped or not), with how.
    pub async fn exited(&self) -> Exit {
        let mut exit = self.exit.clone();
        let Ok(e) = exit.wait_for(Option::is_some).await else {
            return Exit {
                code: None,
                signal: None,
            };
        };
        e.unwrap_or(Exit {
            code: None,
            signal: None,
        })
    }

    pub fn has_exited(&self) -> bool {
        self.exit.borrow().is_some()
    }

    /// Record why it is stopped (the strongest cause counts).
    pub fn mark(&self, cause: Cause) {
        self.cause.fetch_max(cause as u8, Ordering::SeqCst);
    }

    pub(super) fn cause(&self) -> Cause {
        match self.cause.load(Ordering::SeqCst) {
            n if n == Cause::MemoryLimit as u8 => Cause::MemoryLimit,
            n if n == Cause::Hung as u8 => Cause::Hung,
            _ => Cause::Asked,
        }
    }

    /// Its session's processes now (the gauge), from a scan.
    pub fn count(&self, running: i64) {
        self.set_count(running);
    }

    fn set_count(&self, running: i64) {
        let before = self.counted.swap(running, Ordering::Relaxed);
        if before != running {
            metrics::stdio_tree(&self.pool, running - before);
        }
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        let left = self.counted.swap(0, Ordering::Relaxed);
        if left != 0 {
            metrics::stdio_tree(&self.pool, -left);
        }
    }
}

/// The server's end, read without reaping it: from its pidfd becoming readable, else by
/// watching its `/proc` entry.
async fn watch_exit(pid: u32, pidfd: Option<OwnedFd>, tx: watch::Sender<Option<Exit>>) {
    // The deprecation is about a `T` that does not own its descriptor (I/O safety): an
    // `OwnedFd` does, and lives exactly as long as the `AsyncFd`.
    #[allow(deprecated)]
    let readable =
        pidfd.and_then(|fd| AsyncFd::with_interest(fd, tokio::io::Interest::READABLE).ok());
    match &readable {
        Some(fd) => {
            let _ = fd.readable().await;
        }
        None => {
            while !exited(pid) {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    let status = readable
        .as_ref()
        .and_then(|fd| status(fd.get_ref()))
        .unwrap_or(Exit {
            code: None,
            signal: None,
        });
    tx.send_replace(Some(status));
}

/// The exited server's status, left for the reap.
fn status(fd: &OwnedFd) -> Option<Exit> {
    use rustix::process::{waitid, WaitId, WaitIdOptions};
    let options = WaitIdOptions::EXITED | WaitIdOptions::NOWAIT | WaitIdOptions::NOHANG;
    let status = waitid(WaitId::PidFd(fd.as_fd()), options).ok()??;
    Some(Exit {
        code: status.exit_status(),
        signal: status.terminating_signal(),
    })
}

/// Exited or gone: a zombie, or no entry at all.
pub(super) fn exited(pid: u32) -> bool {
    tree::stat(pid).is_none_or(|s| s.zombie)
}
