//! Stopping a server whole ([`Child::stop`]): SIGTERM to the server and to every process of
//! its session, SIGKILL to whatever of them still runs after the grace (again on every look,
//! so a process forked meanwhile goes too), then the server reaped once nothing of its
//! session runs; how it ended counted.
//!
//! Every look at the session is a scan of `/proc`, done on the blocking pool (never on the
//! runtime's workers). Stragglers that outlive [`AFTER_KILL`] (a process in uninterruptible
//! sleep) are looked at, and sent SIGKILL, once a second in a task of their own for at most
//! [`STRAGGLERS`]; the server stays unreaped (its id taken) while they run.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use super::child::{exited, Cause, Child};
use super::tree::{self, Scope};
use crate::metrics::{self, StdioStop};

/// After the SIGKILL, how long the stop waits for the session to be gone.
pub const AFTER_KILL: Duration = Duration::from_secs(2);
/// How long stragglers are sent SIGKILL before the edge gives up on them.
const STRAGGLERS: Duration = Duration::from_secs(300);

impl Child {
    /// Stop it whole; every caller waits for the end. The strongest cause recorded decides
    /// how it is counted (a hung process stays hung whoever asked first).
    pub async fn stop(&self, grace: Duration, cause: Cause) -> StdioStop {
        self.mark(cause);
        if self.stopping.swap(true, Ordering::SeqCst) {
            let mut stopped = self.stopped.subscribe();
            return match stopped.wait_for(Option::is_some).await {
                Ok(how) => how.unwrap_or(StdioStop::Exited),
                Err(_) => StdioStop::Exited,
            };
        }
        // Ended before the edge asked (the exit watch may not have seen it yet; `/proc` has).
        let on_its_own = self.has_exited() || exited(self.pid);
        self.signal_leader(Signal::SIGTERM);
        let members = scan(self.scope).await;
        signal_members(self.scope, self.pid, Signal::SIGTERM, &members);
        let mut gone = self.gone_within(grace, None).await;
        let killed = !gone;
        if killed {
            log::warn!(
                "stdio pool {}: process {} and what it started did not stop within {} ms of SIGTERM; SIGKILL",
                self.pool,
                self.pid,
                grace.as_millis()
            );
            self.signal_leader(Signal::SIGKILL);
            gone = self.gone_within(AFTER_KILL, Some(Signal::SIGKILL)).await;
            if !gone {
                self.watch_stragglers();
            }
        }
        if gone {
            reap_leader(self.pid, self.pidfd.as_ref());
        }
        // The edge never sends SIGXCPU: the kernel does, at `cpu_seconds_limit`.
        let cpu = self
            .exit
            .borrow()
            .is_some_and(|e| e.signal == Some(Signal::SIGXCPU as i32));
        let how = match (self.cause(), on_its_own) {
            (Cause::Hung, _) => StdioStop::Hung,
            (Cause::MemoryLimit, _) => StdioStop::MemoryLimit,
            (Cause::Asked, _) if cpu => {
                log::error!(
                    "stdio pool {}: process {} passed its cpu_seconds_limit (SIGXCPU)",
                    self.pool,
                    self.pid
                );
                StdioStop::CpuLimit
            }
            (Cause::Asked, true) => StdioStop::Exited,
            (Cause::Asked, false) if killed => StdioStop::Sigkill,
            (Cause::Asked, false) => StdioStop::Sigterm,
        };
        metrics::stdio_stop(&self.pool, how);
        if let Some(s) = &self.scratch {
            let s = s.clone();
            let _ = tokio::task::spawn_blocking(move || s.release()).await;
        }
        self.stopped.send_replace(Some(how));
        how
    }

    /// A signal to the server itself, while it runs (through its pidfd).
    fn signal_leader(&self, signal: Signal) {
        if self.has_exited() {
            return;
        }
        match &self.pidfd {
            Some(fd) => {
                tree::send(fd, signal);
            }
            None => {
                let pid = nix::unistd::Pid::from_raw(i32::try_from(self.pid).unwrap_or(0));
                let _ = nix::sys::signal::kill(pid, signal);
            }
        }
    }

    /// Waits at most `limit` for the server to exit and nothing else of its session to
    /// run; `again`: sent to what still runs on every look.
    async fn gone_within(&self, limit: Duration, again: Option<Signal>) -> bool {
        let until = Instant::now() + limit;
        let mut step = Duration::from_millis(20);
        loop {
            let members = scan(self.scope).await;
            // Zombies of the session that are the edge's own children (orphans handed to
            // it as a container's PID 1) are reaped as they appear.
            for (pid, s) in &members {
                if s.zombie && *pid != self.pid && s.parent == std::process::id() {
                    tree::reap(*pid);
                }
            }
            let running = members.iter().filter(|(_, s)| !s.zombie).count();
            self.count(running as i64);
            if self.has_exited() && running == 0 {
                return true;
            }
            if let Some(sig) = again {
                self.signal_leader(sig);
                signal_members(self.scope, self.pid, sig, &members);
            }
            let now = Instant::now();
            if now >= until {
                return false;
            }
            let mut exit = self.exit.clone();
            let wait = step.min(until - now);
            let _ = tokio::time::timeout(wait, exit.wait_for(Option::is_some)).await;
            step = (step * 2).min(Duration::from_millis(200));
        }
    }

    /// What outlived SIGKILL: sent SIGKILL once a second until it goes (then the server is
    /// reaped), for at most [`STRAGGLERS`].
    fn watch_stragglers(&self) {
        let (pool, pid, scope) = (self.pool.clone(), self.pid, self.scope);
        let fd = self.pidfd.as_ref().and_then(|fd| fd.try_clone().ok());
        let counted = self.counted.swap(0, Ordering::Relaxed);
        log::error!(
            "stdio pool {pool}: process {pid}: {counted} processes of its session still run after SIGKILL; sending it again every second"
        );
        tokio::spawn(async move {
            let mut left = counted;
            let until = Instant::now() + STRAGGLERS;
            while Instant::now() < until {
                tokio::time::sleep(Duration::from_secs(1)).await;
                let members = scan(scope).await;
                signal_members(scope, pid, Signal::SIGKILL, &members);
                let running = members.iter().filter(|(_, s)| !s.zombie).count() as i64;
                metrics::stdio_tree(&pool, running - left);
                left = running;
                if running == 0 && exited(pid) {
                    reap_leader(pid, fd.as_ref());
                    return;
                }
            }
            log::error!(
                "stdio pool {pool}: process {pid}: {left} processes of its session outlived SIGKILL for {} s; the edge stops watching them",
                STRAGGLERS.as_secs()
            );
        });
    }
}

/// The session's processes now, from `/proc` (on the blocking pool).
pub(super) async fn scan(scope: Scope) -> Vec<(u32, tree::Stat)> {
    tokio::task::spawn_blocking(move || scope.members())
        .await
        .unwrap_or_default()
}

/// `signal` to every running member of `members` but the server.
fn signal_members(scope: Scope, leader: u32, signal: Signal, members: &[(u32, tree::Stat)]) {
    for (pid, s) in members {
        if !s.zombie && *pid != leader {
            tree::signal_checked(*pid, scope, signal);
        }
    }
}

/// Reap the server (it has exited), and let its id go.
fn reap_leader(pid: u32, fd: Option<&OwnedFd>) {
    super::child::release(pid);
    match fd {
        Some(fd) => {
            use rustix::process::{waitid, WaitId, WaitIdOptions};
            let _ = waitid(
                WaitId::PidFd(fd.as_fd()),
                WaitIdOptions::EXITED | WaitIdOptions::NOHANG,
            );
        }
        None => tree::reap(pid),
    }
}

/// Something the edge does once it is done with a whole group of servers: all of them
/// stopped (used by [`super::stop_all`]).
pub async fn stop_every(children: Vec<Arc<Child>>, grace: Duration) {
    futures::future::join_all(children.iter().map(|c| c.stop(grace, Cause::Asked))).await;
}
