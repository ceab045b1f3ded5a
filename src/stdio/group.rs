//! A stdio pool's processes and sessions: which process serves a request, supervision of
//! the shared processes, on-demand processes and their reaping.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

use super::process::Proc;
use super::{now_ms, Isolation, Spec};

/// The `initialize` params the edge sends a process it shares between clients: no client
/// capabilities, since a server's request could not be told apart by client.
const EDGE_INIT: &str = concat!(
    r#"{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"mcp-edge","version":""#,
    env!("CARGO_PKG_VERSION"),
    r#""}}"#
);

/// How long a request waits for a shared process that is starting (after a crash, say).
const WAIT_FOR_PROCESS: Duration = Duration::from_secs(10);
/// Legacy sessions remembered at most (per pool).
const MAX_SESSIONS: usize = 10_000;

/// A legacy session (the id the process side minted; the client sees it sealed).
pub struct Session {
    pub id: Arc<str>,
    pub target: Target,
    /// The caller it belongs to (`per_principal`), checked on every request.
    pub caller: Option<String>,
    pub last_used: std::sync::atomic::AtomicU64,
}

pub enum Target {
    /// A shared process slot: whichever process runs in it now.
    Slot(usize),
    /// A caller's process (`per_principal`).
    Caller(String),
    /// The session's own process (`per_session`).
    Own(Arc<Proc>),
}

pub struct Group {
    pub name: Arc<str>,
    pub spec: Arc<Spec>,
    pub addr: SocketAddr,
    pub secret: String,
    slots: Vec<watch::Receiver<Option<Arc<Proc>>>>,
    callers: Mutex<HashMap<String, Arc<Proc>>>,
    pub(super) sessions: Mutex<HashMap<Arc<str>, Arc<Session>>>,
    /// Per-session processes, counted against `max_processes` with `callers`.
    owned: AtomicUsize,
    next: AtomicUsize,
    stop: watch::Sender<bool>,
    /// The last start failed (readiness; requests do not wait for a start then).
    failing: Arc<AtomicBool>,
    handle: tokio::runtime::Handle,
}

impl std::fmt::Debug for Group {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "stdio group {} at {}", self.name, self.addr)
    }
}

#[derive(Debug)]
pub enum Unavailable {
    /// No process could be started or none is running.
    NoProcess(String),
    /// `max_processes` reached.
    Full,
}

impl Group {
    /// Bind the local listener, start the shared processes' supervisors and the server.
    pub fn start(
        handle: &tokio::runtime::Handle,
        name: &str,
        spec: Arc<Spec>,
    ) -> std::io::Result<Arc<Group>> {
        let listener = std::net::TcpListener::bind(("127.0.0.1", 0))?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let (stop, stopped) = watch::channel(false);
        let name: Arc<str> = Arc::from(name);
        let shared = match spec.isolation {
            Isolation::PerPrincipal => 0,
            _ => spec.processes,
        };
        let mut slots = Vec::new();
        let mut senders = Vec::new();
        for _ in 0..shared {
            let (tx, rx) = watch::channel(None);
            slots.push(rx);
            senders.push(tx);
        }
        let failing = Arc::new(AtomicBool::new(false));
        let mut secret = [0u8; 24];
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut secret)
            .map_err(|_| std::io::Error::other("no randomness for the pool's secret"))?;
        let group = Arc::new(Group {
            name: name.clone(),
            spec: spec.clone(),
            addr,
            secret: hex(&secret),
            slots,
            callers: Mutex::new(HashMap::new()),
            sessions: Mutex::new(HashMap::new()),
            owned: AtomicUsize::new(0),
            next: AtomicUsize::new(0),
            stop,
            failing: failing.clone(),
            handle: handle.clone(),
        });
        crate::metrics::stdio_processes(&name, 0);
        for (i, tx) in senders.into_iter().enumerate() {
            handle.spawn(supervise(
                name.clone(),
                i,
                spec.clone(),
                tx,
                stopped.clone(),
                failing.clone(),
            ));
        }
        let _guard = handle.enter();
        let listener = tokio::net::TcpListener::from_std(listener)?;
        handle.spawn(super::server::serve(
            listener,
            Arc::downgrade(&group),
            stopped.clone(),
        ));
        handle.spawn(reap(Arc::downgrade(&group), stopped));
        Ok(group)
    }

    /// Ready: a shared process runs (or, with none configured, on-demand starts work).
    pub fn ready(&self) -> bool {
        if self.slots.is_empty() {
            return !self.failing.load(Ordering::Relaxed);
        }
        self.slots
            .iter()
            .any(|s| s.borrow().as_ref().is_some_and(|p| p.is_alive()))
    }

    /// A shared process for a request without a session: round-robin over the running
    /// ones, waiting for one to start if none runs.
    pub async fn any_shared(&self) -> Result<Arc<Proc>, Unavailable> {
        self.any_slot().await.map(|(_, p)| p)
    }

    /// [`Self::any_shared`], with the slot it runs in.
    pub async fn any_slot(&self) -> Result<(usize, Arc<Proc>), Unavailable> {
        if self.slots.is_empty() {
            return Err(Unavailable::NoProcess(
                "this pool has no shared processes".into(),
            ));
        }
        let n = self.slots.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        for k in 0..n {
            let i = (start + k) % n;
            if let Some(p) = live(&self.slots[i]) {
                return Ok((i, p));
            }
        }
        let i = start % n;
        self.slot(i).await.map(|p| (i, p))
    }

    /// The process in shared slot `i`, waiting for one to start if needed.
    pub async fn slot(&self, i: usize) -> Result<Arc<Proc>, Unavailable> {
        let Some(rx) = self.slots.get(i) else {
            return Err(Unavailable::NoProcess("no such process".into()));
        };
        if self.failing.load(Ordering::Relaxed) {
            if let Some(p) = live(rx) {
                return Ok(p);
            }
            return Err(Unavailable::NoProcess(format!(
                "the server of pool {} fails to start (see the log)",
                self.name
            )));
        }
        let mut rx = rx.clone();
        let wait = async move {
            rx.wait_for(|p| p.as_ref().is_some_and(|p| p.is_alive()))
                .await
                .ok()
                .and_then(|p| p.clone())
        };
        match tokio::time::timeout(WAIT_FOR_PROCESS, wait).await {
            Ok(Some(p)) => Ok(p),
            _ => Err(Unavailable::NoProcess(format!(
                "no process of pool {} is running (starting or restarting)",
                self.name
            ))),
        }
    }

    /// The caller's own process (`per_principal`), started on first use.
    pub async fn for_caller(&self, caller: &str) -> Result<Arc<Proc>, Unavailable> {
        let existing = self.lock_callers().get(caller).cloned();
        if let Some(p) = existing.filter(|p| p.is_alive()) {
            return Ok(p);
        }
        if self.on_demand() >= self.spec.max_processes {
            self.reap_idle(true).await;
            if self.on_demand() >= self.spec.max_processes {
                return Err(Unavailable::Full);
            }
        }
        let proc = self.start_initialised(None, EDGE_INIT).await?;
        let mut callers = self.lock_callers();
        // Two first requests raced: keep the first process, stop the other.
        if let Some(p) = callers.get(caller).filter(|p| p.is_alive()).cloned() {
            drop(callers);
            let spare = proc.clone();
            let grace = self.spec.stop_grace;
            self.handle.spawn(async move { spare.stop(grace).await });
            return Ok(p);
        }
        callers.insert(caller.to_string(), proc.clone());
        drop(callers);
        self.publish();
        Ok(proc)
    }

    /// A process for one legacy session (`per_session`), initialised with the client's
    /// own `initialize` params.
    pub async fn for_session(
        &self,
        session: Arc<str>,
        params: &str,
    ) -> Result<Arc<Proc>, Unavailable> {
        if self.on_demand() >= self.spec.max_processes {
            self.reap_idle(true).await;
            if self.on_demand() >= self.spec.max_processes {
                return Err(Unavailable::Full);
            }
        }
        self.owned.fetch_add(1, Ordering::Relaxed);
        let proc = self.start_initialised(Some(session), params).await;
        if proc.is_err() {
            self.owned.fetch_sub(1, Ordering::Relaxed);
        }
        self.publish();
        proc
    }

    async fn start_initialised(
        &self,
        owner: Option<Arc<str>>,
        params: &str,
    ) -> Result<Arc<Proc>, Unavailable> {
        let started = match Proc::spawn(&self.spec, self.name.clone(), owner) {
            Ok(p) => p,
            Err(e) => {
                self.failing.store(true, Ordering::Relaxed);
                crate::metrics::stdio_start(&self.name, false);
                return Err(Unavailable::NoProcess(format!("cannot start: {e}")));
            }
        };
        match started.initialize(params, self.spec.start_timeout).await {
            Ok(_) => {
                self.failing.store(false, Ordering::Relaxed);
                crate::metrics::stdio_start(&self.name, true);
                Ok(started)
            }
            Err(e) => {
                self.failing.store(true, Ordering::Relaxed);
                crate::metrics::stdio_start(&self.name, false);
                log::error!("stdio pool {}: process {}: {e}", self.name, started.pid);
                started.stop(self.spec.stop_grace).await;
                Err(Unavailable::NoProcess(e))
            }
        }
    }

    /// The process a session's requests go to; `None` when it is gone (its own process
    /// ended, or the session is unknown).
    pub async fn session_process(
        &self,
        session: &Session,
    ) -> Result<Option<Arc<Proc>>, Unavailable> {
        session.last_used.store(now_ms(), Ordering::Relaxed);
        match &session.target {
            Target::Slot(i) => self.slot(*i).await.map(Some),
            Target::Caller(c) => self.for_caller(c).await.map(Some),
            Target::Own(p) if p.is_alive() => Ok(Some(p.clone())),
            Target::Own(_) => {
                self.end_session(&session.id).await;
                Ok(None)
            }
        }
    }

    pub fn add_session(&self, session: Session) -> Result<Arc<Session>, Unavailable> {
        let mut sessions = self.lock_sessions();
        if sessions.len() >= MAX_SESSIONS {
            return Err(Unavailable::Full);
        }
        let s = Arc::new(session);
        sessions.insert(s.id.clone(), s.clone());
        Ok(s)
    }

    pub fn session(&self, id: &str) -> Option<Arc<Session>> {
        self.lock_sessions().get(id).cloned()
    }

    /// Forget a session; its own process (`per_session`) is stopped.
    pub async fn end_session(&self, id: &str) {
        let Some(s) = self.lock_sessions().remove(id) else {
            return;
        };
        if let Target::Own(p) = &s.target {
            p.stop(self.spec.stop_grace).await;
            self.owned.fetch_sub(1, Ordering::Relaxed);
            self.publish();
        }
    }

    /// Stop on-demand processes and forget sessions unused for `idle` (all idle ones
    /// beyond half of it when `pressed` by `max_processes`).
    async fn reap_idle(&self, pressed: bool) {
        let idle = self.spec.idle.as_millis() as u64;
        let cutoff = now_ms().saturating_sub(if pressed { idle / 2 } else { idle });
        let stale: Vec<Arc<str>> = self
            .lock_sessions()
            .values()
            .filter(|s| s.last_used.load(Ordering::Relaxed) < cutoff)
            .filter(|s| match &s.target {
                Target::Own(p) => p.in_flight() == 0,
                _ => true,
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
                .filter(|(_, p)| {
                    !p.is_alive()
                        || (p.last_used.load(Ordering::Relaxed) < cutoff && p.in_flight() == 0)
                })
                .map(|(k, _)| k.clone())
                .collect();
            gone.iter().filter_map(|k| callers.remove(k)).collect()
        };
        if !idle_callers.is_empty() {
            let grace = self.spec.stop_grace;
            futures::future::join_all(idle_callers.iter().map(|p| p.stop(grace))).await;
            self.publish();
        }
    }

    fn on_demand(&self) -> usize {
        self.lock_callers().len() + self.owned.load(Ordering::Relaxed)
    }

    /// `mcp_edge_stdio_processes{pool}`: processes running now.
    fn publish(&self) {
        let shared = self.slots.iter().filter(|s| live(s).is_some()).count();
        let callers = self
            .lock_callers()
            .values()
            .filter(|p| p.is_alive())
            .count();
        let owned = self.owned.load(Ordering::Relaxed);
        crate::metrics::stdio_processes(&self.name, (shared + callers + owned) as i64);
    }

    /// Stop every process (shutdown, or the pool left the configuration).
    pub async fn stop(&self) {
        let _ = self.stop.send(true);
        let mut all: Vec<Arc<Proc>> = self.slots.iter().filter_map(live).collect();
        all.extend(self.lock_callers().drain().map(|(_, p)| p));
        all.extend(
            self.lock_sessions()
                .drain()
                .filter_map(|(_, s)| match &s.target {
                    Target::Own(p) => Some(p.clone()),
                    _ => None,
                }),
        );
        let grace = self.spec.stop_grace;
        futures::future::join_all(all.iter().map(|p| p.stop(grace))).await;
        crate::metrics::stdio_processes(&self.name, 0);
    }

    fn lock_callers(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Proc>>> {
        self.callers.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock_sessions(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, Arc<Session>>> {
        self.sessions.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for Group {
    /// The pool left the configuration: its processes stop.
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        let mut all: Vec<Arc<Proc>> = self.slots.iter().filter_map(live).collect();
        all.extend(self.lock_callers().drain().map(|(_, p)| p));
        all.extend(
            self.lock_sessions()
                .drain()
                .filter_map(|(_, s)| match &s.target {
                    Target::Own(p) => Some(p.clone()),
                    _ => None,
                }),
        );
        let grace = self.spec.stop_grace;
        self.handle.spawn(async move {
            futures::future::join_all(all.iter().map(|p| p.stop(grace))).await;
        });
    }
}

fn live(slot: &watch::Receiver<Option<Arc<Proc>>>) -> Option<Arc<Proc>> {
    slot.borrow().as_ref().filter(|p| p.is_alive()).cloned()
}

/// Keep shared slot `i` running: start, initialise, wait for the end, back off, again.
async fn supervise(
    pool: Arc<str>,
    i: usize,
    spec: Arc<Spec>,
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
        let began = tokio::time::Instant::now();
        match Proc::spawn(&spec, pool.clone(), None) {
            Ok(proc) => match proc.initialize(EDGE_INIT, spec.start_timeout).await {
                Ok(init) => {
                    log::info!(
                        "stdio pool {pool}: process {} (slot {i}) ready, speaking {}",
                        proc.pid,
                        init.version
                    );
                    crate::metrics::stdio_start(&pool, true);
                    failing.store(false, Ordering::Relaxed);
                    slot.send_replace(Some(proc.clone()));
                    tokio::select! {
                        _ = proc.ended() => {}
                        _ = until(&mut stopped) => {
                            proc.stop(spec.stop_grace).await;
                            slot.send_replace(None);
                            return;
                        }
                    }
                    slot.send_replace(None);
                    crate::metrics::stdio_exit(&pool);
                }
                Err(e) => {
                    log::error!("stdio pool {pool}: process {} (slot {i}): {e}", proc.pid);
                    crate::metrics::stdio_start(&pool, false);
                    failing.store(true, Ordering::Relaxed);
                    proc.stop(spec.stop_grace).await;
                }
            },
            Err(e) => {
                log::error!(
                    "stdio pool {pool}: cannot start {:?}: {e}",
                    spec.command.first()
                );
                crate::metrics::stdio_start(&pool, false);
                failing.store(true, Ordering::Relaxed);
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
async fn reap(group: std::sync::Weak<Group>, mut stopped: watch::Receiver<bool>) {
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

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
