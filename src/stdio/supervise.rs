//! Keeping a stdio pool's processes running: the shared processes' supervisors (start,
//! initialise, wait for the end, back off, again), the probe that tells whether a pool of
//! on-demand processes can start one, the reaper of idle ones, and stopping them.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::watch;

use super::calls::Serves;
use super::group::{live, Caller, Group, Target, EDGE_INIT};
use super::process::{Proc, StartError};
use super::scratch::Place;
use super::{now_ms, Isolation};

impl Group {
    /// Start a process, initialise it and stop it, until that works once: the readiness of
    /// a pool whose processes start on demand.
    pub(super) fn probe(self: &Arc<Self>) {
        if self.probing.swap(true, Ordering::Relaxed) {
            return;
        }
        let group = Arc::downgrade(self);
        self.handle.spawn(async move {
            let mut backoff = Duration::from_millis(500);
            loop {
                let Some(g) = group.upgrade() else { return };
                if *g.stop.borrow() {
                    return;
                }
                match g
                    .start_initialised(None, &EDGE_INIT, false, Place::probe())
                    .await
                {
                    Ok(p) => {
                        g.probing.store(false, Ordering::Relaxed);
                        g.stop_detached(p);
                        if g.failing.load(Ordering::Relaxed) {
                            // A start failed meanwhile: probing again.
                            g.probe();
                        }
                        return;
                    }
                    Err(_) => drop(g),
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(30));
            }
        });
    }

    /// Start and initialise a process. `on_demand`: a failure is the client's own (its
    /// `initialize`) or the command's: only the command's marks the pool failing.
    pub(super) async fn start_initialised(
        self: &Arc<Self>,
        owner: Option<Arc<str>>,
        params: &str,
        on_demand: bool,
        place: Place,
    ) -> Result<Arc<Proc>, StartError> {
        // A process for one session is initialised with the client's own `initialize`: how
        // that goes is the client's business, not the pool's health.
        let on_demand_session = owner.is_some();
        let private = owner.is_some() || self.spec.isolation == Isolation::PerPrincipal;
        let serves = Serves { private, owner };
        let started = match Proc::spawn(&self.spec, self.name.clone(), serves, &place) {
            Ok(p) => {
                // Watched from the start: its memory at once, its answers once initialised.
                self.handle
                    .spawn(super::watchdog::watch(p.clone(), self.spec.clone()));
                p
            }
            Err(e) => {
                self.failed(on_demand, &format!("cannot start: {e}"));
                return Err(StartError {
                    message: format!("cannot start: {e}"),
                    refused: None,
                });
            }
        };
        match started.initialize(params, self.spec.start_timeout).await {
            Ok(_) => {
                self.failing.store(false, Ordering::Relaxed);
                crate::metrics::stdio_start(&self.name, true);
                Ok(started)
            }
            Err(e) => {
                started.stop(self.spec.stop_grace).await;
                if e.refused.is_some() || on_demand_session {
                    // The server refused this client's initialize: the client hears why.
                    log::warn!(
                        "stdio pool {}: process {}: the client's initialize failed: {}",
                        self.name,
                        started.pid,
                        e.message
                    );
                    crate::metrics::stdio_start(&self.name, false);
                } else {
                    self.failed(
                        on_demand,
                        &format!("process {}: {}", started.pid, e.message),
                    );
                }
                Err(e)
            }
        }
    }

    pub(super) fn failed(self: &Arc<Self>, on_demand: bool, why: &str) {
        log::error!("stdio pool {}: {why}", self.name);
        // Failing before counted: whoever sees the count sees the pool failing.
        self.failing.store(true, Ordering::Relaxed);
        crate::metrics::stdio_start(&self.name, false);
        if on_demand && self.slots.is_empty() {
            // Readiness comes back once a probe start works again.
            self.probe();
        }
    }

    /// Stop a process in a task of its own: the stop (SIGKILL after the grace) runs to its
    /// end even if whoever asked for it (a client's request) goes away.
    pub(super) fn stop_detached(&self, p: Arc<Proc>) {
        let grace = self.spec.stop_grace;
        self.handle.spawn(async move { p.stop(grace).await });
    }

    /// Stop on-demand processes and forget sessions unused for `idle` (all idle ones
    /// beyond half of it when `pressed` by `max_processes`). Sessions whose own process
    /// ended, and callers' processes that ended, go at once.
    pub(super) async fn reap_idle(&self, pressed: bool) {
        let idle = self.spec.idle.as_millis() as u64;
        let cutoff = now_ms().saturating_sub(if pressed { idle / 2 } else { idle });
        let stale: Vec<Arc<str>> = self
            .lock_sessions()
            .values()
            .filter(|s| match &s.target {
                Target::Own(p) if !p.is_alive() => true,
                Target::Own(p) => {
                    s.last_used.load(Ordering::Relaxed) < cutoff && p.in_flight() == 0
                }
                _ => s.last_used.load(Ordering::Relaxed) < cutoff,
            })
            .map(|s| s.id.clone())
            .collect();
        for id in stale {
            self.end_session(&id).await;
        }
        let idle_callers: Vec<Arc<Proc>> = {
            let mut callers = self.lock_callers();
            let gone: Vec<String> = callers
                .iter()
                .filter(|(_, c)| match c {
                    Caller::Running(p) => {
                        !p.is_alive()
                            || (p.last_used.load(Ordering::Relaxed) < cutoff && p.in_flight() == 0)
                    }
                    Caller::Starting(_) => false,
                })
                .map(|(k, _)| k.clone())
                .collect();
            gone.iter()
                .filter_map(|k| match callers.remove(k) {
                    Some(Caller::Running(p)) => Some(p),
                    _ => None,
                })
                .collect()
        };
        if !idle_callers.is_empty() {
            for p in idle_callers {
                self.release();
                self.stop_detached(p);
            }
            self.publish();
        }
    }

    /// Every process of the group, to stop.
    pub(super) fn all(&self) -> Vec<Arc<Proc>> {
        let mut all: Vec<Arc<Proc>> = self.slots.iter().filter_map(live).collect();
        all.extend(self.lock_callers().drain().filter_map(|(_, c)| match c {
            Caller::Running(p) => Some(p),
            Caller::Starting(_) => None,
        }));
        all.extend(
            self.lock_sessions()
                .drain()
                .filter_map(|(_, s)| match &s.target {
                    Target::Own(p) => Some(p.clone()),
                    _ => None,
                }),
        );
        all
    }

    /// Stop every process (shutdown).
    pub async fn stop(&self) {
        let _ = self.stop.send(true);
        let all = self.all();
        let grace = self.spec.stop_grace;
        futures::future::join_all(all.iter().map(|p| p.stop(grace))).await;
        crate::metrics::stdio_processes(&self.name, 0);
    }
}

impl Drop for Group {
    /// The pool left the configuration: its processes stop.
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        let all = self.all();
        let grace = self.spec.stop_grace;
        self.handle.spawn(async move {
            futures::future::join_all(all.iter().map(|p| p.stop(grace))).await;
        });
    }
}

/// Keep shared slot `i` running: start, initialise, wait for the end, back off, again.
pub(super) async fn supervise(
    group: Weak<Group>,
    i: usize,
    slot: watch::Sender<Option<Arc<Proc>>>,
    mut stopped: watch::Receiver<bool>,
    failing: Arc<AtomicBool>,
) {
    const FIRST: Duration = Duration::from_millis(100);
    const MOST: Duration = Duration::from_secs(30);
    let mut backoff = FIRST;
    loop {
        if *stopped.borrow() {
            return;
        }
        let Some(g) = group.upgrade() else { return };
        let (pool, spec) = (g.name.clone(), g.spec.clone());
        let began = tokio::time::Instant::now();
        let started = g
            .start_initialised(None, &EDGE_INIT, false, Place::shared(i))
            .await;
        drop(g);
        if let Ok(proc) = started {
            log::info!(
                "stdio pool {pool}: process {} (slot {i}) ready, speaking {}",
                proc.pid,
                proc.init.get().map_or("?", |i| i.version.as_str())
            );
            failing.store(false, Ordering::Relaxed);
            slot.send_replace(Some(proc.clone()));
            if let Some(g) = group.upgrade() {
                g.publish();
            }
            tokio::select! {
                _ = proc.ended() => {}
                _ = until(&mut stopped) => {
                    proc.stop(spec.stop_grace).await;
                    slot.send_replace(None);
                    return;
                }
            }
            slot.send_replace(None);
            // Ended on its own, or closed its stdout: either way it is stopped for good.
            proc.stop(spec.stop_grace).await;
            crate::metrics::stdio_exit(&pool);
            if let Some(g) = group.upgrade() {
                g.publish();
            }
        }
        // A process that ran a while starts again at once; one that keeps failing waits
        // longer each time.
        if began.elapsed() > MOST {
            backoff = FIRST;
        }
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = until(&mut stopped) => return,
        }
        backoff = (backoff * 2).min(MOST);
    }
}

/// Reap idle sessions and on-demand processes while the group lives.
pub(super) async fn reap(group: Weak<Group>, mut stopped: watch::Receiver<bool>) {
    loop {
        let every = match group.upgrade() {
            Some(g) => (g.spec.idle / 4).clamp(Duration::from_millis(50), Duration::from_secs(1)),
            None => return,
        };
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = until(&mut stopped) => return,
        }
        let Some(g) = group.upgrade() else { return };
        g.reap_idle(false).await;
        g.publish();
    }
}

async fn until(stopped: &mut watch::Receiver<bool>) {
    let _ = stopped.wait_for(|s| *s).await;
}
