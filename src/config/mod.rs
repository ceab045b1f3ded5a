//! From the configuration file to a validated [`Config`]: the process settings that apply at
//! start ([`Startup`]) and the [`Runtime`] snapshot the request path reads.
//!
//! [`file`] holds the format (serde, unknown keys rejected, scalar defaults and checks in the
//! types). This module turns each section into its runtime form, then runs the checks that
//! span sections (a route's pool exists, paths are unique, legacy routes have a key ring).
//! Every message names the offending key (`routes[0].pool: …`).

pub mod file;
mod identity;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

pub use file::{defaults, File};

use crate::mcp::origin::OriginPolicy;
use crate::mcp::rules::VersionPolicy;
use crate::routing::{CheckKind, HealthPolicy, Pool, Source};
use crate::runtime::{Endpoint, EndpointKind, Forwarding, Limits, Route, Runtime, Timeouts};
use crate::session::{KeyRing, Sessions};
use crate::tls::{CertFiles, Certificates, UpstreamTls};
use file::{
    CheckName, ForwardingSection, HealthSection, ListenerSection, PassthroughSection, PoolSection,
    RouteSection, SessionsSection,
};

/// Process-level settings that only take effect at start.
#[derive(Debug, Clone)]
pub struct Startup {
    pub threads: usize,
    pub grace_period: Duration,
    pub shutdown_timeout: Duration,
    pub listeners: Vec<Listener>,
    pub metrics: Option<SocketAddr>,
    pub config_watch: Option<Duration>,
    /// Where the access log goes and how many lines may wait (`[access_log]`).
    pub access_log: AccessLogOutput,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessLogOutput {
    pub output: crate::access_log::Output,
    pub queue_lines: usize,
}

#[derive(Debug, Clone)]
pub struct Listener {
    pub address: SocketAddr,
    pub h2c: bool,
    /// The certificates of a TLS listener (loaded and checked with the configuration).
    pub tls: Option<ListenerTls>,
}

#[derive(Debug, Clone)]
pub struct ListenerTls {
    pub certificates: Arc<Certificates>,
    /// How often to look for changed files (`None`: only on SIGHUP).
    pub watch: Option<Duration>,
}

/// A loaded, validated configuration.
#[derive(Debug)]
pub struct Config {
    /// Rules and patterns that can never match (the config loads; `--check` fails).
    pub warnings: Vec<String>,
    pub startup: Startup,
    pub runtime: Runtime,
}

/// Problems found in a file, each naming its key.
type Errors = Vec<String>;

impl Config {
    pub fn load(path: &Path) -> Result<Config, Errors> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| vec![format!("{}: cannot read: {e}", path.display())])?;
        Config::parse(&text)
    }

    pub fn parse(text: &str) -> Result<Config, Errors> {
        let file: File = toml::from_str(text).map_err(|e| vec![describe(&e, text)])?;
        file.validate()
    }
}

impl File {
    /// Check every section; collect all problems rather than stopping at the first.
    pub fn validate(self) -> Result<Config, Errors> {
        let mut errs = Vec::new();
        if self.listeners.is_empty() {
            errs.push("listeners: at least one [[listeners]] entry is required".to_string());
        }
        let listeners = listeners(&self.listeners, &mut errs);
        let pools = pools(&self.pools, &self.routes, &mut errs);
        let identity = identity::identity(self.identity.as_ref(), &mut errs);
        let mut warnings = Vec::new();
        let (mut endpoints, any_legacy) = routes(
            &self.routes,
            &pools,
            identity.as_deref(),
            &mut errs,
            &mut warnings,
        );
        let prefixes = passthrough(&self.passthrough, &pools, &mut endpoints, &mut errs);
        let forwarding = forwarding(&self.forwarding, &mut errs);
        let sessions = sessions(self.sessions.as_ref(), any_legacy, &mut errs);
        if !errs.is_empty() {
            return Err(errs);
        }
        Ok(Config {
            warnings,
            startup: self.startup(listeners),
            runtime: Runtime {
                endpoints,
                prefixes,
                forwarding,
                pools,
                limits: limits(&self.limits),
                timeouts: timeouts(&self.timeouts),
                sessions,
                access_log: self.access_log.enabled,
                identity,
            },
        })
    }

    fn startup(&self, listeners: Vec<Listener>) -> Startup {
        let s = &self.server;
        Startup {
            threads: s.threads.map_or_else(
                || std::thread::available_parallelism().map_or(1, |n| n.get()),
                |n| n.get(),
            ),
            grace_period: Duration::from_secs(s.grace_period_seconds),
            shutdown_timeout: Duration::from_secs(s.graceful_shutdown_timeout_seconds),
            listeners,
            metrics: self.metrics.as_ref().map(|m| m.address),
            config_watch: (s.config_watch_ms > 0).then(|| Duration::from_millis(s.config_watch_ms)),
            access_log: AccessLogOutput {
                output: crate::access_log::Output::parse(&self.access_log.output),
                queue_lines: self.access_log.queue_lines.get(),
            },
        }
    }
}

/// Listeners, with the certificates of TLS ones loaded (a file that cannot be read or
/// parsed, or a key that does not match, is an error here, not at the first handshake).
fn listeners(sections: &[ListenerSection], errs: &mut Errors) -> Vec<Listener> {
    let mut out = Vec::new();
    for (i, l) in sections.iter().enumerate() {
        let tls = match &l.tls {
            None => None,
            Some(t) if t.certificates.is_empty() => {
                errs.push(format!(
                    "listeners[{i}].tls.certificates: at least one certificate is required"
                ));
                continue;
            }
            Some(t) => {
                let files = t
                    .certificates
                    .iter()
                    .map(|c| CertFiles {
                        cert: c.cert.clone(),
                        key: c.key.clone(),
                    })
                    .collect();
                match Certificates::load(l.address.to_string(), files) {
                    Ok(c) => Some(ListenerTls {
                        certificates: Arc::new(c),
                        watch: (t.watch_ms > 0).then(|| Duration::from_millis(t.watch_ms)),
                    }),
                    Err(e) => {
                        errs.push(format!("listeners[{i}].tls.certificates: {e}"));
                        continue;
                    }
                }
            }
        };
        out.push(Listener {
            address: l.address,
            // On TLS, ALPN chooses HTTP/2.
            h2c: l.h2c && tls.is_none(),
            tls,
        });
    }
    out
}

fn forwarding(f: &ForwardingSection, errs: &mut Errors) -> Forwarding {
    let mut trusted = Vec::new();
    for (i, t) in f.trusted_proxies.iter().enumerate() {
        let net = t
            .parse::<ipnet::IpNet>()
            .or_else(|_| t.parse::<std::net::IpAddr>().map(ipnet::IpNet::from));
        match net {
            Ok(n) => trusted.push(n),
            Err(_) => errs.push(format!(
                "forwarding.trusted_proxies[{i}]: '{t}' is not an IP address or CIDR network"
            )),
        }
    }
    Forwarding {
        x_forwarded: f.x_forwarded,
        forwarded: f.forwarded,
        trusted,
    }
}

fn limits(l: &file::LimitsSection) -> Limits {
    Limits {
        max_body_bytes: l.max_body_bytes.get(),
        max_header_bytes: l.max_header_bytes.get(),
        max_concurrent_requests: l.max_concurrent_requests.get(),
        max_streams: l.max_streams.get(),
        max_connections: l.max_connections.get(),
        memory_budget: l.memory_budget_bytes.map_or_else(
            || {
                crate::budget::container_limit().map_or(
                    defaults::MEMORY_BUDGET_BYTES.get(),
                    crate::budget::from_container_limit,
                )
            },
            |b| b.get(),
        ),
        min_upload_rate: l.min_upload_bytes_per_second.get(),
    }
}

fn timeouts(t: &file::TimeoutsSection) -> Timeouts {
    Timeouts {
        connect: Duration::from_millis(t.connect_ms.get()),
        upstream_read: Duration::from_millis(t.upstream_read_ms.get()),
        stream_idle: Duration::from_millis(t.stream_idle_ms.get()),
        idle: Duration::from_millis(t.idle_ms.get()),
        upstream_idle: Duration::from_millis(t.upstream_idle_ms.get()),
        request_body: Duration::from_millis(t.request_body_ms.get()),
        request_head: Duration::from_millis(t.request_head_ms.get()),
    }
}

fn pools(
    sections: &[PoolSection],
    routes: &[RouteSection],
    errs: &mut Errors,
) -> HashMap<String, Arc<Pool>> {
    let mut pools = HashMap::new();
    for (i, p) in sections.iter().enumerate() {
        if p.name.is_empty() {
            errs.push(format!("pools[{i}].name: must not be empty"));
        }
        if pools.contains_key(&p.name) {
            errs.push(format!("pools[{i}].name: duplicate pool '{}'", p.name));
        }
        let Some(source) = source(p, i, errs) else {
            continue;
        };
        // The `mcp` probe's default path: the first route's path using this pool.
        let default_path = routes
            .iter()
            .find(|r| r.pool == p.name)
            .map_or("/mcp".to_string(), |r| r.path.clone());
        let mut health = health_policy(&p.health, default_path);
        if matches!(source, Source::Stdio(_)) {
            // The edge watches its own processes; a probe would start sessions on them.
            health.check = CheckKind::None;
        }
        let tls = p.tls.as_ref().and_then(|t| {
            let client = match (&t.client_cert, &t.client_key) {
                (Some(c), Some(k)) => Some((c.as_str(), k.as_str())),
                (None, None) => None,
                _ => {
                    errs.push(format!(
                        "pools[{i}].tls.client_cert: client_cert and client_key go together"
                    ));
                    return None;
                }
            };
            if t.sni.as_deref().is_some_and(|s| {
                rustls::pki_types::ServerName::try_from(s).is_err()
                    || (s.contains(':') && s.parse::<std::net::Ipv6Addr>().is_err())
            }) {
                // Pingora turns verification off for an empty SNI: never let that happen here.
                errs.push(format!(
                    "pools[{i}].tls.sni: '{}' is not a DNS name or IP address",
                    t.sni.as_deref().unwrap_or_default()
                ));
                return None;
            }
            // A pool found by DNS (or sent a `host`) is verified against that name unless
            // told otherwise.
            let host_name = |h: &str| {
                h.rsplit_once(':')
                    .filter(|(_, port)| port.parse::<u16>().is_ok())
                    .map_or(h, |(name, _)| name)
                    .to_string()
            };
            let sni = t
                .sni
                .clone()
                .or_else(|| p.host.as_deref().map(host_name))
                .or_else(|| match &source {
                    Source::Dns { name, .. } => Some(host_name(name)),
                    Source::Static(_) | Source::Stdio(_) => None,
                });
            UpstreamTls::load(sni, t.verify, t.ca_file.as_deref(), client)
                .map_err(|e| errs.push(format!("pools[{i}].tls: {e}")))
                .ok()
        });
        let mut pool = Pool::new(p.name.clone(), source, health);
        pool.tls = tls.map(Arc::new);
        pool.host = p.host.clone();
        pools.insert(p.name.clone(), Arc::new(pool));
    }
    pools
}

fn source(p: &PoolSection, i: usize, errs: &mut Errors) -> Option<Source> {
    if let Some(command) = &p.command {
        if p.dns.is_some() || !p.members.is_empty() {
            errs.push(format!(
                "pools[{i}].command: a stdio pool has no members or dns (the edge runs the server)"
            ));
            return None;
        }
        if command.first().is_none_or(|c| c.is_empty()) {
            errs.push(format!(
                "pools[{i}].command: needs the program to run, e.g. [\"npx\", \"my-server\"]"
            ));
            return None;
        }
        if p.tls.is_some() || p.host.is_some() {
            errs.push(format!(
                "pools[{i}].command: tls and host do not apply to a stdio pool"
            ));
            return None;
        }
        return Some(Source::Stdio(Arc::new(crate::stdio::Spec {
            command: command.clone(),
            env: p.env.clone(),
            cwd: p.cwd.clone(),
            processes: p.processes.get() as usize,
            isolation: p.isolation,
            max_processes: p.max_processes.get() as usize,
            idle: Duration::from_millis(p.idle_ms.get()),
            start_timeout: Duration::from_millis(p.start_timeout_ms.get()),
            stop_grace: Duration::from_millis(p.stop_grace_ms.get()),
        })));
    }
    match (&p.dns, p.members.is_empty()) {
        (Some(_), false) => {
            errs.push(format!(
                "pools[{i}].dns: use either members or dns, not both"
            ));
            None
        }
        (None, true) => {
            errs.push(format!(
                "pools[{i}].members: pool '{}' needs members or dns",
                p.name
            ));
            None
        }
        (Some(name), true) => {
            let host_port = name
                .rsplit_once(':')
                .is_some_and(|(h, port)| !h.is_empty() && port.parse::<u16>().is_ok());
            if !host_port {
                errs.push(format!("pools[{i}].dns: '{name}' must be host:port"));
            }
            Some(Source::Dns {
                name: name.clone(),
                interval: Duration::from_millis(p.dns_interval_ms.get()),
            })
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
            Some(Source::Static(addrs))
        }
    }
}

fn health_policy(h: &HealthSection, default_path: String) -> HealthPolicy {
    HealthPolicy {
        check: match h.check {
            CheckName::Tcp => CheckKind::Tcp,
            CheckName::None => CheckKind::None,
            CheckName::Mcp => CheckKind::Mcp {
                path: h.path.clone().unwrap_or(default_path),
            },
        },
        interval: Duration::from_millis(h.interval_ms.get()),
        timeout: Duration::from_millis(h.timeout_ms.get()),
        unhealthy_after: h.unhealthy_after.get(),
        healthy_after: h.healthy_after.get(),
        eject: Duration::from_millis(h.eject_ms.get()),
    }
}

/// Every public path of every route, and whether any route admits legacy clients.
fn routes(
    sections: &[RouteSection],
    pools: &HashMap<String, Arc<Pool>>,
    identity: Option<&crate::identity::Identity>,
    errs: &mut Errors,
    warnings: &mut Vec<String>,
) -> (HashMap<String, Endpoint>, bool) {
    let mut endpoints = HashMap::new();
    let mut any_legacy = false;
    if sections.is_empty() {
        errs.push("routes: at least one [[routes]] entry is required".to_string());
    }
    for (i, r) in sections.iter().enumerate() {
        check_route(r, i, errs);
        let accepted = r.versions.list().unwrap_or_default();
        let configured_legacy = accepted.iter().any(|v| crate::mcp::is_legacy_version(v));
        if r.sse_path.is_some() && !configured_legacy {
            errs.push(format!("routes[{i}].sse_path: HTTP+SSE is legacy, but the route's versions list no legacy revision"));
        }
        let stdio = pools
            .get(&r.pool)
            .is_some_and(|p| matches!(p.source, Source::Stdio(_)));
        let per_principal = pools.get(&r.pool).is_some_and(|p| {
            matches!(&p.source, Source::Stdio(s) if s.isolation == crate::stdio::Isolation::PerPrincipal)
        });
        if per_principal && r.auth != crate::identity::AuthMode::Required {
            errs.push(format!("routes[{i}].auth: pool '{}' has a process per principal, so its routes need auth = \"required\" (else any Authorization value would start a process)", r.pool));
        }
        if stdio && r.sse_path.is_some() {
            errs.push(format!("routes[{i}].sse_path: pool '{}' runs a stdio server, which serves Streamable HTTP only", r.pool));
        }
        any_legacy |= configured_legacy;
        let Some(pool) = pools.get(&r.pool) else {
            errs.push(format!("routes[{i}].pool: unknown pool '{}'", r.pool));
            continue;
        };
        if r.bridge_legacy {
            if !configured_legacy {
                errs.push(format!("routes[{i}].bridge_legacy: the route's versions list no legacy revision to bridge"));
            }
            if !accepted.iter().any(|v| v == crate::mcp::MODERN_VERSION) {
                errs.push(format!("routes[{i}].bridge_legacy: the route's versions must list {} (bridged requests are sent as such)", crate::mcp::MODERN_VERSION));
            }
            if r.sse_path.is_some() {
                errs.push(format!("routes[{i}].bridge_legacy: HTTP+SSE (sse_path) cannot be bridged; serve it from a route without bridge_legacy"));
            }
        }
        let mut versions = VersionPolicy::narrowed_by(accepted, pool.spoken.clone());
        versions.bridged = r.bridge_legacy;
        let access = identity::access(r, i, identity, errs, warnings);
        let route = Arc::new(Route {
            name: format!("{}{}", r.prefix, r.path),
            prefix: r.prefix.clone(),
            session_params: r.session_params.clone(),
            pool: pool.clone(),
            versions,
            origins: OriginPolicy::new(&r.allowed_origins),
            hosts: lower(&r.allowed_hosts),
            cors_max_age: r.cors_max_age_seconds,
            bridge: r.bridge_legacy,
            access,
            series: Default::default(),
        });
        for (path, kind) in public_paths(r) {
            if endpoints.contains_key(&path) {
                errs.push(format!(
                    "routes[{i}]: path '{path}' is already served by another route"
                ));
            }
            let route = route.clone();
            endpoints.insert(path, Endpoint { route, kind });
        }
    }
    (endpoints, any_legacy)
}

fn lower(list: &[String]) -> Vec<String> {
    list.iter().map(|h| h.to_ascii_lowercase()).collect()
}

/// `[[passthrough]]` routes: exact paths join the route table (a clash with an MCP route is
/// an error); prefixes come back longest first.
fn passthrough(
    sections: &[PassthroughSection],
    pools: &HashMap<String, Arc<Pool>>,
    endpoints: &mut HashMap<String, Endpoint>,
    errs: &mut Errors,
) -> Vec<(String, Endpoint)> {
    let mut prefixes: Vec<(String, Endpoint)> = Vec::new();
    for (i, p) in sections.iter().enumerate() {
        let (name, exact) = match (&p.path, &p.path_prefix) {
            (Some(path), None) => (path.clone(), true),
            (None, Some(prefix)) => (prefix.clone(), false),
            _ => {
                errs.push(format!(
                    "passthrough[{i}]: set exactly one of path and path_prefix"
                ));
                continue;
            }
        };
        if !name.starts_with('/') {
            errs.push(format!("passthrough[{i}]: '{name}' must start with '/'"));
        }
        check_origins(&p.allowed_origins, &format!("passthrough[{i}]"), errs);
        let Some(pool) = pools.get(&p.pool) else {
            errs.push(format!("passthrough[{i}].pool: unknown pool '{}'", p.pool));
            continue;
        };
        let route = Arc::new(Route {
            name: if exact {
                name.clone()
            } else {
                format!("{name}*")
            },
            prefix: String::new(),
            session_params: Vec::new(),
            pool: pool.clone(),
            versions: VersionPolicy::new(Vec::new()),
            origins: OriginPolicy::new(&p.allowed_origins),
            hosts: lower(&p.allowed_hosts),
            cors_max_age: p.cors_max_age_seconds,
            bridge: false,
            // Pass-through routes forward requests as sent, `Authorization` included.
            access: crate::identity::Access {
                forward_credential: true,
                ..Default::default()
            },
            series: Default::default(),
        });
        let endpoint = Endpoint {
            route,
            kind: EndpointKind::Passthrough,
        };
        let covered: Vec<&String> = endpoints
            .iter()
            .filter(|(path, e)| {
                e.kind != EndpointKind::Passthrough && crate::runtime::covers(&name, path)
            })
            .map(|(path, _)| path)
            .collect();
        if !exact && !covered.is_empty() {
            errs.push(format!(
                "passthrough[{i}].path_prefix: '{name}' covers the MCP path {:?}: MCP requests must not bypass the MCP rules",
                covered
            ));
        }
        if exact {
            if endpoints.contains_key(&name) {
                errs.push(format!(
                    "passthrough[{i}].path: '{name}' is already served by another route"
                ));
            }
            endpoints.insert(name, endpoint);
        } else {
            if prefixes.iter().any(|(p, _)| *p == name) {
                errs.push(format!(
                    "passthrough[{i}].path_prefix: '{name}' is already used"
                ));
            }
            prefixes.push((name, endpoint));
        }
    }
    prefixes.sort_by_key(|(p, _)| std::cmp::Reverse(p.len()));
    prefixes
}

fn check_origins(origins: &[String], at: &str, errs: &mut Errors) {
    for (j, o) in origins.iter().enumerate() {
        let web = o.starts_with("http://") || o.starts_with("https://");
        if o != "*" && o != "null" && !web {
            errs.push(format!(
                "{at}.allowed_origins[{j}]: '{o}' must be scheme://host[:port], 'null' or '*'"
            ));
        }
    }
}

/// The checks of one route that need no other section.
fn check_route(r: &RouteSection, i: usize, errs: &mut Errors) {
    let paths = [
        ("path", Some(&r.path)),
        ("sse_path", r.sse_path.as_ref()),
        ("messages_path", r.messages_path.as_ref()),
    ];
    for (key, value) in paths {
        if let Some(v) = value.filter(|v| !v.starts_with('/')) {
            errs.push(format!("routes[{i}].{key}: '{v}' must start with '/'"));
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
    let versions = match r.versions.list() {
        Ok(list) => list,
        Err(e) => {
            errs.push(format!("routes[{i}].versions: {e}"));
            Vec::new()
        }
    };
    if versions.is_empty() && r.versions.list().is_ok() {
        errs.push(format!(
            "routes[{i}].versions: must list at least one protocol version"
        ));
    }
    for (j, v) in versions.iter().enumerate().filter(|(_, v)| !is_revision(v)) {
        errs.push(format!(
            "routes[{i}].versions[{j}]: '{v}' is not a protocol revision (YYYY-MM-DD)"
        ));
    }
    check_origins(&r.allowed_origins, &format!("routes[{i}]"), errs);
}

/// The public paths a route serves, with the prefix.
fn public_paths(r: &RouteSection) -> Vec<(String, EndpointKind)> {
    let mut paths = vec![(r.path.clone(), EndpointKind::Streamable)];
    if let (Some(sse), Some(messages)) = (&r.sse_path, &r.messages_path) {
        paths.push((sse.clone(), EndpointKind::SseStream));
        // Python's SDK announces `/messages/`, TypeScript's `/messages`: accept both.
        let trimmed = messages.trim_end_matches('/');
        paths.push((trimmed.to_string(), EndpointKind::Messages));
        paths.push((format!("{trimmed}/"), EndpointKind::Messages));
    }
    paths
        .into_iter()
        .map(|(p, kind)| (format!("{}{p}", r.prefix), kind))
        .collect()
}

/// Load the key ring. Required when any route admits legacy clients: the edge never starts
/// with an insecure fallback key.
fn sessions(
    section: Option<&SessionsSection>,
    any_legacy: bool,
    errs: &mut Errors,
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
    match text.and_then(|t| KeyRing::parse(&t)) {
        Ok(ring) => Some(Arc::new(Sessions {
            ring,
            max_age_secs: s.max_age_seconds.get(),
            bind_credential: s.bind_credential,
        })),
        Err(e) => {
            errs.push(format!("{key}: {e}"));
            None
        }
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

/// A TOML or type error, led by the dotted key it concerns (`limits.max_body_bytes: …`),
/// found from the error's position: the key on that line under the nearest table header,
/// with `[[array]]` tables numbered.
fn describe(e: &toml::de::Error, text: &str) -> String {
    let message = e.message().trim();
    let Some(span) = e.span() else {
        return message.to_string();
    };
    let before = &text[..span.start.min(text.len())];
    let line_no = before.matches('\n').count() + 1;
    let line = text.lines().nth(line_no - 1).unwrap_or("");
    let key = line
        .split_once('=')
        .map_or(line, |(k, _)| k)
        .trim()
        .trim_matches(['[', ']']);
    let table = table_at(before);
    let path = match (table.is_empty(), key.is_empty()) {
        (_, true) => table,
        (true, false) => key.to_string(),
        (false, false) if line.trim_start().starts_with('[') => table,
        (false, false) => format!("{table}.{key}"),
    };
    format!("{path}: {message} (line {line_no})")
}

/// The table a position in the file is in: `limits`, `pools[1].health`, or "".
fn table_at(before: &str) -> String {
    let mut counts: HashMap<String, usize> = HashMap::new();
    let mut current = String::new();
    for line in before.lines().map(str::trim) {
        if let Some(name) = line.strip_prefix("[[").and_then(|l| l.split_once("]]")) {
            let name = name.0.trim().to_string();
            let n = counts.entry(name.clone()).or_insert(0);
            current = format!("{name}[{n}]");
            *n += 1;
        } else if let Some(name) = line.strip_prefix('[').and_then(|l| l.split_once(']')) {
            let name = name.0.trim();
            // `[pools.health]` inside the last `[[pools]]` entry.
            current = match name.split_once('.') {
                Some((parent, child)) if counts.contains_key(parent) => {
                    format!("{parent}[{}].{child}", counts[parent] - 1)
                }
                _ => name.to_string(),
            };
        }
    }
    current
}

#[cfg(test)]
mod tests;
