//! The configuration file format: serde types that mirror the documented TOML one to one.
//! Unknown keys are errors; scalar defaults and "greater than 0" come from the types here
//! (`#[serde(default)]`, `NonZero*`), so [`super`] only checks what types cannot say.

use std::net::SocketAddr;
use std::num::{NonZeroU64, NonZeroUsize};

use serde::Deserialize;

mod credentials;
mod fleet;
mod identity;
mod pools;
mod routes;

pub use credentials::{AssertionsSection, ClientAuthMethod, CredentialKind, CredentialSection};
pub use fleet::{FleetSection, RateLimitsSection};
pub use identity::{
    IdentitySection, JwtSection, PolicyRuleSection, RateLimitSection, ScopeRuleSection,
};
pub use pools::{
    BalanceName, CheckName, HealthSection, MemberEntry, PoolSection, PoolTlsSection, ScopeName,
};
pub use routes::{PassthroughSection, RouteSection};

/// Defaults, in one place (docs/configuration.md lists the same values).
pub mod defaults {
    use std::num::{NonZeroU32, NonZeroU64, NonZeroUsize};

    const fn size(n: usize) -> NonZeroUsize {
        match NonZeroUsize::new(n) {
            Some(v) => v,
            None => panic!("a default must not be 0"),
        }
    }
    const fn long(n: u64) -> NonZeroU64 {
        match NonZeroU64::new(n) {
            Some(v) => v,
            None => panic!("a default must not be 0"),
        }
    }
    const fn count(n: u32) -> NonZeroU32 {
        match NonZeroU32::new(n) {
            Some(v) => v,
            None => panic!("a default must not be 0"),
        }
    }

    pub const MAX_BODY_BYTES: NonZeroUsize = size(4 * 1024 * 1024);
    pub const STDIO_PROCESSES: NonZeroU32 = count(1);
    pub const STDIO_MAX_PROCESSES: NonZeroU32 = count(32);
    pub const STDIO_IDLE_MS: NonZeroU64 = long(600_000);
    /// `npx` fetching a package on first start can take a while.
    pub const STDIO_START_TIMEOUT_MS: NonZeroU64 = long(60_000);
    pub const STDIO_STOP_GRACE_MS: NonZeroU64 = long(5_000);
    pub const FLEET_INTERVAL_MS: NonZeroU64 = long(5_000);
    pub const FLEET_TIMEOUT_MS: NonZeroU64 = long(1_000);
    /// "A few milliseconds": Redis on the same network answers in well under one.
    pub const RATE_DECISION_TIMEOUT_MS: NonZeroU64 = long(5);
    /// A `ping` after this much silence; with the timeout, a server that blocks its event
    /// loop for 25 s on purpose is taken for hung (raise both, or 0 turns it off).
    pub const STDIO_LIVENESS_INTERVAL_MS: u64 = 15_000;
    pub const STDIO_LIVENESS_TIMEOUT_MS: NonZeroU64 = long(10_000);
    pub const STDIO_STDERR_BYTES_PER_SECOND: NonZeroU64 = long(16 * 1024);
    pub const MAX_HEADER_BYTES: NonZeroUsize = size(32 * 1024);
    pub const MAX_CONCURRENT_REQUESTS: NonZeroUsize = size(10_000);
    /// About 70 KiB each when idle (docs/benchmarks.md): 4,000 streams ≈ 280 MiB.
    pub const MAX_STREAMS: NonZeroUsize = size(4_000);
    /// Below the usual 65,536 descriptors, leaving room for upstream connections.
    pub const MAX_CONNECTIONS: NonZeroUsize = size(20_000);
    /// The memory budget without a container limit to derive it from (with one: half of it).
    pub const MEMORY_BUDGET_BYTES: NonZeroUsize = size(256 * 1024 * 1024);
    /// Slower uploads are cut (408) once the grace period has passed.
    pub const MIN_UPLOAD_BYTES_PER_SECOND: NonZeroUsize = size(16 * 1024);
    pub const REQUEST_HEAD_MS: NonZeroU64 = long(10_000);
    pub const CONNECT_MS: NonZeroU64 = long(2_000);
    pub const UPSTREAM_READ_MS: NonZeroU64 = long(60_000);
    /// An idle event stream (a legacy session's GET stream) stays open a day.
    pub const STREAM_IDLE_MS: NonZeroU64 = long(24 * 3600 * 1000);
    pub const IDLE_MS: NonZeroU64 = long(60_000);
    /// Below the 5 s keep-alive of the Node and Python SDK servers' HTTP stacks.
    pub const UPSTREAM_IDLE_MS: NonZeroU64 = long(4_000);
    /// Access-log lines waiting for the writer (about 300 bytes each) before lines are dropped.
    pub const ACCESS_LOG_QUEUE_LINES: NonZeroUsize = size(16_384);
    pub const REQUEST_BODY_MS: NonZeroU64 = long(30_000);
    pub const GRACE_PERIOD_SECONDS: u64 = 5;
    pub const SHUTDOWN_TIMEOUT_SECONDS: u64 = 5;
    pub const H2C: bool = true;
    /// How often TLS listeners look for changed certificate files (cert-manager rotation).
    pub const TLS_WATCH_MS: u64 = 10_000;
    pub const CORS_MAX_AGE_SECONDS: u64 = 600;
    pub const SESSION_MAX_AGE_SECONDS: NonZeroU64 = long(24 * 3600);
    pub const BIND_CREDENTIAL: bool = true;
    pub const DNS_INTERVAL_MS: NonZeroU64 = long(5_000);
    pub const HEALTH_INTERVAL_MS: NonZeroU64 = long(5_000);
    pub const HEALTH_TIMEOUT_MS: NonZeroU64 = long(1_000);
    pub const UNHEALTHY_AFTER: NonZeroU32 = count(2);
    pub const HEALTHY_AFTER: NonZeroU32 = count(1);
    pub const EJECT_MS: NonZeroU64 = long(10_000);
    pub const CONSECUTIVE_FAILURES: u32 = 5;
    pub const MAX_EJECT_MS: NonZeroU64 = long(300_000);
    pub const MAX_EJECTION_PERCENT: u8 = 50;
    pub const QUEUE_DEPTH: u32 = 128;
    pub const QUEUE_MS: NonZeroU64 = long(5_000);
    pub const MAX_TOKEN_BYTES: NonZeroUsize = size(8 * 1024);
    pub const JWKS_REFRESH_SECONDS: NonZeroU64 = long(300);
    pub const JWKS_TIMEOUT_MS: NonZeroU64 = long(2_000);
    pub const JWT_LEEWAY_SECONDS: u64 = 30;
    pub const TRACE_SAMPLE_RATIO: f64 = 1.0;
    /// Ended spans waiting for export (about 1 KiB each) before spans are dropped.
    pub const TRACE_QUEUE_SPANS: NonZeroUsize = size(8_192);
    pub const TRACE_BATCH_SPANS: NonZeroUsize = size(512);
    pub const TRACE_FLUSH_MS: NonZeroU64 = long(1_000);
    pub const TRACE_EXPORT_TIMEOUT_MS: NonZeroU64 = long(5_000);
    pub const TRACE_SERVICE_NAME: &str = "mcp-edge";

    /// Query parameters that carry the HTTP+SSE session (TypeScript, Python SDKs).
    pub fn session_params() -> Vec<String> {
        vec!["sessionId".to_string(), "session_id".to_string()]
    }

    /// Every revision mcp-edge understands; a route accepts all of them unless told otherwise.
    pub fn versions() -> Vec<String> {
        crate::mcp::revisions().map(str::to_string).collect()
    }

    pub fn h2c() -> bool {
        H2C
    }
}

/// A route's `versions`: `"auto"` or a list of revisions.
#[derive(Debug, Deserialize, Clone, PartialEq, Eq)]
#[serde(untagged)]
pub enum Versions {
    Keyword(String),
    List(Vec<String>),
}

impl Default for Versions {
    fn default() -> Self {
        Versions::Keyword("auto".to_string())
    }
}

impl Versions {
    /// The listed revisions (every known one for `"auto"`), or what is wrong.
    pub fn list(&self) -> Result<Vec<String>, String> {
        match self {
            Versions::Keyword(k) if k == "auto" => Ok(defaults::versions()),
            Versions::Keyword(k) => Err(format!(
                "'{k}' is neither \"auto\" nor a list of protocol revisions"
            )),
            Versions::List(list) => Ok(list.clone()),
        }
    }
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct File {
    #[serde(default)]
    pub server: ServerSection,
    #[serde(default)]
    pub listeners: Vec<ListenerSection>,
    pub metrics: Option<MetricsSection>,
    pub tracing: Option<TracingSection>,
    #[serde(default)]
    pub limits: LimitsSection,
    #[serde(default)]
    pub timeouts: TimeoutsSection,
    pub sessions: Option<SessionsSection>,
    #[serde(default)]
    pub access_log: AccessLogSection,
    #[serde(default)]
    pub pools: Vec<PoolSection>,
    #[serde(default)]
    pub routes: Vec<RouteSection>,
    /// Plain HTTP pass-through routes (OAuth discovery documents and other endpoints).
    #[serde(default)]
    pub passthrough: Vec<PassthroughSection>,
    #[serde(default)]
    pub forwarding: ForwardingSection,
    /// Who is calling: JWTs and API keys (routes opt in with `auth`).
    pub identity: Option<IdentitySection>,
    /// The edge's own replicas.
    pub fleet: Option<FleetSection>,
    /// Where rate limits are kept for the whole fleet.
    pub rate_limits: Option<RateLimitsSection>,
    /// The keys identity assertions are signed with (`[pools.credential] kind = "identity"`).
    pub assertions: Option<AssertionsSection>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerSection {
    /// Worker threads per service; default: the number of CPUs.
    pub threads: Option<NonZeroUsize>,
    pub grace_period_seconds: u64,
    pub graceful_shutdown_timeout_seconds: u64,
    /// Poll the config file for changes this often and reload (0: only on SIGHUP).
    pub config_watch_ms: u64,
}

impl Default for ServerSection {
    fn default() -> Self {
        ServerSection {
            threads: None,
            grace_period_seconds: defaults::GRACE_PERIOD_SECONDS,
            graceful_shutdown_timeout_seconds: defaults::SHUTDOWN_TIMEOUT_SECONDS,
            config_watch_ms: 0,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListenerSection {
    pub address: SocketAddr,
    #[serde(default = "defaults::h2c")]
    pub h2c: bool,
    /// TLS on this listener (HTTPS; HTTP/2 and HTTP/1.1 by ALPN).
    pub tls: Option<ListenerTlsSection>,
    /// A client's W3C trace context: `"link"` (a new trace, linked to the client's) or
    /// `"continue"` (the edge's span is the client's span's child).
    #[serde(default)]
    pub trace_context: TraceContext,
}

/// What a listener does with the trace context a client sends.
#[derive(Debug, Deserialize, Default, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum TraceContext {
    /// A new trace at the edge, with a link to the client's span: a public edge does not let
    /// callers choose trace ids or sampling.
    #[default]
    Link,
    /// The client's trace continues through the edge (a client the operator trusts).
    Continue,
}

/// `[listeners.tls]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListenerTlsSection {
    /// The first is served to clients whose SNI names no other certificate.
    pub certificates: Vec<CertificateSection>,
    /// Look for changed certificate files this often (0: only on SIGHUP).
    #[serde(default = "tls_watch")]
    pub watch_ms: u64,
}

fn tls_watch() -> u64 {
    defaults::TLS_WATCH_MS
}

/// A PEM certificate chain (leaf first) and its private key.
#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct CertificateSection {
    pub cert: String,
    pub key: String,
}

/// `[forwarding]`: what the edge tells upstreams about the client.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ForwardingSection {
    /// Set `X-Forwarded-For`, `-Proto` and `-Host`.
    pub x_forwarded: bool,
    /// Set RFC 7239 `Forwarded`.
    pub forwarded: bool,
    /// Peers (IP or CIDR) whose forwarding headers are kept and appended to; from anyone
    /// else they are replaced.
    pub trusted_proxies: Vec<String>,
}

impl Default for ForwardingSection {
    fn default() -> Self {
        ForwardingSection {
            x_forwarded: true,
            forwarded: false,
            trusted_proxies: Vec::new(),
        }
    }
}

/// `[access_log]`: one JSON line per request, written off the request path.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AccessLogSection {
    pub enabled: bool,
    /// `"stderr"`, `"stdout"` or a file path (appended to).
    pub output: String,
    pub queue_lines: NonZeroUsize,
    /// Log the names of a tool call's or prompt's arguments (never their values).
    pub argument_names: bool,
}

impl Default for AccessLogSection {
    fn default() -> Self {
        AccessLogSection {
            enabled: true,
            output: "stderr".into(),
            queue_lines: defaults::ACCESS_LOG_QUEUE_LINES,
            argument_names: false,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsSection {
    pub address: SocketAddr,
    /// Tool names `mcp_server_operation_duration_seconds` keeps as its `gen_ai_tool_name`
    /// label; every other tool is `_OTHER`.
    #[serde(default)]
    pub tool_names: Vec<String>,
}

/// `[tracing]`: OpenTelemetry spans exported over OTLP/HTTP (protobuf). Off without it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TracingSection {
    /// The collector's traces URL, `/v1/traces` included (`http://collector:4318/v1/traces`).
    pub endpoint: String,
    /// Of the traces the edge starts, the share kept (0 to 1); a continued trace keeps its
    /// parent's decision.
    #[serde(default = "sample_ratio")]
    pub sample_ratio: f64,
    #[serde(default = "queue_spans")]
    pub queue_spans: NonZeroUsize,
    #[serde(default = "batch_spans")]
    pub batch_spans: NonZeroUsize,
    #[serde(default = "flush_ms")]
    pub flush_ms: NonZeroU64,
    #[serde(default = "export_timeout_ms")]
    pub export_timeout_ms: NonZeroU64,
    /// `service.name` (`OTEL_SERVICE_NAME` wins when set).
    #[serde(default = "service_name")]
    pub service_name: String,
}

fn sample_ratio() -> f64 {
    defaults::TRACE_SAMPLE_RATIO
}
fn queue_spans() -> NonZeroUsize {
    defaults::TRACE_QUEUE_SPANS
}
fn batch_spans() -> NonZeroUsize {
    defaults::TRACE_BATCH_SPANS
}
fn flush_ms() -> NonZeroU64 {
    defaults::TRACE_FLUSH_MS
}
fn export_timeout_ms() -> NonZeroU64 {
    defaults::TRACE_EXPORT_TIMEOUT_MS
}
fn service_name() -> String {
    defaults::TRACE_SERVICE_NAME.to_string()
}

#[derive(Debug, Deserialize, Clone, Copy)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsSection {
    pub max_body_bytes: NonZeroUsize,
    pub max_header_bytes: NonZeroUsize,
    pub max_concurrent_requests: NonZeroUsize,
    pub max_streams: NonZeroUsize,
    pub max_connections: NonZeroUsize,
    /// Default: half the container's memory limit (cgroup), else 256 MiB.
    pub memory_budget_bytes: Option<NonZeroUsize>,
    pub min_upload_bytes_per_second: NonZeroUsize,
}

impl Default for LimitsSection {
    fn default() -> Self {
        LimitsSection {
            max_body_bytes: defaults::MAX_BODY_BYTES,
            max_header_bytes: defaults::MAX_HEADER_BYTES,
            max_concurrent_requests: defaults::MAX_CONCURRENT_REQUESTS,
            max_streams: defaults::MAX_STREAMS,
            max_connections: defaults::MAX_CONNECTIONS,
            memory_budget_bytes: None,
            min_upload_bytes_per_second: defaults::MIN_UPLOAD_BYTES_PER_SECOND,
        }
    }
}

#[derive(Debug, Deserialize, Clone, Copy)]
#[serde(deny_unknown_fields, default)]
pub struct TimeoutsSection {
    pub connect_ms: NonZeroU64,
    pub upstream_read_ms: NonZeroU64,
    pub stream_idle_ms: NonZeroU64,
    pub idle_ms: NonZeroU64,
    pub upstream_idle_ms: NonZeroU64,
    pub request_body_ms: NonZeroU64,
    pub request_head_ms: NonZeroU64,
}

impl Default for TimeoutsSection {
    fn default() -> Self {
        TimeoutsSection {
            connect_ms: defaults::CONNECT_MS,
            upstream_read_ms: defaults::UPSTREAM_READ_MS,
            stream_idle_ms: defaults::STREAM_IDLE_MS,
            idle_ms: defaults::IDLE_MS,
            upstream_idle_ms: defaults::UPSTREAM_IDLE_MS,
            request_body_ms: defaults::REQUEST_BODY_MS,
            request_head_ms: defaults::REQUEST_HEAD_MS,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SessionsSection {
    /// File holding the key ring (a mounted Kubernetes Secret).
    pub keys_file: Option<String>,
    /// Environment variable holding the key ring.
    pub keys_env: Option<String>,
    pub max_age_seconds: NonZeroU64,
    pub bind_credential: bool,
}

impl Default for SessionsSection {
    fn default() -> Self {
        SessionsSection {
            keys_file: None,
            keys_env: None,
            max_age_seconds: defaults::SESSION_MAX_AGE_SECONDS,
            bind_credential: defaults::BIND_CREDENTIAL,
        }
    }
}
