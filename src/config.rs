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
use crate::routing::{Member, Pool};

/// Defaults, in one place (the README's config reference lists the same values).
pub mod defaults {
    pub const MAX_BODY_BYTES: usize = 4 * 1024 * 1024;
    pub const MAX_HEADER_BYTES: usize = 32 * 1024;
    pub const CONNECT_MS: u64 = 2_000;
    pub const UPSTREAM_READ_MS: u64 = 60_000;
    pub const IDLE_MS: u64 = 60_000;
    pub const REQUEST_BODY_MS: u64 = 30_000;
    pub const GRACE_PERIOD_SECONDS: u64 = 5;
    pub const SHUTDOWN_TIMEOUT_SECONDS: u64 = 5;
    pub const H2C: bool = true;

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
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct TimeoutsSection {
    pub connect_ms: Option<u64>,
    pub upstream_read_ms: Option<u64>,
    pub idle_ms: Option<u64>,
    pub request_body_ms: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolSection {
    pub name: String,
    pub members: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteSection {
    pub path: String,
    pub pool: String,
    pub versions: Option<Vec<String>>,
    #[serde(default)]
    pub allowed_origins: Vec<String>,
}

/// Process-level settings that only take effect at start.
#[derive(Debug, Clone)]
pub struct Startup {
    pub threads: usize,
    pub grace_period: Duration,
    pub shutdown_timeout: Duration,
    pub listeners: Vec<Listener>,
    pub metrics: Option<SocketAddr>,
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
    pub path: String,
    pub pool: Arc<Pool>,
    pub versions: VersionPolicy,
    pub origins: OriginPolicy,
}

/// One immutable snapshot of everything the request path reads.
#[derive(Debug)]
pub struct Runtime {
    pub routes: HashMap<String, Arc<Route>>,
    pub limits: Limits,
    pub timeouts: Timeouts,
}

impl Runtime {
    pub fn route(&self, path: &str) -> Option<&Arc<Route>> {
        self.routes.get(path)
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
            if p.members.is_empty() {
                errs.push(format!(
                    "pools[{i}].members: pool '{}' needs at least one member",
                    p.name
                ));
            }
            let mut members = Vec::new();
            for (j, m) in p.members.iter().enumerate() {
                match m.parse::<SocketAddr>() {
                    Ok(addr) => members.push(Member::new(addr)),
                    Err(e) => errs.push(format!(
                        "pools[{i}].members[{j}]: '{m}' is not an IP:port ({e})"
                    )),
                }
            }
            pools.insert(p.name.clone(), Arc::new(Pool::new(p.name.clone(), members)));
        }

        let mut routes = HashMap::new();
        if self.routes.is_empty() {
            errs.push("routes: at least one [[routes]] entry is required".to_string());
        }
        for (i, r) in self.routes.iter().enumerate() {
            if !r.path.starts_with('/') {
                errs.push(format!(
                    "routes[{i}].path: '{}' must start with '/'",
                    r.path
                ));
            }
            if routes.contains_key(&r.path) {
                errs.push(format!("routes[{i}].path: duplicate route '{}'", r.path));
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
            let Some(pool) = pools.get(&r.pool) else {
                errs.push(format!("routes[{i}].pool: unknown pool '{}'", r.pool));
                continue;
            };
            routes.insert(
                r.path.clone(),
                Arc::new(Route {
                    path: r.path.clone(),
                    pool: pool.clone(),
                    versions: VersionPolicy { accepted: versions },
                    origins: OriginPolicy::new(&r.allowed_origins),
                }),
            );
        }

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
            },
            runtime: Runtime {
                routes,
                limits,
                timeouts,
            },
        })
    }
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
        [[listeners]]
        address = "127.0.0.1:8080"
        [[pools]]
        name = "main"
        members = ["127.0.0.1:9001"]
        [[routes]]
        path = "/mcp"
        pool = "main"
    "#;

    #[test]
    fn minimal_config_gets_defaults() {
        let c = Config::parse(MINIMAL).unwrap();
        assert_eq!(c.runtime.limits.max_body_bytes, 4 * 1024 * 1024);
        assert_eq!(c.runtime.timeouts.connect, Duration::from_secs(2));
        let route = c.runtime.route("/mcp").unwrap();
        assert!(route.versions.accepts_modern("2026-07-28"));
        assert!(route.versions.accepts_legacy());
        assert!(c.startup.listeners[0].h2c);
    }

    #[test]
    fn unknown_keys_are_errors_naming_the_key() {
        let text = format!("{MINIMAL}\n[limits]\nmax_body = 5\n");
        let errs = Config::parse(&text).unwrap_err();
        assert!(errs[0].contains("max_body"), "{errs:?}");
    }

    #[test]
    fn bad_values_name_their_key() {
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
        let text = MINIMAL.replace(
            "pool = \"main\"",
            "pool = \"main\"\nversions = [\"latest\"]\nallowed_origins = [\"example.com\"]",
        );
        let all = Config::parse(&text).unwrap_err().join("\n");
        assert!(all.contains("routes[0].versions[0]"), "{all}");
        assert!(all.contains("routes[0].allowed_origins[0]"), "{all}");
    }
}
