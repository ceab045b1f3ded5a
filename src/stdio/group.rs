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
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use futures::future::{BoxFuture, FutureExt, Shared};
use tokio::sync::watch;

use super::process::Proc;
use super::scratch::Place;
use super::{now_ms, Isolation, Spec};
use crate::mcp::{client, LATEST_LEGACY};

/// The `initialize` params the edge sends a process it initialises itself: no client
/// capabilities, since a server's request could not be told apart by client.
pub(super) static EDGE_INIT: LazyLock<String> =
    LazyLock::new(|| client::initialize_params(LATEST_LEGACY, client::EDGE));

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

    /// Opened by `caller` (a session is its caller's alone).
    pub fn owned_by(&self, caller: &str) -> bool {
        self.caller == caller
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

/// What a shared slot's supervisor publishes: the process running in it.
pub(super) type Slot = watch::Sender<Option<Arc<Proc>>>;

pub(super) type Start = Shared<BoxFuture<'static, Result<Arc<Proc>, String>>>;

pub(super) enum Caller {
    Starting(Start),
    Running(Arc<Proc>),
}

pub struct Group {
    pub name: Arc<str>,
    pub spec: Arc<Spec>,
    pub addr: SocketAddr,
    pub secret: String,
    pub(super) slots: Vec<watch::Receiver<Option<Arc<Proc>>>>,
    pub(super) callers: Mutex<HashMap<String, Caller>>,
    pub(super) sessions: Mutex<HashMap<Arc<str>, Arc<Session>>>,
    /// On-demand processes running or starting (`max_processes` bounds it).
    pub(super) on_demand: AtomicUsize,
    pub(super) next: AtomicUsize,
    /// The pool's `balance` is `least_request`: a shared process with the fewest calls.
    pub least_request: AtomicBool,
    pub(super) stop: watch::Sender<bool>,
    /// The last start failed (readiness; requests do not wait for a start then).
    pub(super) failing: Arc<AtomicBool>,
    /// A probe start is running (`per_principal` readiness).
    pub(super) probing: AtomicBool,
    pub(super) handle: tokio::runtime::Handle,
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

impl Unavailable {
    /// What the client is told (it may try again).
    pub fn detail(self, group: &Group) -> String {
        let pool = &group.name;
        match self {
            Unavailable::Full => format!(
                "mcp-edge: stdio pool {pool} runs max_processes ({}) processes; try again later",
                group.spec.max_processes
            ),
            Unavailable::NoProcess(why) if why.is_empty() => {
                format!("mcp-edge: stdio pool {pool} has no running process")
            }
            Unavailable::NoProcess(why) => format!("mcp-edge: stdio pool {pool}: {why}"),
            Unavailable::Refused(_) => format!("mcp-edge: stdio pool {pool}: initialize refused"),
        }
    }
}

impl Group {
    /// Bind the local listener, start the shared processes' supervisors and the server.
    /// A group for `spec` whose server listens at `addr` (not started: [`super::launch`]),
    /// and the senders of its shared slots.
    pub(super) fn new(
        handle: &tokio::runtime::Handle,
        name: &str,
        spec: Arc<Spec>,
        addr: std::net::SocketAddr,
        stop: watch::Sender<bool>,
    ) -> std::io::Result<(Arc<Group>, Vec<Slot>)> {
        let shared = match spec.isolation {
            Isolation::PerPrincipal => 0,
            _ => spec.processes,
        };
        let (senders, slots): (Vec<_>, Vec<_>) = (0..shared).map(|_| watch::channel(None)).unzip();
        let mut secret = [0u8; 24];
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut secret)
            .map_err(|_| std::io::Error::other("no randomness for the pool's secret"))?;
        let group = Arc::new(Group {
            name: Arc::from(name),
            spec,
            addr,
            secret: super::hex(&secret),
            slots,
            callers: Mutex::new(HashMap::new()),
            sessions: Mutex::new(HashMap::new()),
            on_demand: AtomicUsize::new(0),
            next: AtomicUsize::new(0),
            least_request: AtomicBool::new(false),
            stop,
            failing: Arc::new(AtomicBool::new(false)),
            probing: AtomicBool::new(false),
            handle: handle.clone(),
        });
        Ok((group, senders))
    }

    /// Ready: a shared process runs; with none configured, the command starts and answers
    /// `initialize` (a probe at start, and again after a failed start, until one works).
    pub fn ready(&self) -> bool {
        if self.slots.is_empty() {
            return !self.failing.load(Ordering::Relaxed) && !self.probing.load(Ordering::Relaxed);
        }
        self.slots.iter().any(|s| live(s).is_some())
    }

    /// A shared process for a request without a session: round-robin over the running
    /// ones (with `least_request`, the one with the fewest calls in flight), waiting for one
    /// to start if none runs.
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
        let mut running = (0..n)
            .map(|k| (start + k) % n)
            .filter_map(|i| live(&self.slots[i]).map(|p| (i, p)));
        let picked = match self.least_request.load(Ordering::Relaxed) {
            // The first of the least busy: ties go in turn.
            true => running.min_by_key(|(_, p)| p.in_flight()),
            false => running.next(),
        };
        if let Some(picked) = picked {
            return Ok(picked);
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
    pub(super) async fn reserve(&self) -> Result<(), Unavailable> {
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

    pub(super) fn release(&self) {
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
                Ok(()) => match group
                    .start_initialised(None, &EDGE_INIT, true, Place::principal(&caller))
                    .await
                {
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
                .start_initialised(Some(id.clone()), &params, true, Place::session(&id))
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

    /// `mcp_edge_stdio_processes{pool}`: processes running now.
    pub(super) fn publish(&self) {
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

    pub fn stop_grace(&self) -> Duration {
        self.spec.stop_grace
    }

    pub(super) fn lock_callers(&self) -> std::sync::MutexGuard<'_, HashMap<String, Caller>> {
        self.callers.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn lock_sessions(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, Arc<Session>>> {
        self.sessions.lock().unwrap_or_else(|e| e.into_inner())
    }
}

pub(super) fn live(slot: &watch::Receiver<Option<Arc<Proc>>>) -> Option<Arc<Proc>> {
    slot.borrow().as_ref().filter(|p| p.is_alive()).cloned()
}
