//! From the configuration file to a validated [`Config`]: the process settings that apply at
//! start ([`Startup`]) and the [`Runtime`] snapshot the request path reads.
//!
//! [`file`] holds the format (serde, unknown keys rejected, scalar defaults and checks in the
//! types). This module turns each section into its runtime form, then runs the checks that
//! span sections (a route's pool exists, paths are unique, legacy routes have a key ring).
//! Every message names the offending key (`routes[0].pool: …`).

pub mod file;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

pub use file::{defaults, File};

use crate::mcp::origin::OriginPolicy;
use crate::mcp::rules::VersionPolicy;
use crate::routing::{CheckKind, HealthPolicy, Pool, Source};
use crate::runtime::{Endpoint, EndpointKind, Limits, Route, Runtime, Timeouts};
use crate::session::{KeyRing, Sessions};
use file::{CheckName, HealthSection, PoolSection, RouteSection, SessionsSection};

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
}

/// A loaded, validated configuration.
#[derive(Debug)]
pub struct Config {
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
        let pools = pools(&self.pools, &self.routes, &mut errs);
        let (endpoints, any_legacy) = routes(&self.routes, &pools, &mut errs);
        let sessions = sessions(self.sessions.as_ref(), any_legacy, &mut errs);
        if !errs.is_empty() {
            return Err(errs);
        }
        Ok(Config {
            startup: self.startup(),
            runtime: Runtime {
                endpoints,
                pools,
                limits: limits(&self.limits),
                timeouts: timeouts(&self.timeouts),
                sessions,
                access_log: self.access_log.enabled,
            },
        })
    }

    fn startup(&self) -> Startup {
        let s = &self.server;
        Startup {
            threads: s.threads.map_or_else(
                || std::thread::available_parallelism().map_or(1, |n| n.get()),
                |n| n.get(),
            ),
            grace_period: Duration::from_secs(s.grace_period_seconds),
            shutdown_timeout: Duration::from_secs(s.graceful_shutdown_timeout_seconds),
            listeners: self
                .listeners
                .iter()
                .map(|l| Listener {
                    address: l.address,
                    h2c: l.h2c,
                })
                .collect(),
            metrics: self.metrics.as_ref().map(|m| m.address),
            config_watch: (s.config_watch_ms > 0).then(|| Duration::from_millis(s.config_watch_ms)),
            access_log: AccessLogOutput {
                output: crate::access_log::Output::parse(&self.access_log.output),
                queue_lines: self.access_log.queue_lines.get(),
            },
        }
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
        let health = health_policy(&p.health, default_path);
        pools.insert(
            p.name.clone(),
            Arc::new(Pool::new(p.name.clone(), source, health)),
        );
    }
    pools
}

fn source(p: &PoolSection, i: usize, errs: &mut Errors) -> Option<Source> {
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
    errs: &mut Errors,
) -> (HashMap<String, Endpoint>, bool) {
    let mut endpoints = HashMap::new();
    let mut any_legacy = false;
    if sections.is_empty() {
        errs.push("routes: at least one [[routes]] entry is required".to_string());
    }
    for (i, r) in sections.iter().enumerate() {
        check_route(r, i, errs);
        let versions = VersionPolicy {
            accepted: r.versions.clone(),
        };
        if r.sse_path.is_some() && !versions.accepts_legacy() {
            errs.push(format!("routes[{i}].sse_path: HTTP+SSE is legacy, but the route's versions list no legacy revision"));
        }
        any_legacy |= versions.accepts_legacy();
        let Some(pool) = pools.get(&r.pool) else {
            errs.push(format!("routes[{i}].pool: unknown pool '{}'", r.pool));
            continue;
        };
        let route = Arc::new(Route {
            name: format!("{}{}", r.prefix, r.path),
            prefix: r.prefix.clone(),
            session_params: r.session_params.clone(),
            pool: pool.clone(),
            versions,
            origins: OriginPolicy::new(&r.allowed_origins),
            hosts: r
                .allowed_hosts
                .iter()
                .map(|h| h.to_ascii_lowercase())
                .collect(),
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
    if r.versions.is_empty() {
        errs.push(format!(
            "routes[{i}].versions: must list at least one protocol version"
        ));
    }
    for (j, v) in r
        .versions
        .iter()
        .enumerate()
        .filter(|(_, v)| !is_revision(v))
    {
        errs.push(format!(
            "routes[{i}].versions[{j}]: '{v}' is not a protocol revision (YYYY-MM-DD)"
        ));
    }
    for (j, o) in r.allowed_origins.iter().enumerate() {
        let web = o.starts_with("http://") || o.starts_with("https://");
        if o != "*" && o != "null" && !web {
            errs.push(format!("routes[{i}].allowed_origins[{j}]: '{o}' must be scheme://host[:port], 'null' or '*'"));
        }
    }
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
