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

use std::collections::HashSet;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use tokio::io::unix::AsyncFd;
use tokio::sync::watch;

use super::launcher::{self, Launch};
use super::scratch::{Place, Scratch};
use super::tree::{self, Scope};
use super::Spec;
use crate::metrics::{self, StdioStop};

/// How long stragglers SIGKILL did not end yet are waited for before the stop gives up
/// watching them (they are still reaped once they go).
const AFTER_KILL: Duration = Duration::from_secs(2);

/// Servers started and not reaped yet (what [`reap_orphans`] leaves alone).
static HELD: Mutex<Option<HashSet<u32>>> = Mutex::new(None);

fn held(pid: u32, hold: bool) {
    let mut held = HELD.lock().unwrap_or_else(|e| e.into_inner());
    let set = held.get_or_insert_with(HashSet::new);
    if hold {
        set.insert(pid);
    } else {
        set.remove(&pid);
    }
}

/// Reap, once a second, the zombies that are the edge's children but no server it holds:
/// the orphans a container's PID 1 inherits.
pub(super) async fn reap_orphans() {
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let held = HELD
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .unwrap_or_default();
        tree::reap_orphans(&held);
    }
}

/// Why the edge stops a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
    pool: Arc<str>,
    /// The server, held open: signals and waits go through it.
    pidfd: Option<OwnedFd>,
    /// The server exited (it is not reaped yet).
    exit: watch::Receiver<Option<Exit>>,
    stopping: AtomicBool,
    /// The whole session is gone and the server reaped: how it ended.
    stopped: watch::Sender<Option<StdioStop>>,
    scratch: Option<Scratch>,
    /// What this process adds to `mcp_edge_stdio_tree_processes` now.
    counted: AtomicI64,
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
    // A std child, not tokio's: tokio reaps the children it knows of, and this one must
    // not be reaped before its session is empty.
    let mut child = command.spawn()?;
    let pid = child.id();
    held(pid, true);
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
        stopped: watch::channel(None).0,
        scratch,
        counted: AtomicI64::new(0),
    });
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
    let passed = super::process::PASSED_ENV
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

    /// Stop it whole (see the module doc); every caller waits for the end, which the first
    /// decides.
    pub async fn stop(&self, grace: Duration, cause: Cause) -> StdioStop {
        if self.stopping.swap(true, Ordering::SeqCst) {
            let mut stopped = self.stopped.subscribe();
            return match stopped.wait_for(Option::is_some).await {
                Ok(how) => how.unwrap_or(StdioStop::Exited),
                Err(_) => StdioStop::Exited,
            };
        }
        let on_its_own = *self.exit.borrow();
        self.signal_all(Signal::SIGTERM);
        let killed = !self.gone_within(grace).await;
        if killed {
            let left = self.scope.running();
            log::warn!(
                "stdio pool {}: process {} and what it started ({left} running) did not stop within {} ms of SIGTERM; SIGKILL",
                self.pool,
                self.pid,
                grace.as_millis()
            );
            self.signal_all(Signal::SIGKILL);
            if !self.gone_within(AFTER_KILL).await {
                log::error!(
                    "stdio pool {}: process {}: {} processes still run after SIGKILL; they are reaped when they go",
                    self.pool,
                    self.pid,
                    self.scope.running()
                );
            }
        }
        self.reap().await;
        let how = match (cause, on_its_own) {
            (Cause::Hung, _) => StdioStop::Hung,
            (Cause::MemoryLimit, _) => StdioStop::MemoryLimit,
            (Cause::Asked, Some(e)) if e.signal == Some(Signal::SIGXCPU as i32) => {
                StdioStop::CpuLimit
            }
            (Cause::Asked, Some(_)) => StdioStop::Exited,
            (Cause::Asked, None) if killed => StdioStop::Sigkill,
            (Cause::Asked, None) => StdioStop::Sigterm,
        };
        if how == StdioStop::CpuLimit {
            log::error!(
                "stdio pool {}: process {} passed its cpu_seconds_limit (SIGXCPU)",
                self.pool,
                self.pid
            );
        }
        metrics::stdio_stop(&self.pool, how);
        if let Some(s) = &self.scratch {
            s.release();
        }
        self.stopped.send_replace(Some(how));
        how
    }

    /// SIGTERM or SIGKILL to the server (while it runs) and every other running process of
    /// its session.
    fn signal_all(&self, signal: Signal) {
        if !self.has_exited() {
            match &self.pidfd {
                Some(fd) => {
                    tree::send(fd, signal);
                }
                None => {
                    let _ =
                        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.pid as i32), signal);
                }
            }
        }
        self.scope.signal(signal, self.pid);
    }

    /// Waits at most `limit` for the server to exit and nothing else of its session to run.
    async fn gone_within(&self, limit: Duration) -> bool {
        let until = Instant::now() + limit;
        let mut step = Duration::from_millis(10);
        loop {
            // Zombies of the session that are the edge's own children (orphans handed to
            // it as a container's PID 1) are reaped as they appear.
            self.scope.reap(self.pid);
            let running = self.scope.running();
            self.set_count(running as i64);
            if self.has_exited() && running == 0 {
                return true;
            }
            let now = Instant::now();
            if now >= until {
                return false;
            }
            let mut exit = self.exit.clone();
            let wait = step.min(until - now);
            let _ = tokio::time::timeout(wait, exit.wait_for(Option::is_some)).await;
            step = (step * 2).min(Duration::from_millis(100));
        }
    }

    /// Reap the server once nothing of its session runs (in a task of its own if
    /// something still does).
    async fn reap(&self) {
        let gone = self.has_exited() && self.scope.running() == 0;
        if gone {
            self.reap_now();
            return;
        }
        let (pool, pid, scope) = (self.pool.clone(), self.pid, self.scope);
        let fd = self.pidfd.as_ref().and_then(|fd| fd.try_clone().ok());
        let counted = self.counted.swap(0, Ordering::Relaxed);
        tokio::spawn(async move {
            let mut left = counted;
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                scope.reap(pid);
                let running = scope.running() as i64;
                metrics::stdio_tree(&pool, running - left);
                left = running;
                if running == 0 && exited(pid) {
                    break;
                }
            }
            reap_leader(pid, fd.as_ref());
        });
    }

    fn reap_now(&self) {
        reap_leader(self.pid, self.pidfd.as_ref());
        self.set_count(0);
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
fn exited(pid: u32) -> bool {
    tree::stat(pid).is_none_or(|s| s.zombie)
}

fn reap_leader(pid: u32, fd: Option<&OwnedFd>) {
    held(pid, false);
    match fd {
        Some(fd) => {
            use rustix::process::{waitid, WaitId, WaitIdOptions};
            let _ = waitid(
                WaitId::PidFd(fd.as_fd()),
                WaitIdOptions::EXITED | WaitIdOptions::NOHANG,
            );
        }
        None => {
            let _ = nix::sys::wait::waitpid(
                nix::unistd::Pid::from_raw(pid as i32),
                Some(nix::sys::wait::WaitPidFlag::WNOHANG),
            );
        }
    }
}
