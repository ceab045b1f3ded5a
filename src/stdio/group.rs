//! A stdio pool's processes and sessions: which process serves a request, supervision of
//! the shared processes, on-demand processes and their reaping.
//!
//! On-demand processes (`per_principal`, `per_session`) are bounded by `max_processes`: a
//! start takes a place first and gives it back if it fails. A start runs as a task of its
//! own, so a client that goes away mid-start leaves no process behind: the process is
//! registered anyway and reaped once idle. Concurrent first requests of one caller share
//! one start.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures::future::{BoxFuture, FutureExt, Shared};
use tokio::sync::watch;

use super::process::{Proc, StartError};
use super::{now_ms, Isolation, Spec};

/// The `initialize` params the edge sends a process it initialises itself: no client
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
    /// The caller it belongs to, checked on every request.
    pub caller: String,
    pub last_used: AtomicU64,
}

impl Session {
    pub fn new(id: Arc<str>, target: Target, caller: &str) -> Session {
        Session {
            id,
            target,
            caller: caller.to_string(),
            last_used: AtomicU64::new(now_ms()),
        }
    }

    pub fn touch(&self) {
        self.last_used.store(now_ms(), Ordering::Relaxed);
    }
}

pub enum Target {
    /// A shared process slot: whichever process runs in it now.
    Slot(usize),
    /// A caller's process (`per_principal`).
    Caller(String),
    /// The session's own process (`per_session`).
    Own(Arc<Proc>),
}

type Start = Shared<BoxFuture<'static, Result<Arc<Proc>, String>>>;

enum Caller {
    Starting(Start),
    Running(Arc<Proc>),
}

pub struct Group {
    pub name: Arc<str>,
    pub spec: Arc<Spec>,
    pub addr: SocketAddr,
    pub secret: String,
    slots: Vec<watch::Receiver<Option<Arc<Proc>>>>,
    callers: Mutex<HashMap<String, Caller>>,
    sessions: Mutex<HashMap<Arc<str>, Arc<Session>>>,
    /// On-demand processes running or starting (`max_processes` bounds it).
    on_demand: AtomicUsize,
    next: AtomicUsize,
    stop: watch::Sender<bool>,
    /// The last start failed (readiness; requests do not wait for a start then).
    failing: Arc<AtomicBool>,
    /// A probe start is running (`per_principal` readiness).
    probing: AtomicBool,
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
    /// `max_processes` (or the session limit) reached.
    Full,
    /// The server refused the client's own `initialize` (`per_session`): its answer.
    Refused(String),
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
            on_demand: AtomicUsize::new(0),
            next: AtomicUsize::new(0),
            stop,
            failing: failing.clone(),
            probing: AtomicBool::new(false),
            handle: handle.clone(),
        });
        crate::metrics::stdio_processes(&name, 0);
        for (i, tx) in senders.into_iter().enumerate() {
            handle.spawn(supervise(
                Arc::downgrade(&group),
                i,
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
        if group.slots.is_empty() {
            group.probe();
        }
        Ok(group)
    }

    /// Ready: a shared process runs; with none configured, the command starts and answers
    /// `initialize` (a probe at start, and again after a failed start, until one works).
    pub fn ready(&self) -> bool {
        if self.slots.is_empty() {
            return !self.failing.load(Ordering::Relaxed) && !self.probing.load(Ordering::Relaxed);
        }
        self.slots.iter().any(|s| live(s).is_some())
    }

    /// Start a process, initialise it and stop it, until that works once: the readiness of
    /// a pool whose processes start on demand.
    fn probe(self: &Arc<Self>) {
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
                match g.start_initialised(None, EDGE_INIT, false).await {
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
        if let Some(p) = live(rx) {
            return Ok(p);
        }
        if self.failing.load(Ordering::Relaxed) {
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

    /// Take a place for an on-demand process, within `max_processes` (idle ones are
    /// reaped first when there is none).
    async fn reserve(&self) -> Result<(), Unavailable> {
        for attempt in 0..2 {
            let max = self.spec.max_processes;
            let took = self
                .on_demand
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                    (n < max).then_some(n + 1)
                })
                .is_ok();
            if took {
                return Ok(());
            }
            if attempt == 0 {
                self.reap_idle(true).await;
            }
        }
        Err(Unavailable::Full)
    }

    fn release(&self) {
        let _ = self
            .on_demand
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
    }

    /// The caller's own process (`per_principal`), started on first use; concurrent first
    /// requests share one start.
    pub async fn for_caller(self: &Arc<Self>, caller: &str) -> Result<Arc<Proc>, Unavailable> {
        let start = {
            let mut callers = self.lock_callers();
            let dead = match callers.get(caller) {
                Some(Caller::Running(p)) if p.is_alive() => {
                    p.touch();
                    return Ok(p.clone());
                }
                Some(Caller::Starting(s)) => Some(s.clone()),
                Some(Caller::Running(_)) => {
                    // It can answer no more: it is stopped and its place goes back (once:
                    // its entry goes with it), and a new one starts below.
                    if let Some(Caller::Running(old)) = callers.remove(caller) {
                        self.release();
                        self.stop_detached(old);
                    }
                    None
                }
                None => None,
            };
            if dead.is_none()
                && self.failing.load(Ordering::Relaxed)
                && self.probing.load(Ordering::Relaxed)
            {
                // Starts fail: no caller waits for one until a probe start works again.
                return Err(Unavailable::NoProcess(format!(
                    "the server of pool {} fails to start (see the log)",
                    self.name
                )));
            }
            dead.unwrap_or_else(|| {
                // Under this lock: one start per caller.
                let start = self.caller_start(caller);
                callers.insert(caller.to_string(), Caller::Starting(start.clone()));
                start
            })
        };
        start.await.map_err(Unavailable::NoProcess)
    }

    /// A start for `caller`, run as a task of its own; it registers (or forgets) itself.
    fn caller_start(self: &Arc<Self>, caller: &str) -> Start {
        let group = self.clone();
        let caller = caller.to_string();
        let task = self.handle.spawn(async move {
            let result = match group.reserve().await {
                Ok(()) => match group.start_initialised(None, EDGE_INIT, true).await {
                    Ok(p) => Ok(p),
                    Err(e) => {
                        group.release();
                        Err(e.message)
                    }
                },
                Err(_) => Err(format!(
                    "runs max_processes ({}) processes; try again later",
                    group.spec.max_processes
                )),
            };
            {
                let mut callers = group.lock_callers();
                match &result {
                    Ok(p) => {
                        callers.insert(caller.clone(), Caller::Running(p.clone()));
                    }
                    Err(_) => {
                        callers.remove(&caller);
                    }
                }
            }
            // Checked after registering: a stop that began before drains it from the map,
            // one that began after finds it there; either way it is stopped.
            let stopping = *group.stop.borrow();
            if let (Ok(p), true) = (&result, stopping) {
                let removed = group.lock_callers().remove(&caller).is_some();
                if removed {
                    group.release();
                }
                p.stop(group.spec.stop_grace).await;
                return Err("the pool is stopping".to_string());
            }
            group.publish();
            result
        });
        async move {
            task.await
                .unwrap_or_else(|e| Err(format!("the start failed: {e}")))
        }
        .boxed()
        .shared()
    }

    /// A new legacy session with a process of its own (`per_session`), initialised with the
    /// client's own `initialize` params. The session is registered by the start itself.
    pub async fn for_session(
        self: &Arc<Self>,
        id: Arc<str>,
        caller: &str,
        params: &str,
    ) -> Result<Arc<Proc>, Unavailable> {
        self.reserve().await?;
        let group = self.clone();
        let params = params.to_string();
        let caller = caller.to_string();
        let task = self.handle.spawn(async move {
            let started = group
                .start_initialised(Some(id.clone()), &params, true)
                .await;
            let proc = match started {
                Ok(p) => p,
                Err(e) => {
                    group.release();
                    return Err(match e.refused {
                        Some(answer) => Unavailable::Refused(answer),
                        None => Unavailable::NoProcess(e.message),
                    });
                }
            };
            let session = Session::new(id.clone(), Target::Own(proc.clone()), &caller);
            if let Err(u) = group.add_session(session).await {
                proc.stop(group.spec.stop_grace).await;
                group.release();
                return Err(u);
            }
            // Checked after registering (see `caller_start`).
            let stopping = *group.stop.borrow();
            if stopping {
                let removed = group.lock_sessions().remove(&id).is_some();
                if removed {
                    group.release();
                }
                proc.stop(group.spec.stop_grace).await;
                return Err(Unavailable::NoProcess("the pool is stopping".into()));
            }
            group.publish();
            Ok(proc)
        });
        task.await
            .unwrap_or_else(|e| Err(Unavailable::NoProcess(format!("the start failed: {e}"))))
    }

    /// Start and initialise a process. `on_demand`: a failure is the client's own (its
    /// `initialize`) or the command's: only the command's marks the pool failing.
    async fn start_initialised(
        self: &Arc<Self>,
        owner: Option<Arc<str>>,
        params: &str,
        on_demand: bool,
    ) -> Result<Arc<Proc>, StartError> {
        // A process for one session is initialised with the client's own `initialize`: how
        // that goes is the client's business, not the pool's health.
        let on_demand_session = owner.is_some();
        let private = owner.is_some() || self.spec.isolation == Isolation::PerPrincipal;
        let started = match Proc::spawn(&self.spec, self.name.clone(), owner, private) {
            Ok(p) => p,
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

    fn failed(self: &Arc<Self>, on_demand: bool, why: &str) {
        log::error!("stdio pool {}: {why}", self.name);
        // Failing before counted: whoever sees the count sees the pool failing.
        self.failing.store(true, Ordering::Relaxed);
        crate::metrics::stdio_start(&self.name, false);
        if on_demand && self.slots.is_empty() {
            // Readiness comes back once a probe start works again.
            self.probe();
        }
    }

    /// The process a session's requests go to; `None` when it is gone (its own process
    /// ended).
    pub async fn session_process(
        self: &Arc<Self>,
        session: &Session,
    ) -> Result<Option<Arc<Proc>>, Unavailable> {
        session.touch();
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

    pub async fn add_session(&self, session: Session) -> Result<Arc<Session>, Unavailable> {
        if self.lock_sessions().len() >= MAX_SESSIONS {
            self.reap_idle(true).await;
        }
        let mut sessions = self.lock_sessions();
        if sessions.len() >= MAX_SESSIONS || sessions.contains_key(&session.id) {
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
            self.release();
            self.stop_detached(p.clone());
            self.publish();
        }
    }

    /// Stop a process in a task of its own: the stop (SIGKILL after the grace) runs to its
    /// end even if whoever asked for it (a client's request) goes away.
    fn stop_detached(&self, p: Arc<Proc>) {
        let grace = self.spec.stop_grace;
        self.handle.spawn(async move { p.stop(grace).await });
    }

    /// Stop on-demand processes and forget sessions unused for `idle` (all idle ones
    /// beyond half of it when `pressed` by `max_processes`). Sessions whose own process
    /// ended, and callers' processes that ended, go at once.
    async fn reap_idle(&self, pressed: bool) {
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

    /// `mcp_edge_stdio_processes{pool}`: processes running now.
    fn publish(&self) {
        let shared = self.slots.iter().filter(|s| live(s).is_some()).count();
        let callers = self
            .lock_callers()
            .values()
            .filter(|c| matches!(c, Caller::Running(p) if p.is_alive()))
            .count();
        let owned = self
            .lock_sessions()
            .values()
            .filter(|s| matches!(&s.target, Target::Own(p) if p.is_alive()))
            .count();
        crate::metrics::stdio_processes(&self.name, (shared + callers + owned) as i64);
    }

    /// Every process of the group, to stop.
    fn all(&self) -> Vec<Arc<Proc>> {
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

    pub fn stop_grace(&self) -> Duration {
        self.spec.stop_grace
    }

    fn lock_callers(&self) -> std::sync::MutexGuard<'_, HashMap<String, Caller>> {
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
        let all = self.all();
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
        let started = g.start_initialised(None, EDGE_INIT, false).await;
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
async fn reap(group: Weak<Group>, mut stopped: watch::Receiver<bool>) {
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
