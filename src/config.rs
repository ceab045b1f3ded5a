//! The configuration file (TOML, serde, unknown keys rejected) and its validated runtime form.
//!
//! [`File`] mirrors the documented format one to one; [`File::validate`] turns it into a
//! [`Runtime`] snapshot the proxy reads, or into a list of messages that each name the
//! offending key. Every default lives in [`defaults`].

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

use crate::mcp::origin::OriginPolicy;
use crate::mcp::rules::VersionPolicy;
use crate::routing::{CheckKind, HealthPolicy, Pool, Source};
use crate::session::KeyRing;

/// Defaults, in one place (the README's config reference lists the same values).
pub mod defaults {
    pub const MAX_BODY_BYTES: usize = 4 * 1024 * 1024;
    pub const MAX_HEADER_BYTES: usize = 32 * 1024;
    pub const MAX_CONCURRENT_REQUESTS: usize = 10_000;
    /// About 70 KiB each when idle (docs/benchmarks.md): 4,000 streams ≈ 280 MiB.
    pub const MAX_STREAMS: usize = 4_000;
    /// Below the usual 65,536 descriptors, leaving room for upstream connections.
    pub const MAX_CONNECTIONS: usize = 20_000;
    pub const CONNECT_MS: u64 = 2_000;
    pub const UPSTREAM_READ_MS: u64 = 60_000;
    pub const IDLE_MS: u64 = 60_000;
    pub const REQUEST_BODY_MS: u64 = 30_000;
    pub const GRACE_PERIOD_SECONDS: u64 = 5;
    pub const SHUTDOWN_TIMEOUT_SECONDS: u64 = 5;
    pub const H2C: bool = true;
    pub const SESSION_MAX_AGE_SECONDS: u64 = 24 * 3600;
    pub const BIND_CREDENTIAL: bool = true;
    pub const DNS_INTERVAL_MS: u64 = 5_000;
    pub const HEALTH_CHECK: &str = "tcp";
    pub const HEALTH_INTERVAL_MS: u64 = 5_000;
    pub const HEALTH_TIMEOUT_MS: u64 = 1_000;
    pub const UNHEALTHY_AFTER: u32 = 2;
    pub const HEALTHY_AFTER: u32 = 1;
    pub const EJECT_MS: u64 = 10_000;

    /// Query parameters that carry the HTTP+SSE session (TypeScript, Python SDKs).
    pub fn session_params() -> Vec<String> {
        vec!["sessionId".to_string(), "session_id".to_string()]
    }

    /// Every revision mcp-edge understands; a route accepts all of them unless told otherwise.
    pub fn versions() -> Vec<String> {
        let mut v = vec![crate::mcp::MODERN_VERSION.to_string()];
        v.extend(crate::mcp::LEGACY_VERSIONS.iter().map(|s| s.to_string()));
        v
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
    pub pools: Vec<PoolSection>,
    #[serde(default)]
    pub routes: Vec<RouteSection>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ServerSection {
    /// Worker threads per service; default: the number of CPUs.
    pub threads: Option<usize>,
    pub grace_period_seconds: Option<u64>,
    pub graceful_shutdown_timeout_seconds: Option<u64>,
    /// Poll the config file for changes this often and reload (0: only on SIGHUP).
    pub config_watch_ms: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListenerSection {
    pub address: String,
    pub h2c: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsSection {
    pub address: String,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct LimitsSection {
    pub max_body_bytes: Option<usize>,
    pub max_header_bytes: Option<usize>,
    pub max_concurrent_requests: Option<usize>,
    pub max_streams: Option<usize>,
    pub max_connections: Option<usize>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct TimeoutsSection {
    pub connect_ms: Option<u64>,
    pub upstream_read_ms: Option<u64>,
    pub idle_ms: Option<u64>,
    pub request_body_ms: Option<u64>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct SessionsSection {
    /// File holding the key ring (a mounted Kubernetes Secret).
    pub keys_file: Option<String>,
    /// Environment variable holding the key ring.
    pub keys_env: Option<String>,
    pub max_age_seconds: Option<u64>,
    pub bind_credential: Option<bool>,
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
    pub dns_interval_ms: Option<u64>,
    #[serde(default)]
    pub health: HealthSection,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct HealthSection {
    /// `tcp`, `mcp` (a `server/discover` probe) or `none`.
    pub check: Option<String>,
    /// Path for the `mcp` probe; default: the first route's path using this pool.
    pub path: Option<String>,
    pub interval_ms: Option<u64>,
    pub timeout_ms: Option<u64>,
    pub unhealthy_after: Option<u32>,
    pub healthy_after: Option<u32>,
    pub eject_ms: Option<u64>,
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
    pub session_params: Option<Vec<String>>,
    pub versions: Option<Vec<String>>,
    #[serde(default)]
    pub allowed_origins: Vec<String>,
    /// Host header allowlist (DNS-rebinding defence): `host` or `host:port`; empty allows any.
    #[serde(default)]
    pub allowed_hosts: Vec<String>,
}

/// Process-level settings that only take effect at start.
#[derive(Debug, Clone)]
pub struct Startup {
    pub threads: usize,
    pub grace_period: Duration,
    pub shutdown_timeout: Duration,
    pub listeners: Vec<Listener>,
    pub metrics: Option<SocketAddr>,
    pub config_watch: Option<Duration>,
}

#[derive(Debug, Clone)]
pub struct Listener {
    pub address: SocketAddr,
    pub h2c: bool,
}

#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_body_bytes: usize,
    pub max_header_bytes: usize,
    /// Requests in flight (streams included) per edge process; more get 503.
    pub max_concurrent_requests: usize,
    /// Long-lived streams (`subscriptions/listen`, legacy GET streams) per process.
    pub max_streams: usize,
    /// Open client connections per listener; more are closed at once.
    pub max_connections: usize,
}

#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    pub connect: Duration,
    pub upstream_read: Duration,
    pub idle: Duration,
    pub request_body: Duration,
}

#[derive(Debug)]
pub struct Route {
    /// Public Streamable HTTP path (prefix included): the route's name in metrics and logs.
    pub name: String,
    pub prefix: String,
    pub session_params: Vec<String>,
    pub pool: Arc<Pool>,
    pub versions: VersionPolicy,
    pub origins: OriginPolicy,
    /// Lower-cased `host` / `host:port` entries; empty allows any Host.
    pub hosts: Vec<String>,
}

/// Which of a route's endpoints a public path is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndpointKind {
    /// The Streamable HTTP endpoint (POST, and legacy GET/DELETE).
    Streamable,
    /// Legacy HTTP+SSE: the GET stream whose `endpoint` event names the messages URL.
    SseStream,
    /// Legacy HTTP+SSE: POSTs carrying the session in a query parameter.
    Messages,
}

#[derive(Debug, Clone)]
pub struct Endpoint {
    pub route: Arc<Route>,
    pub kind: EndpointKind,
}

/// Legacy session settings with the loaded key ring.
#[derive(Debug)]
pub struct Sessions {
    pub ring: KeyRing,
    pub max_age_secs: u64,
    pub bind_credential: bool,
}

/// One immutable snapshot of everything the request path reads.
#[derive(Debug)]
pub struct Runtime {
    pub endpoints: HashMap<String, Endpoint>,
    pub pools: HashMap<String, Arc<Pool>>,
    pub limits: Limits,
    pub timeouts: Timeouts,
    pub sessions: Option<Arc<Sessions>>,
}

impl Runtime {
    pub fn endpoint(&self, path: &str) -> Option<&Endpoint> {
        self.endpoints.get(path)
    }

    /// Carry member sets and health over from the snapshot this one replaces (reload), so a
    /// reload neither forgets discovered members nor resets health.
    pub fn inherit(&self, old: &Runtime) {
        for (name, pool) in &self.pools {
            if let Some(previous) = old.pools.get(name) {
                pool.inherit(previous);
            }
        }
    }

    /// Ready: every pool has at least one healthy member.
    pub fn ready(&self) -> bool {
        self.pools
            .values()
            .all(|p| p.members().iter().any(|m| m.is_healthy()))
    }
}

/// A loaded, validated configuration.
#[derive(Debug)]
pub struct Config {
    pub startup: Startup,
    pub runtime: Runtime,
}

impl Config {
    pub fn load(path: &Path) -> Result<Config, Vec<String>> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| vec![format!("{}: cannot read: {e}", path.display())])?;
        Config::parse(&text)
    }

    pub fn parse(text: &str) -> Result<Config, Vec<String>> {
        let file: File = toml::from_str(text).map_err(|e| vec![e.to_string()])?;
        file.validate()
    }
}

impl File {
    /// Check every key; collect all problems rather than stopping at the first.
    pub fn validate(self) -> Result<Config, Vec<String>> {
        let mut errs = Vec::new();

        let mut listeners = Vec::new();
        if self.listeners.is_empty() {
            errs.push("listeners: at least one [[listeners]] entry is required".to_string());
        }
        for (i, l) in self.listeners.iter().enumerate() {
            match l.address.parse::<SocketAddr>() {
                Ok(address) => listeners.push(Listener {
                    address,
                    h2c: l.h2c.unwrap_or(defaults::H2C),
                }),
                Err(e) => errs.push(format!(
                    "listeners[{i}].address: '{}' is not an IP:port ({e})",
                    l.address
                )),
            }
        }
        let metrics = self.metrics.as_ref().and_then(|m| match m.address.parse() {
            Ok(a) => Some(a),
            Err(e) => {
                errs.push(format!(
                    "metrics.address: '{}' is not an IP:port ({e})",
                    m.address
                ));
                None
            }
        });

        let limits = Limits {
            max_body_bytes: positive(
                &mut errs,
                "limits.max_body_bytes",
                self.limits.max_body_bytes,
                defaults::MAX_BODY_BYTES,
            ),
            max_header_bytes: positive(
                &mut errs,
                "limits.max_header_bytes",
                self.limits.max_header_bytes,
                defaults::MAX_HEADER_BYTES,
            ),
            max_concurrent_requests: positive(
                &mut errs,
                "limits.max_concurrent_requests",
                self.limits.max_concurrent_requests,
                defaults::MAX_CONCURRENT_REQUESTS,
            ),
            max_streams: positive(
                &mut errs,
                "limits.max_streams",
                self.limits.max_streams,
                defaults::MAX_STREAMS,
            ),
            max_connections: positive(
                &mut errs,
                "limits.max_connections",
                self.limits.max_connections,
                defaults::MAX_CONNECTIONS,
            ),
        };
        let ms = |errs: &mut Vec<String>, key: &str, v: Option<u64>, d: u64| {
            Duration::from_millis(positive(errs, key, v.map(|v| v as usize), d as usize) as u64)
        };
        let timeouts = Timeouts {
            connect: ms(
                &mut errs,
                "timeouts.connect_ms",
                self.timeouts.connect_ms,
                defaults::CONNECT_MS,
            ),
            upstream_read: ms(
                &mut errs,
                "timeouts.upstream_read_ms",
                self.timeouts.upstream_read_ms,
                defaults::UPSTREAM_READ_MS,
            ),
            idle: ms(
                &mut errs,
                "timeouts.idle_ms",
                self.timeouts.idle_ms,
                defaults::IDLE_MS,
            ),
            request_body: ms(
                &mut errs,
                "timeouts.request_body_ms",
                self.timeouts.request_body_ms,
                defaults::REQUEST_BODY_MS,
            ),
        };

        let mut pools: HashMap<String, Arc<Pool>> = HashMap::new();
        for (i, p) in self.pools.iter().enumerate() {
            if p.name.is_empty() {
                errs.push(format!("pools[{i}].name: must not be empty"));
            }
            if pools.contains_key(&p.name) {
                errs.push(format!("pools[{i}].name: duplicate pool '{}'", p.name));
            }
            let source = match (&p.dns, p.members.is_empty()) {
                (Some(_), false) => {
                    errs.push(format!(
                        "pools[{i}].dns: use either members or dns, not both"
                    ));
                    continue;
                }
                (Some(name), true) => {
                    if !name
                        .rsplit_once(':')
                        .is_some_and(|(h, port)| !h.is_empty() && port.parse::<u16>().is_ok())
                    {
                        errs.push(format!("pools[{i}].dns: '{name}' must be host:port"));
                    }
                    let interval = p.dns_interval_ms.unwrap_or(defaults::DNS_INTERVAL_MS);
                    if interval == 0 {
                        errs.push(format!(
                            "pools[{i}].dns_interval_ms: must be greater than 0"
                        ));
                    }
                    Source::Dns {
                        name: name.clone(),
                        interval: Duration::from_millis(interval),
                    }
                }
                (None, true) => {
                    errs.push(format!(
                        "pools[{i}].members: pool '{}' needs members or dns",
                        p.name
                    ));
                    continue;
                }
                (None, false) => {
                    let mut addrs = Vec::new();
                    for (j, m) in p.members.iter().enumerate() {
                        match m.parse::<SocketAddr>() {
                            Ok(addr) => addrs.push(addr),
                            Err(e) => errs.push(format!(
                                "pools[{i}].members[{j}]: '{m}' is not an IP:port ({e}); use dns = \"host:port\" for names"
                            )),
                        }
                    }
                    Source::Static(addrs)
                }
            };
            let default_path = self
                .routes
                .iter()
                .find(|r| r.pool == p.name)
                .map_or("/mcp".to_string(), |r| r.path.clone());
            let health = health_policy(&p.health, i, default_path, &mut errs);
            pools.insert(
                p.name.clone(),
                Arc::new(Pool::new(p.name.clone(), source, health)),
            );
        }

        let mut endpoints: HashMap<String, Endpoint> = HashMap::new();
        let mut any_legacy = false;
        if self.routes.is_empty() {
            errs.push("routes: at least one [[routes]] entry is required".to_string());
        }
        for (i, r) in self.routes.iter().enumerate() {
            for (key, value) in [
                ("path", Some(&r.path)),
                ("sse_path", r.sse_path.as_ref()),
                ("messages_path", r.messages_path.as_ref()),
            ] {
                if let Some(v) = value {
                    if !v.starts_with('/') {
                        errs.push(format!("routes[{i}].{key}: '{v}' must start with '/'"));
                    }
                }
            }
            if !r.prefix.is_empty() && (!r.prefix.starts_with('/') || r.prefix.ends_with('/')) {
                errs.push(format!(
                    "routes[{i}].prefix: '{}' must start with '/' and not end with '/'",
                    r.prefix
                ));
            }
            if r.sse_path.is_some() != r.messages_path.is_some() {
                errs.push(format!(
                    "routes[{i}].sse_path: sse_path and messages_path go together"
                ));
            }
            let versions = r.versions.clone().unwrap_or_else(defaults::versions);
            if versions.is_empty() {
                errs.push(format!(
                    "routes[{i}].versions: must list at least one protocol version"
                ));
            }
            for (j, v) in versions.iter().enumerate() {
                if !is_revision(v) {
                    errs.push(format!(
                        "routes[{i}].versions[{j}]: '{v}' is not a protocol revision (YYYY-MM-DD)"
                    ));
                }
            }
            for (j, o) in r.allowed_origins.iter().enumerate() {
                if o != "*"
                    && o != "null"
                    && !(o.starts_with("http://") || o.starts_with("https://"))
                {
                    errs.push(format!("routes[{i}].allowed_origins[{j}]: '{o}' must be scheme://host[:port], 'null' or '*'"));
                }
            }
            let policy = VersionPolicy { accepted: versions };
            if r.sse_path.is_some() && !policy.accepts_legacy() {
                errs.push(format!("routes[{i}].sse_path: HTTP+SSE is legacy, but the route's versions list no legacy revision"));
            }
            any_legacy |= policy.accepts_legacy();
            let Some(pool) = pools.get(&r.pool) else {
                errs.push(format!("routes[{i}].pool: unknown pool '{}'", r.pool));
                continue;
            };
            let route = Arc::new(Route {
                name: format!("{}{}", r.prefix, r.path),
                prefix: r.prefix.clone(),
                session_params: r
                    .session_params
                    .clone()
                    .unwrap_or_else(defaults::session_params),
                pool: pool.clone(),
                versions: policy,
                origins: OriginPolicy::new(&r.allowed_origins),
                hosts: r
                    .allowed_hosts
                    .iter()
                    .map(|h| h.to_ascii_lowercase())
                    .collect(),
            });
            let mut paths = vec![(r.path.clone(), EndpointKind::Streamable)];
            if let (Some(sse), Some(messages)) = (&r.sse_path, &r.messages_path) {
                paths.push((sse.clone(), EndpointKind::SseStream));
                // Python's SDK announces `/messages/`, TypeScript's `/messages`: accept both.
                let trimmed = messages.trim_end_matches('/');
                paths.push((trimmed.to_string(), EndpointKind::Messages));
                paths.push((format!("{trimmed}/"), EndpointKind::Messages));
            }
            for (path, kind) in paths {
                let public = format!("{}{}", r.prefix, path);
                if endpoints.contains_key(&public) {
                    errs.push(format!(
                        "routes[{i}]: path '{public}' is already served by another route"
                    ));
                }
                endpoints.insert(
                    public,
                    Endpoint {
                        route: route.clone(),
                        kind,
                    },
                );
            }
        }

        let sessions = load_sessions(self.sessions.as_ref(), any_legacy, &mut errs);

        let threads = match self.server.threads {
            Some(0) => {
                errs.push("server.threads: must be at least 1".to_string());
                1
            }
            Some(n) => n,
            None => std::thread::available_parallelism().map_or(1, |n| n.get()),
        };

        if !errs.is_empty() {
            return Err(errs);
        }
        Ok(Config {
            startup: Startup {
                threads,
                grace_period: Duration::from_secs(
                    self.server
                        .grace_period_seconds
                        .unwrap_or(defaults::GRACE_PERIOD_SECONDS),
                ),
                shutdown_timeout: Duration::from_secs(
                    self.server
                        .graceful_shutdown_timeout_seconds
                        .unwrap_or(defaults::SHUTDOWN_TIMEOUT_SECONDS),
                ),
                listeners,
                metrics,
                config_watch: self
                    .server
                    .config_watch_ms
                    .filter(|ms| *ms > 0)
                    .map(Duration::from_millis),
            },
            runtime: Runtime {
                endpoints,
                pools,
                limits,
                timeouts,
                sessions,
            },
        })
    }
}

fn health_policy(
    h: &HealthSection,
    i: usize,
    default_path: String,
    errs: &mut Vec<String>,
) -> HealthPolicy {
    let check = match h.check.as_deref().unwrap_or(defaults::HEALTH_CHECK) {
        "tcp" => CheckKind::Tcp,
        "none" => CheckKind::None,
        "mcp" => CheckKind::Mcp {
            path: h.path.clone().unwrap_or(default_path),
        },
        other => {
            errs.push(format!(
                "pools[{i}].health.check: '{other}' is not one of tcp, mcp, none"
            ));
            CheckKind::None
        }
    };
    let ms = |errs: &mut Vec<String>, key: &str, v: Option<u64>, d: u64| {
        Duration::from_millis(positive(
            errs,
            &format!("pools[{i}].health.{key}"),
            v.map(|v| v as usize),
            d as usize,
        ) as u64)
    };
    let count = |errs: &mut Vec<String>, key: &str, v: Option<u32>, d: u32| {
        positive(
            errs,
            &format!("pools[{i}].health.{key}"),
            v.map(|v| v as usize),
            d as usize,
        ) as u32
    };
    HealthPolicy {
        check,
        interval: ms(
            errs,
            "interval_ms",
            h.interval_ms,
            defaults::HEALTH_INTERVAL_MS,
        ),
        timeout: ms(
            errs,
            "timeout_ms",
            h.timeout_ms,
            defaults::HEALTH_TIMEOUT_MS,
        ),
        unhealthy_after: count(
            errs,
            "unhealthy_after",
            h.unhealthy_after,
            defaults::UNHEALTHY_AFTER,
        ),
        healthy_after: count(
            errs,
            "healthy_after",
            h.healthy_after,
            defaults::HEALTHY_AFTER,
        ),
        eject: ms(errs, "eject_ms", h.eject_ms, defaults::EJECT_MS),
    }
}

/// Load the key ring. Required when any route admits legacy clients: the edge never starts
/// with an insecure fallback key.
fn load_sessions(
    section: Option<&SessionsSection>,
    any_legacy: bool,
    errs: &mut Vec<String>,
) -> Option<Arc<Sessions>> {
    let default = SessionsSection::default();
    let s = section.unwrap_or(&default);
    let (key, text) = match (&s.keys_file, &s.keys_env) {
        (Some(_), Some(_)) => {
            errs.push("sessions: set keys_file or keys_env, not both".to_string());
            return None;
        }
        (Some(path), None) => (
            "sessions.keys_file",
            std::fs::read_to_string(path).map_err(|e| format!("cannot read '{path}': {e}")),
        ),
        (None, Some(var)) => (
            "sessions.keys_env",
            std::env::var(var).map_err(|_| format!("environment variable '{var}' is not set")),
        ),
        (None, None) => {
            if any_legacy {
                errs.push(
                    "sessions.keys_file: a session key ring (keys_file or keys_env) is required because a route accepts legacy protocol versions".to_string(),
                );
            }
            return None;
        }
    };
    let ring = match text.and_then(|t| KeyRing::parse(&t)) {
        Ok(r) => r,
        Err(e) => {
            errs.push(format!("{key}: {e}"));
            return None;
        }
    };
    let max_age_secs = s
        .max_age_seconds
        .unwrap_or(defaults::SESSION_MAX_AGE_SECONDS);
    if max_age_secs == 0 {
        errs.push("sessions.max_age_seconds: must be greater than 0".to_string());
    }
    Some(Arc::new(Sessions {
        ring,
        max_age_secs,
        bind_credential: s.bind_credential.unwrap_or(defaults::BIND_CREDENTIAL),
    }))
}

fn positive(errs: &mut Vec<String>, key: &str, v: Option<usize>, default: usize) -> usize {
    match v {
        Some(0) => {
            errs.push(format!("{key}: must be greater than 0"));
            default
        }
        Some(v) => v,
        None => default,
    }
}

fn is_revision(v: &str) -> bool {
    let b = v.as_bytes();
    b.len() == 10
        && b[4] == b'-'
        && b[7] == b'-'
        && b.iter()
            .enumerate()
            .all(|(i, c)| i == 4 || i == 7 || c.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = r#"
        [sessions]
        keys_env = "MCP_EDGE_TEST_KEYS_CONFIG"
        [[listeners]]
        address = "127.0.0.1:8080"
        [[pools]]
        name = "main"
        members = ["127.0.0.1:9001"]
        [[routes]]
        path = "/mcp"
        pool = "main"
    "#;

    fn set_keys() {
        // Same value from every test, so parallel tests cannot disagree.
        std::env::set_var(
            "MCP_EDGE_TEST_KEYS_CONFIG",
            "1:MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=",
        );
    }

    #[test]
    fn minimal_config_gets_defaults() {
        set_keys();
        let c = Config::parse(MINIMAL).unwrap();
        assert_eq!(c.runtime.limits.max_body_bytes, 4 * 1024 * 1024);
        assert_eq!(c.runtime.timeouts.connect, Duration::from_secs(2));
        let route = &c.runtime.endpoint("/mcp").unwrap().route;
        assert!(route.versions.accepts_modern("2026-07-28"));
        assert_eq!(c.runtime.sessions.as_ref().unwrap().max_age_secs, 86400);
        assert!(route.versions.accepts_legacy());
        assert!(c.startup.listeners[0].h2c);
    }

    #[test]
    fn legacy_routes_need_a_key_ring() {
        let text = MINIMAL.replace("keys_env = \"MCP_EDGE_TEST_KEYS_CONFIG\"", "");
        let all = Config::parse(&text).unwrap_err().join("\n");
        assert!(all.contains("sessions.keys_file"), "{all}");
        let modern_only = format!("{text}versions = [\"2026-07-28\"]\n");
        assert!(Config::parse(&modern_only).is_ok());
        let missing_env = MINIMAL.replace("MCP_EDGE_TEST_KEYS_CONFIG", "MCP_EDGE_TEST_KEYS_UNSET");
        let all = Config::parse(&missing_env).unwrap_err().join("\n");
        assert!(
            all.contains("sessions.keys_env") && all.contains("not set"),
            "{all}"
        );
    }

    #[test]
    fn sse_endpoints_are_registered_with_the_prefix() {
        set_keys();
        let text = format!(
            "{MINIMAL}prefix = \"/team\"\nsse_path = \"/sse\"\nmessages_path = \"/messages\"\n"
        );
        let c = Config::parse(&text).unwrap();
        for (path, kind) in [
            ("/team/mcp", EndpointKind::Streamable),
            ("/team/sse", EndpointKind::SseStream),
            ("/team/messages", EndpointKind::Messages),
            ("/team/messages/", EndpointKind::Messages),
        ] {
            assert_eq!(
                c.runtime.endpoint(path).map(|e| e.kind),
                Some(kind),
                "{path}"
            );
        }
        assert!(c.runtime.endpoint("/mcp").is_none());
    }

    #[test]
    fn unknown_keys_are_errors_naming_the_key() {
        let text = format!("{MINIMAL}\n[limits]\nmax_body = 5\n");
        let errs = Config::parse(&text).unwrap_err();
        assert!(errs[0].contains("max_body"), "{errs:?}");
    }

    #[test]
    fn bad_values_name_their_key() {
        set_keys();
        let text = MINIMAL
            .replace("pool = \"main\"", "pool = \"nope\"")
            .replace("127.0.0.1:9001", "not-an-addr");
        let errs = Config::parse(&text).unwrap_err();
        let all = errs.join("\n");
        assert!(all.contains("routes[0].pool"), "{all}");
        assert!(all.contains("pools[0].members[0]"), "{all}");
    }

    #[test]
    fn versions_and_origins_are_checked() {
        set_keys();
        let text = MINIMAL.replace(
            "pool = \"main\"",
            "pool = \"main\"\nversions = [\"latest\"]\nallowed_origins = [\"example.com\"]",
        );
        let all = Config::parse(&text).unwrap_err().join("\n");
        assert!(all.contains("routes[0].versions[0]"), "{all}");
        assert!(all.contains("routes[0].allowed_origins[0]"), "{all}");
    }
}
