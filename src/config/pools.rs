//! `[[pools]]`: where members come from (static, DNS, a stdio command), how they are
//! checked, and how they are reached (TLS, `host`).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::num::NonZeroU64;
use std::sync::Arc;
use std::time::Duration;

use super::file::{
    BalanceName, CheckName, HealthSection, PoolSection, PoolTlsSection, RouteSection, ScopeName,
};
use super::Errors;
use crate::net::tls::UpstreamTls;
use crate::routing::{balance, CheckKind, HealthPolicy, Pool, Source};

pub(super) fn pools(
    sections: &[PoolSection],
    routes: &[RouteSection],
    signer: Option<&Arc<crate::identity::assertion::Signer>>,
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
        // The `mcp` probe's default path: the first route's path using this pool; a pool no
        // MCP route uses (only `[[passthrough]]`) is not checked as an MCP server by default.
        let first_route = routes.iter().find(|r| r.pool == p.name);
        let default_path = first_route.map_or("/mcp".to_string(), |r| r.path.clone());
        let mut health = health_policy(&p.health, default_path, first_route.is_some());
        if matches!(source, Source::Stdio(_)) {
            // The edge watches its own processes; a probe would start sessions on them.
            health.check = CheckKind::None;
        }
        let tls = p
            .tls
            .as_ref()
            .and_then(|t| pool_tls(p, t, i, &source, errs));
        let mut pool = Pool::new(p.name.clone(), source, health);
        pool.tls = tls.map(Arc::new);
        pool.host = p.host.clone();
        pool.balance = balance(p, i, errs);
        pool.set_weights(weights(p));
        pool.credential = super::credentials::credential(p, i, signer, errs);
        pools.insert(p.name.clone(), Arc::new(pool));
    }
    pools
}

fn source(p: &PoolSection, i: usize, errs: &mut Errors) -> Option<Source> {
    if let Some(command) = &p.command {
        return stdio_source(p, command, i, errs);
    }
    let stdio_only = [
        ("scratch_dir", p.scratch_dir.is_some()),
        ("keep_scratch", p.keep_scratch),
        ("memory_limit_bytes", p.memory_limit_bytes.is_some()),
        ("open_files_limit", p.open_files_limit.is_some()),
        ("cpu_seconds_limit", p.cpu_seconds_limit.is_some()),
    ];
    for (key, _) in stdio_only.iter().filter(|(_, set)| *set) {
        errs.push(format!(
            "pools[{i}].{key}: only a stdio pool (command) has processes of the edge's own"
        ));
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
            if !is_host_port(name) {
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
                let m = m.address();
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

/// `balance`, the per-member limits and their queue, slow start.
fn balance(p: &PoolSection, i: usize, errs: &mut Errors) -> balance::Settings {
    if p.health.max_ejection_percent > 100 {
        errs.push(format!(
            "pools[{i}].health.max_ejection_percent: {} is more than 100",
            p.health.max_ejection_percent
        ));
    }
    balance::Settings {
        policy: match p.balance {
            BalanceName::RoundRobin => balance::Policy::RoundRobin,
            BalanceName::LeastRequest => balance::Policy::LeastRequest,
        },
        max_in_flight: p.max_in_flight.map(|n| n.get()),
        max_streams: p.max_streams_per_member.map(|n| n.get()),
        queue_depth: p.queue_depth as usize,
        queue_wait: Duration::from_millis(p.queue_ms.get()),
        scope: match p.limits_scope {
            ScopeName::Replica => balance::Scope::Replica,
            ScopeName::Fleet => balance::Scope::Fleet,
        },
        slow_start: Duration::from_millis(p.slow_start_ms),
    }
}

/// `limits_scope = "fleet"` needs the fleet that shares the limits.
pub(super) fn fleet_scoped(sections: &[PoolSection], fleet: bool, errs: &mut Errors) {
    for (i, p) in sections.iter().enumerate() {
        if p.limits_scope == ScopeName::Fleet && !fleet {
            errs.push(format!(
                "pools[{i}].limits_scope: \"fleet\" needs [fleet] (the replicas that share the limits)"
            ));
        }
    }
}

/// Static members' weights other than 1.
fn weights(p: &PoolSection) -> Vec<(SocketAddr, u32)> {
    p.members
        .iter()
        .filter(|m| m.weight() != 1)
        .filter_map(|m| Some((m.address().parse().ok()?, m.weight())))
        .collect()
}

/// `serves_mcp`: a `[[routes]]` entry uses the pool (the unset check is then `mcp`: the
/// edge learns what its members speak and answers for them as they would, where a `tcp`
/// check would leave it answering with every revision it knows).
fn health_policy(h: &HealthSection, default_path: String, serves_mcp: bool) -> HealthPolicy {
    let check = h.check.unwrap_or(if serves_mcp {
        CheckName::Mcp
    } else {
        CheckName::Tcp
    });
    HealthPolicy {
        check: match check {
            CheckName::Tcp => CheckKind::Tcp,
            CheckName::None => CheckKind::None,
            CheckName::Mcp => CheckKind::Mcp {
                path: h.path.clone().unwrap_or(default_path),
                strict: h.check.is_some(),
            },
        },
        interval: Duration::from_millis(h.interval_ms.get()),
        timeout: Duration::from_millis(h.timeout_ms.get()),
        unhealthy_after: h.unhealthy_after.get(),
        healthy_after: h.healthy_after.get(),
        eject: Duration::from_millis(h.eject_ms.get()),
        consecutive_failures: h.consecutive_failures,
        // Never shorter than the first ejection.
        max_eject: Duration::from_millis(h.max_eject_ms.get().max(h.eject_ms.get())),
        max_ejection_percent: h.max_ejection_percent.min(100),
    }
}

/// `[pools.tls]`: the CA bundle, client certificate and the name the members' certificates
/// are verified against.
fn pool_tls(
    p: &PoolSection,
    t: &PoolTlsSection,
    i: usize,
    source: &Source,
    errs: &mut Errors,
) -> Option<UpstreamTls> {
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
        .or_else(|| match source {
            Source::Dns { name, .. } => Some(host_name(name)),
            Source::Static(_) | Source::Stdio(_) => None,
        });
    UpstreamTls::load(sni, t.verify, t.ca_file.as_deref(), client)
        .map_err(|e| errs.push(format!("pools[{i}].tls: {e}")))
        .ok()
}

/// A stdio pool's `scratch_dir`: absolute, and its pool's name one that can name a
/// directory; `{scratch}` only with it.
fn scratch(p: &PoolSection, command: &[String], i: usize, errs: &mut Errors) -> Option<()> {
    if p.scratch_dir.as_ref().is_some_and(|d| !d.is_absolute()) {
        errs.push(format!("pools[{i}].scratch_dir: must be an absolute path"));
        return None;
    }
    let plain = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
    if p.scratch_dir.is_some() && !p.name.chars().all(plain) {
        errs.push(format!(
            "pools[{i}].scratch_dir: the pool's name '{}' names its directory: letters, digits, '-' and '_' only",
            p.name
        ));
        return None;
    }
    let names_scratch = command
        .iter()
        .skip(1)
        .chain(p.env.values())
        .any(|v| v.contains("{scratch}"));
    if names_scratch && p.scratch_dir.is_none() {
        errs.push(format!(
            "pools[{i}]: env or command names {{scratch}}, but scratch_dir is not set"
        ));
        return None;
    }
    Some(())
}

/// A stdio pool (`command`): no members, no DNS, no TLS or `host`; the edge runs the server.
fn stdio_source(
    p: &PoolSection,
    command: &[String],
    i: usize,
    errs: &mut Errors,
) -> Option<Source> {
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
    scratch(p, command, i, errs)?;
    Some(Source::Stdio(Arc::new(crate::stdio::Spec {
        command: command.to_vec(),
        env: p.env.clone(),
        cwd: p.cwd.clone(),
        processes: p.processes.get() as usize,
        isolation: p.isolation,
        max_processes: p.max_processes.get() as usize,
        idle: Duration::from_millis(p.idle_ms.get()),
        start_timeout: Duration::from_millis(p.start_timeout_ms.get()),
        stop_grace: Duration::from_millis(p.stop_grace_ms.get()),
        scratch_dir: p.scratch_dir.clone(),
        keep_scratch: p.keep_scratch,
        liveness_interval: (p.liveness_interval_ms > 0)
            .then(|| Duration::from_millis(p.liveness_interval_ms)),
        liveness_timeout: Duration::from_millis(p.liveness_timeout_ms.get()),
        memory_limit_bytes: p.memory_limit_bytes.map(NonZeroU64::get),
        open_files_limit: p.open_files_limit.map(NonZeroU64::get),
        cpu_seconds_limit: p.cpu_seconds_limit.map(NonZeroU64::get),
        stderr_bytes_per_second: p.stderr_bytes_per_second.get(),
    })))
}

/// `host:port` with a host and a port number (a name to re-resolve: `[[pools]] dns`,
/// `[fleet] dns`).
pub(super) fn is_host_port(name: &str) -> bool {
    name.rsplit_once(':')
        .is_some_and(|(h, port)| !h.is_empty() && port.parse::<u16>().is_ok())
}
