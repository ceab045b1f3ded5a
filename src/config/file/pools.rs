//! `[[pools]]`, with `health` and `tls`.

use std::num::{NonZeroU32, NonZeroU64};

use serde::Deserialize;

use super::defaults;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolSection {
    pub name: String,
    /// Static members: `IP:port`, or `{ address = "IP:port", weight = N }`.
    #[serde(default)]
    pub members: Vec<MemberEntry>,
    /// `host:port` re-resolved on an interval (instead of `members`).
    pub dns: Option<String>,
    #[serde(default = "dns_interval")]
    pub dns_interval_ms: NonZeroU64,
    #[serde(default)]
    pub health: HealthSection,
    /// The `Host` sent to members (a remote server's own name); default: the client's.
    pub host: Option<String>,
    pub tls: Option<PoolTlsSection>,
    /// A stdio server the edge runs (instead of `members` or `dns`): program and arguments.
    pub command: Option<Vec<String>>,
    /// Environment for `command`: these, plus a few of the edge's own
    /// ([`crate::stdio::child::PASSED_ENV`]); nothing else of the edge's.
    #[serde(default)]
    pub env: std::collections::BTreeMap<String, String>,
    /// Working directory for `command`; default: the edge's.
    pub cwd: Option<std::path::PathBuf>,
    /// Shared processes (`isolation = "shared"`, and `per_session`'s 2026-07-28 traffic).
    #[serde(default = "processes")]
    pub processes: NonZeroU32,
    #[serde(default)]
    pub isolation: crate::stdio::Isolation,
    /// On-demand processes (`per_session`, `per_principal`) at most.
    #[serde(default = "max_processes")]
    pub max_processes: NonZeroU32,
    /// An on-demand process or legacy session unused this long is stopped (forgotten).
    #[serde(default = "idle_ms")]
    pub idle_ms: NonZeroU64,
    /// Start to the `initialize` answer.
    #[serde(default = "start_timeout_ms")]
    pub start_timeout_ms: NonZeroU64,
    /// SIGTERM to SIGKILL when stopping a process (and all it started).
    #[serde(default = "stop_grace_ms")]
    pub stop_grace_ms: NonZeroU64,
    /// A directory under which each process gets one of its own (`{scratch}`).
    pub scratch_dir: Option<std::path::PathBuf>,
    /// Keep a process's directory when it stops.
    #[serde(default)]
    pub keep_scratch: bool,
    /// Nothing read from a process this long: a `ping` over its pipe; 0: never.
    #[serde(default = "liveness_interval_ms")]
    pub liveness_interval_ms: u64,
    /// A `ping` unanswered this long: the process is hung.
    #[serde(default = "liveness_timeout_ms")]
    pub liveness_timeout_ms: NonZeroU64,
    /// Resident memory of a process and all it started, at most.
    pub memory_limit_bytes: Option<NonZeroU64>,
    /// `RLIMIT_NOFILE` of each process.
    pub open_files_limit: Option<NonZeroU64>,
    /// `RLIMIT_CPU` of each process, in seconds.
    pub cpu_seconds_limit: Option<NonZeroU64>,
    /// What a process may write to the log through its stderr, per second.
    #[serde(default = "stderr_bytes_per_second")]
    pub stderr_bytes_per_second: NonZeroU64,
    /// How requests are spread: `round_robin` or `least_request`.
    #[serde(default)]
    pub balance: BalanceName,
    /// Requests one member holds at most (long-lived streams apart); more wait in the queue.
    pub max_in_flight: Option<NonZeroU32>,
    /// Long-lived streams one member holds at most.
    pub max_streams_per_member: Option<NonZeroU32>,
    /// Requests waiting for a member's room at most.
    #[serde(default = "queue_depth")]
    pub queue_depth: u32,
    /// How long a request waits for room.
    #[serde(default = "queue_ms")]
    pub queue_ms: NonZeroU64,
    /// Whose limit `max_in_flight` and `max_streams_per_member` are: `replica` or `fleet`.
    #[serde(default)]
    pub limits_scope: ScopeName,
    /// A member that joins or comes back ramps its share up over this long; 0: at once.
    #[serde(default)]
    pub slow_start_ms: u64,
    /// What the members are told of the caller: nothing, a signed assertion, a static
    /// credential.
    pub credential: Option<super::CredentialSection>,
}

/// A static member: its address, or its address and weight.
#[derive(Debug, Deserialize, Clone)]
#[serde(untagged)]
pub enum MemberEntry {
    Address(String),
    Weighted(WeightedMember),
}

#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct WeightedMember {
    pub address: String,
    #[serde(default = "one")]
    pub weight: NonZeroU32,
}

impl MemberEntry {
    pub fn address(&self) -> &str {
        match self {
            MemberEntry::Address(a) => a,
            MemberEntry::Weighted(w) => &w.address,
        }
    }
    pub fn weight(&self) -> u32 {
        match self {
            MemberEntry::Address(_) => 1,
            MemberEntry::Weighted(w) => w.weight.get(),
        }
    }
}

fn one() -> NonZeroU32 {
    NonZeroU32::MIN
}

#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum BalanceName {
    #[default]
    RoundRobin,
    LeastRequest,
}

#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum ScopeName {
    #[default]
    Replica,
    Fleet,
}

fn queue_depth() -> u32 {
    defaults::QUEUE_DEPTH
}
fn queue_ms() -> NonZeroU64 {
    defaults::QUEUE_MS
}

fn processes() -> NonZeroU32 {
    defaults::STDIO_PROCESSES
}
fn max_processes() -> NonZeroU32 {
    defaults::STDIO_MAX_PROCESSES
}
fn idle_ms() -> NonZeroU64 {
    defaults::STDIO_IDLE_MS
}
fn start_timeout_ms() -> NonZeroU64 {
    defaults::STDIO_START_TIMEOUT_MS
}
fn stop_grace_ms() -> NonZeroU64 {
    defaults::STDIO_STOP_GRACE_MS
}
fn liveness_interval_ms() -> u64 {
    defaults::STDIO_LIVENESS_INTERVAL_MS
}
fn liveness_timeout_ms() -> NonZeroU64 {
    defaults::STDIO_LIVENESS_TIMEOUT_MS
}
fn stderr_bytes_per_second() -> NonZeroU64 {
    defaults::STDIO_STDERR_BYTES_PER_SECOND
}

fn dns_interval() -> NonZeroU64 {
    defaults::DNS_INTERVAL_MS
}

/// `[pools.health] check`; unset: `mcp` for a pool behind `[[routes]]`, `tcp` for one only
/// behind `[[passthrough]]` (not an MCP server).
#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum CheckName {
    Tcp,
    /// A 2026-07-28 `server/discover` POST (and, once per server, a legacy `initialize`):
    /// health and the revisions the member speaks.
    Mcp,
    None,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HealthSection {
    pub check: Option<CheckName>,
    /// Path for the `mcp` probe; default: the first route's path using this pool.
    pub path: Option<String>,
    pub interval_ms: NonZeroU64,
    pub timeout_ms: NonZeroU64,
    pub unhealthy_after: NonZeroU32,
    pub healthy_after: NonZeroU32,
    pub eject_ms: NonZeroU64,
    /// Failed requests in a row that eject a member; 0: never.
    pub consecutive_failures: u32,
    pub max_eject_ms: NonZeroU64,
    pub max_ejection_percent: u8,
}

impl Default for HealthSection {
    fn default() -> Self {
        HealthSection {
            check: None,
            path: None,
            interval_ms: defaults::HEALTH_INTERVAL_MS,
            timeout_ms: defaults::HEALTH_TIMEOUT_MS,
            unhealthy_after: defaults::UNHEALTHY_AFTER,
            healthy_after: defaults::HEALTHY_AFTER,
            eject_ms: defaults::EJECT_MS,
            consecutive_failures: defaults::CONSECUTIVE_FAILURES,
            max_eject_ms: defaults::MAX_EJECT_MS,
            max_ejection_percent: defaults::MAX_EJECTION_PERCENT,
        }
    }
}

/// `[pools.tls]`: the members speak HTTPS.
#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct PoolTlsSection {
    /// The name sent as SNI and checked against the members' certificates; default: the
    /// host of `dns`, else each member's IP.
    pub sni: Option<String>,
    /// Verify the certificate chain and the name (default true).
    #[serde(default = "yes")]
    pub verify: bool,
    /// PEM CA bundle to trust instead of the system roots.
    pub ca_file: Option<String>,
    /// Client certificate chain and key for mutual TLS.
    pub client_cert: Option<String>,
    pub client_key: Option<String>,
}

fn yes() -> bool {
    true
}
