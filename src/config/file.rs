//! The configuration file format: serde types that mirror the documented TOML one to one.
//! Unknown keys are errors; scalar defaults and "greater than 0" come from the types here
//! (`#[serde(default)]`, `NonZero*`), so [`super`] only checks what types cannot say.

use std::net::SocketAddr;
use std::num::{NonZeroU32, NonZeroU64, NonZeroUsize};

use serde::Deserialize;

/// Defaults, in one place (the README's config reference lists the same values).
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
    pub const MAX_TOKEN_BYTES: NonZeroUsize = size(8 * 1024);
    pub const JWKS_REFRESH_SECONDS: NonZeroU64 = long(300);
    pub const JWKS_TIMEOUT_MS: NonZeroU64 = long(2_000);
    pub const JWT_LEEWAY_SECONDS: u64 = 30;

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
}

/// `[identity]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IdentitySection {
    pub jwt: Option<JwtSection>,
    /// TOML file of hashed API keys (a mounted Secret).
    pub api_keys_file: Option<String>,
    /// Where 401s point clients (RFC 9728); default:
    /// `{scheme}://{Host}/.well-known/oauth-protected-resource{route path}`.
    pub resource_metadata: Option<String>,
    /// `scheme://host[:port]` clients reach the edge at (TLS ended in front of it); default:
    /// the listener's scheme and the request's Host.
    pub resource_origin: Option<String>,
    /// Serve the Protected Resource Metadata document naming these authorization servers.
    #[serde(default)]
    pub authorization_servers: Vec<String>,
    #[serde(default)]
    pub scopes: Vec<String>,
    #[serde(default = "max_token_bytes")]
    pub max_token_bytes: NonZeroUsize,
}

fn max_token_bytes() -> NonZeroUsize {
    defaults::MAX_TOKEN_BYTES
}

/// `[identity.jwt]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JwtSection {
    pub issuer: String,
    /// Accepted `aud` values (one must be in the token's).
    pub audience: Vec<String>,
    pub jwks_file: Option<String>,
    pub jwks_url: Option<String>,
    /// PEM CA bundle trusted for `jwks_url` besides the system roots.
    pub jwks_ca_file: Option<String>,
    #[serde(default = "jwks_refresh")]
    pub jwks_refresh_seconds: NonZeroU64,
    #[serde(default = "jwks_timeout")]
    pub jwks_timeout_ms: NonZeroU64,
    #[serde(default = "jwt_algorithms")]
    pub algorithms: Vec<String>,
    #[serde(default = "leeway")]
    pub leeway_seconds: u64,
    /// The claim naming the caller's tenant.
    pub tenant_claim: Option<String>,
    /// The claim listing the caller's groups (an array, or a space-separated string).
    pub groups_claim: Option<String>,
}

fn jwks_refresh() -> NonZeroU64 {
    defaults::JWKS_REFRESH_SECONDS
}
fn jwks_timeout() -> NonZeroU64 {
    defaults::JWKS_TIMEOUT_MS
}
fn jwt_algorithms() -> Vec<String> {
    ["RS256", "ES256", "EdDSA"].map(String::from).to_vec()
}
fn leeway() -> u64 {
    defaults::JWT_LEEWAY_SECONDS
}

/// `[[routes.policy]]`: one rule.
#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct PolicyRuleSection {
    pub name: Option<String>,
    #[serde(default)]
    pub subjects: Vec<String>,
    #[serde(default)]
    pub tenants: Vec<String>,
    #[serde(default)]
    pub groups: Vec<String>,
    /// Tool names; `*` and `?` are wildcards.
    #[serde(default)]
    pub tools: Vec<String>,
    #[serde(default)]
    pub prompts: Vec<String>,
    /// Resource URI prefixes.
    #[serde(default)]
    pub resources: Vec<String>,
}

/// `[routes.rate_limit]`.
#[derive(Debug, Deserialize, Clone, Copy)]
#[serde(deny_unknown_fields)]
pub struct RateLimitSection {
    pub requests_per_second: NonZeroU32,
    /// Default: `requests_per_second`.
    pub burst: Option<NonZeroU32>,
    /// Each tool a caller calls: at most this many `tools/call` per second (within the
    /// caller's own rate).
    pub per_tool_requests_per_second: Option<NonZeroU32>,
    /// Default: `per_tool_requests_per_second`.
    pub per_tool_burst: Option<NonZeroU32>,
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

/// `[[passthrough]]`: requests to `path` (or any path under `path_prefix`) go to the pool as
/// they are, without MCP checks.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PassthroughSection {
    pub path: Option<String>,
    pub path_prefix: Option<String>,
    pub pool: String,
    #[serde(default)]
    pub allowed_origins: Vec<String>,
    #[serde(default)]
    pub allowed_hosts: Vec<String>,
    #[serde(default = "cors_max_age")]
    pub cors_max_age_seconds: u64,
}

fn cors_max_age() -> u64 {
    defaults::CORS_MAX_AGE_SECONDS
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
}

impl Default for AccessLogSection {
    fn default() -> Self {
        AccessLogSection {
            enabled: true,
            output: "stderr".into(),
            queue_lines: defaults::ACCESS_LOG_QUEUE_LINES,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsSection {
    pub address: SocketAddr,
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

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolSection {
    pub name: String,
    /// Static `IP:port` members.
    #[serde(default)]
    pub members: Vec<String>,
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
    /// ([`crate::stdio::process::PASSED_ENV`]); nothing else of the edge's.
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
    /// SIGTERM to SIGKILL when stopping a process.
    #[serde(default = "stop_grace_ms")]
    pub stop_grace_ms: NonZeroU64,
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

fn dns_interval() -> NonZeroU64 {
    defaults::DNS_INTERVAL_MS
}

/// `[pools.health] check`.
#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum CheckName {
    #[default]
    Tcp,
    /// A 2026-07-28 `server/discover` POST (and, once per server, a legacy `initialize`):
    /// health and the revisions the member speaks.
    Mcp,
    None,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HealthSection {
    pub check: CheckName,
    /// Path for the `mcp` probe; default: the first route's path using this pool.
    pub path: Option<String>,
    pub interval_ms: NonZeroU64,
    pub timeout_ms: NonZeroU64,
    pub unhealthy_after: NonZeroU32,
    pub healthy_after: NonZeroU32,
    pub eject_ms: NonZeroU64,
}

impl Default for HealthSection {
    fn default() -> Self {
        HealthSection {
            check: CheckName::default(),
            path: None,
            interval_ms: defaults::HEALTH_INTERVAL_MS,
            timeout_ms: defaults::HEALTH_TIMEOUT_MS,
            unhealthy_after: defaults::UNHEALTHY_AFTER,
            healthy_after: defaults::HEALTHY_AFTER,
            eject_ms: defaults::EJECT_MS,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteSection {
    pub path: String,
    pub pool: String,
    /// Public path prefix, stripped before forwarding (and put back in HTTP+SSE endpoints).
    #[serde(default)]
    pub prefix: String,
    /// Legacy HTTP+SSE: the upstream's GET stream path and its POST messages path.
    pub sse_path: Option<String>,
    pub messages_path: Option<String>,
    #[serde(default = "defaults::session_params")]
    pub session_params: Vec<String>,
    /// `"auto"` (the default: every revision mcp-edge knows) or a list; either way narrowed
    /// to what the pool's members say they speak.
    #[serde(default)]
    pub versions: Versions,
    #[serde(default)]
    pub allowed_origins: Vec<String>,
    /// Host header allowlist (DNS-rebinding defence): `host` or `host:port`; empty allows any.
    #[serde(default)]
    pub allowed_hosts: Vec<String>,
    /// How long browsers may cache the edge's answer to a CORS preflight.
    #[serde(default = "cors_max_age")]
    pub cors_max_age_seconds: u64,
    /// Serve legacy (2025) Streamable HTTP clients from 2026-07-28 members: the edge answers
    /// `initialize` and turns every later request into a stateless one.
    #[serde(default)]
    pub bridge_legacy: bool,
    /// `none` (default), `optional` or `required`: see `[identity]`.
    #[serde(default)]
    pub auth: crate::identity::AuthMode,
    /// Pass the client's `Authorization` to the server; default: only when `auth = "none"`.
    pub forward_credential: Option<bool>,
    /// Rules, first match decides (see the README).
    #[serde(default)]
    pub policy: Vec<PolicyRuleSection>,
    #[serde(default)]
    pub absent_as: crate::identity::policy::AbsentAs,
    pub rate_limit: Option<RateLimitSection>,
}
