//! From the configuration file to a validated [`Config`]: the process settings that apply at
//! start ([`Startup`]) and the [`Runtime`] snapshot the request path reads.
//!
//! [`mod@file`] holds the format (serde, unknown keys rejected, scalar defaults and checks in the
//! types). This module turns each section into its runtime form, then runs the checks that
//! span sections (a route's pool exists, paths are unique, legacy routes have a key ring).
//! Every message names the offending key (`routes[0].pool: …`).

mod credentials;
mod exchange;
pub mod file;
mod fleet;
mod identity;
mod listeners;
mod pools;
mod routes;
mod secret;
mod sessions;
mod tracing;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

pub use file::{defaults, File, TraceContext};

use crate::net::tls::Certificates;
use crate::runtime::{Limits, Runtime, Timeouts};
use listeners::{forwarding, listeners};
use pools::pools;
use routes::{passthrough, routes};
use sessions::sessions;

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
    /// Where spans go (`[tracing]`; `None`: no traces).
    pub tracing: Option<crate::ops::tracing::Settings>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessLogOutput {
    pub output: crate::ops::access_log::Output,
    pub queue_lines: usize,
}

#[derive(Debug, Clone)]
pub struct Listener {
    pub address: SocketAddr,
    pub h2c: bool,
    /// The certificates of a TLS listener (loaded and checked with the configuration).
    pub tls: Option<ListenerTls>,
    /// Continue the trace a client's `traceparent` names, or only link to it.
    pub trace_context: TraceContext,
    /// The hand-off listener (`[fleet] handoff_listen`): only requests other replicas of the
    /// fleet signed.
    pub handoff: bool,
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
        let signer = credentials::signer(self.assertions.as_ref(), &mut errs);
        let pools = pools(&self.pools, &self.routes, signer.as_ref(), &mut errs);
        let jwt = self.identity.as_ref().is_some_and(|i| i.jwt.is_some());
        credentials::forwarded(&self.pools, &self.routes, &self.passthrough, jwt, &mut errs);
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
        let tracing = tracing::tracing(self.tracing.as_ref(), &mut errs);
        let fleet = fleet::fleet(self.fleet.as_ref(), sessions.is_some(), &mut errs);
        pools::fleet_scoped(&self.pools, fleet.is_some(), &mut errs);
        let rate_store = fleet::rate_limits(
            self.rate_limits.as_ref(),
            self.routes.iter().any(|r| r.rate_limit.is_some()),
            fleet.is_some(),
            &mut errs,
            &mut warnings,
        );
        if !errs.is_empty() {
            return Err(errs);
        }
        Ok(Config {
            warnings,
            startup: self.startup(with_handoff(listeners, fleet.as_deref()), tracing),
            runtime: Runtime {
                endpoints,
                prefixes,
                forwarding,
                pools,
                limits: limits(&self.limits),
                timeouts: timeouts(&self.timeouts),
                sessions,
                access_log: crate::runtime::AccessLog {
                    enabled: self.access_log.enabled,
                    argument_names: self.access_log.argument_names,
                },
                tool_names: self
                    .metrics
                    .as_ref()
                    .map(|m| m.tool_names.clone())
                    .unwrap_or_default(),
                identity,
                fleet,
                rate_store,
                assertions: signer,
            },
        })
    }

    fn startup(
        &self,
        listeners: Vec<Listener>,
        tracing: Option<crate::ops::tracing::Settings>,
    ) -> Startup {
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
                output: crate::ops::access_log::Output::parse(&self.access_log.output),
                queue_lines: self.access_log.queue_lines.get(),
            },
            tracing,
        }
    }
}

/// The listeners, and the hand-off listener when replicas hand requests to each other.
fn with_handoff(
    mut listeners: Vec<Listener>,
    fleet: Option<&crate::fleet::Fleet>,
) -> Vec<Listener> {
    if let Some(h) = fleet.and_then(|f| f.settings.handoff.as_ref()) {
        listeners.push(Listener {
            address: h.listen,
            h2c: false,
            tls: None,
            // The first replica's CLIENT span is the parent.
            trace_context: TraceContext::Continue,
            handoff: true,
        });
    }
    listeners
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
                crate::net::budget::container_limit().map_or(
                    defaults::MEMORY_BUDGET_BYTES.get(),
                    crate::net::budget::from_container_limit,
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
