//! stdio pools (`[[pools]] command = [...]`): MCP servers that speak only stdio, run and
//! supervised by the edge, and served to HTTP clients.
//!
//! Each stdio pool is one member as far as the rest of the edge knows: a Streamable HTTP
//! server the edge runs on `127.0.0.1` (an ephemeral port), reached through the same proxy
//! path as any member. So validation, identity, policy, rate limits, legacy session tokens
//! (sealed, naming this member), metrics and the access log apply unchanged. Requests from
//! the proxy carry a per-pool secret (a local process that finds the port cannot use it) and
//! the caller's binding (principal, else credential digest) for `per_principal` pools.
//!
//! Behind it ([`group::Group`]):
//! - `shared`: `processes` processes serve everyone, round-robin for stateless requests; a
//!   legacy session stays on the process that answered its `initialize`. The edge performs
//!   the `initialize` handshake itself, once per process.
//! - `per_principal`: one process per caller (issuer + subject, else the credential's
//!   digest, else one for anonymous callers), started on first use.
//! - `per_session`: each legacy session gets its own process, initialised with the
//!   client's own `initialize` (so its capabilities reach the server, and the server's
//!   requests reach it); 2026-07-28 requests, which have no session, use the shared
//!   processes.
//!
//! A shared process that ends is restarted with backoff; its sessions carry on with the new
//! one. An on-demand process is started again on next use (`per_principal`) or ends its
//! session (`per_session`: 404, the client re-initialises). Idle on-demand processes are
//! stopped after `idle_ms`; their number is bounded by `max_processes`.
//!
//! Supervision: each process leads a session of its own ([`launcher`]) and is stopped whole,
//! SIGTERM then SIGKILL after `stop_grace_ms` to everything in it ([`child`]); a process that
//! stops answering is noticed by a ping and one over its memory limit is stopped
//! ([`watchdog`]); its stderr reaches the log within a bound ([`stderr`]); isolated processes
//! get directories of their own ([`scratch`]).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, LazyLock, Mutex, Weak};
use std::time::{Duration, Instant};

mod answers;
pub mod calls;
pub mod child;
mod exchange;
pub mod group;
pub mod launcher;
pub mod process;
mod scratch;
mod server;
mod stderr;
mod stop;
mod supervise;
mod tree;
mod watchdog;

pub use group::Group;

/// Header carrying the pool's secret from the proxy to its stdio member.
pub const SECRET_HEADER: &str = "x-mcp-edge-stdio-key";
/// Header carrying the caller's binding (hex) from the proxy to its stdio member.
pub const CALLER_HEADER: &str = "x-mcp-edge-caller";
/// Header saying the request's `traceparent` is the edge's own span (tracing is on): the
/// stdio member writes it into the message. Without it, the message is left as it is.
pub const TRACED_HEADER: &str = "x-mcp-edge-traced";

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Isolation {
    #[default]
    Shared,
    PerSession,
    PerPrincipal,
}

/// How to run a pool's processes (`[[pools]] command`, …).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spec {
    pub command: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub cwd: Option<PathBuf>,
    /// Shared processes (`shared`; `per_session` uses them for 2026-07-28 requests).
    pub processes: usize,
    pub isolation: Isolation,
    /// On-demand processes (`per_session`, `per_principal`) at most.
    pub max_processes: usize,
    /// An on-demand process (and a legacy session) unused this long is stopped (forgotten).
    pub idle: Duration,
    /// Start to `initialize` answered.
    pub start_timeout: Duration,
    /// SIGTERM to SIGKILL.
    pub stop_grace: Duration,
    /// Each process gets a directory of its own under this one.
    pub scratch_dir: Option<PathBuf>,
    /// A process's directory outlives it.
    pub keep_scratch: bool,
    /// Nothing read this long: a `ping` (none: never).
    pub liveness_interval: Option<Duration>,
    /// A `ping` unanswered this long: hung.
    pub liveness_timeout: Duration,
    /// Resident bytes of a process and all it started, at most.
    pub memory_limit_bytes: Option<u64>,
    /// `RLIMIT_NOFILE` of each process.
    pub open_files_limit: Option<u64>,
    /// `RLIMIT_CPU` of each process (seconds).
    pub cpu_seconds_limit: Option<u64>,
    /// stderr bytes a process may write to the log per second.
    pub stderr_bytes_per_second: u64,
}

static EPOCH: LazyLock<Instant> = LazyLock::new(Instant::now);

/// Milliseconds since the first call (for idle times).
pub fn now_ms() -> u64 {
    EPOCH.elapsed().as_millis() as u64
}

/// The runtime every pool's processes and HTTP server run on: one thread of its own, so
/// they live as long as the edge whatever Pingora's services do.
fn handle() -> Option<tokio::runtime::Handle> {
    static HANDLE: LazyLock<Option<tokio::runtime::Handle>> = LazyLock::new(|| {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(4));
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .thread_name("mcp-edge-stdio")
            .enable_all()
            .build()
            .map_err(|e| log::error!("stdio pools: cannot start their runtime: {e}"))
            .ok()?;
        let handle = rt.handle().clone();
        // The runtime lives for the process (its tasks are the pools' supervisors).
        std::mem::forget(rt);
        if std::process::id() == 1 {
            // A container's PID 1 inherits every orphan: what a server started and left is
            // reaped, never a server still held for its session.
            handle.spawn(child::reap_orphans());
        }
        Some(handle)
    });
    HANDLE.clone()
}

/// Every group started, for [`stop_all`].
static GROUPS: Mutex<Vec<Weak<Group>>> = Mutex::new(Vec::new());

/// Start a pool's group: its local server, the supervisors of its shared processes, its
/// reaper (and, without shared processes, the probe that tells readiness).
pub fn launch(name: &str, spec: Arc<Spec>) -> std::io::Result<Arc<Group>> {
    let handle = handle().ok_or_else(|| std::io::Error::other("no runtime for stdio pools"))?;
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0))?;
    listener.set_nonblocking(true)?;
    let addr = listener.local_addr()?;
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let (group, slots) = Group::new(&handle, name, spec, addr, stop)?;
    crate::metrics::stdio_processes(&group.name, 0);
    for (i, tx) in slots.into_iter().enumerate() {
        let (weak, stopped) = (Arc::downgrade(&group), stopped.clone());
        handle.spawn(supervise::supervise(
            weak,
            i,
            tx,
            stopped,
            group.failing.clone(),
        ));
    }
    let _guard = handle.enter();
    let listener = tokio::net::TcpListener::from_std(listener)?;
    handle.spawn(server::serve(
        listener,
        Arc::downgrade(&group),
        stopped.clone(),
    ));
    handle.spawn(supervise::reap(Arc::downgrade(&group), stopped));
    if group.slots.is_empty() {
        group.probe();
    }
    let mut groups = GROUPS.lock().unwrap_or_else(|e| e.into_inner());
    groups.retain(|g| g.strong_count() > 0);
    groups.push(Arc::downgrade(&group));
    Ok(group)
}

/// Stop every process of every group (shutdown): SIGTERM, then SIGKILL after each group's
/// grace, waiting for that (and a little more) at most.
pub fn stop_all() {
    let groups: Vec<Arc<Group>> = GROUPS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter_map(Weak::upgrade)
        .collect();
    let Some(handle) = handle() else { return };
    // No process starts from now on; any not reaped yet (one a stop detached, one a reload
    // dropped, one a start just made) is stopped below too.
    let left = child::close();
    if groups.is_empty() && left.is_empty() {
        return;
    }
    let most = groups
        .iter()
        .map(|g| g.stop_grace())
        .max()
        .unwrap_or_default();
    // The grace, the wait after SIGKILL, and a moment more.
    let limit = most + stop::AFTER_KILL + Duration::from_secs(1);
    let (tx, rx) = std::sync::mpsc::channel();
    handle.spawn(async move {
        let groups = futures::future::join_all(groups.iter().map(|g| g.stop()));
        let rest = stop::stop_every(left, most);
        futures::future::join(groups, rest).await;
        let _ = tx.send(());
    });
    let _ = rx.recv_timeout(limit);
}

/// A request on its way to a stdio pool's member: the pool's secret, and who calls (the
/// principal's or the credential's binding; none: anonymous). Whatever the client sent
/// under these names is replaced, and its [`TRACED_HEADER`] removed (the trace stage sets
/// it).
pub fn mark(
    upstream: &mut pingora::http::RequestHeader,
    group: &Group,
    binding: Option<[u8; 16]>,
) -> pingora::Result<()> {
    upstream.insert_header(SECRET_HEADER, group.secret.as_str())?;
    upstream.remove_header(TRACED_HEADER);
    match binding {
        Some(b) => upstream.insert_header(CALLER_HEADER, hex(&b))?,
        None => upstream.insert_header(CALLER_HEADER, "anonymous")?,
    }
    Ok(())
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
