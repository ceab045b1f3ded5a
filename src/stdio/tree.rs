//! A stdio server's processes, found in `/proc`: the server leads a session of its own
//! ([`super::launcher`]), and every process it started is in that session unless it left with
//! `setsid` (only a cgroup would keep such a one; the edge does not assume it may create
//! one in an unprivileged container). Without the launcher the server leads a process group
//! instead, and the group is what is found.
//!
//! Signals never reach a process id that may have been reused: each member is opened as a
//! pidfd, checked to still be in the session, and signalled through the pidfd; and the
//! server itself is not reaped (its id, which is the session's, stays taken) until nothing
//! of its session is left ([`super::stop`]).

use std::os::fd::{AsFd, OwnedFd};

use nix::sys::signal::Signal;
use rustix::process::{Pid, PidfdFlags};

/// What a server's processes share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The session the server leads (its id is the server's).
    Session(u32),
    /// The process group the server leads.
    Group(u32),
}

/// One process's `/proc/<pid>/stat` fields that matter here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    pub zombie: bool,
    pub parent: u32,
    pub group: u32,
    pub session: u32,
    /// Resident pages.
    pub rss_pages: u64,
}

pub fn stat(pid: u32) -> Option<Stat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: the fields follow its last `)`.
    let (_, rest) = text.rsplit_once(')')?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let num = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok());
    Some(Stat {
        zombie: f.first() == Some(&"Z"),
        parent: u32::try_from(num(1)?).ok()?,
        group: u32::try_from(num(2)?).ok()?,
        session: u32::try_from(num(3)?).ok()?,
        rss_pages: num(21)?,
    })
}

impl Scope {
    fn holds(self, s: &Stat) -> bool {
        match self {
            Scope::Session(id) => s.session == id,
            Scope::Group(id) => s.group == id,
        }
    }

    /// Every process in the scope now, zombies included, with its stat.
    pub fn members(self) -> Vec<(u32, Stat)> {
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .filter_map(|pid| Some((pid, stat(pid)?)))
            .filter(|(_, s)| self.holds(s))
            .collect()
    }
}

/// Signal `pid` only if, opened as a pidfd, it is still a member of `scope`.
pub fn signal_checked(pid: u32, scope: Scope, signal: Signal) -> bool {
    let Some(fd) = open(pid) else {
        return false;
    };
    // The pidfd holds this very process: if the id was reused since the scan, the stat
    // read now is the new process's, and it is not signalled.
    if !stat(pid).is_some_and(|s| !s.zombie && scope.holds(&s)) {
        return false;
    }
    send(&fd, signal)
}

/// A pidfd for `pid`.
pub fn open(pid: u32) -> Option<OwnedFd> {
    let pid = Pid::from_raw(i32::try_from(pid).ok()?)?;
    rustix::process::pidfd_open(pid, PidfdFlags::empty()).ok()
}

/// Signal the process a pidfd holds.
pub fn send(fd: &OwnedFd, signal: Signal) -> bool {
    let Some(signal) = rustix::process::Signal::from_named_raw(signal as i32) else {
        return false;
    };
    rustix::process::pidfd_send_signal(fd.as_fd(), signal).is_ok()
}

/// Reap a child that has exited (never blocks).
pub fn reap(pid: u32) {
    if let Ok(pid) = i32::try_from(pid) {
        let _ = nix::sys::wait::waitpid(
            nix::unistd::Pid::from_raw(pid),
            Some(nix::sys::wait::WaitPidFlag::WNOHANG),
        );
    }
}

/// This process's children that have exited and wait to be reaped.
pub fn zombie_children() -> Vec<u32> {
    let me = std::process::id();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| stat(*pid).is_some_and(|s| s.zombie && s.parent == me))
        .collect()
}

pub fn page_size() -> u64 {
    rustix::param::page_size() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_reads_as_itself() {
        let me = stat(std::process::id()).unwrap();
        assert!(!me.zombie);
        assert!(me.rss_pages > 0);
        let scope = Scope::Session(me.session);
        assert!(scope
            .members()
            .iter()
            .any(|(p, _)| *p == std::process::id()));
    }
}
