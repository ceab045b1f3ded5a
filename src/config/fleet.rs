//! `[fleet]` and `[rate_limits]`, checked and built.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use super::file::{FleetSection, RateLimitsSection};
use super::Errors;
use crate::fleet::{Fleet, Peers, Settings};
use crate::identity::rate::shared::{self, Store};

pub(super) fn fleet(section: Option<&FleetSection>, errs: &mut Errors) -> Option<Arc<Fleet>> {
    let f = section?;
    let peers = match (&f.dns, f.peers.is_empty()) {
        (Some(_), false) => {
            errs.push("fleet: use either dns or peers, not both".into());
            return None;
        }
        (None, true) => {
            errs.push("fleet: needs dns (a headless Service of the edge) or peers".into());
            return None;
        }
        (Some(name), true) => {
            if !super::pools::is_host_port(name) {
                errs.push(format!("fleet.dns: '{name}' must be host:port"));
                return None;
            }
            Peers::Dns(name.clone())
        }
        (None, false) => {
            let mut addrs = Vec::new();
            for p in &f.peers {
                match p.parse::<SocketAddr>() {
                    Ok(a) => addrs.push(a),
                    Err(_) => errs.push(format!("fleet.peers: '{p}' is not IP:port")),
                }
            }
            Peers::Static(addrs)
        }
    };
    if f.timeout_ms >= f.interval_ms {
        errs.push(format!(
            "fleet.timeout_ms: {} must be below interval_ms ({})",
            f.timeout_ms, f.interval_ms
        ));
    }
    Some(Arc::new(Fleet::new(Settings {
        peers,
        interval: Duration::from_millis(f.interval_ms.get()),
        timeout: Duration::from_millis(f.timeout_ms.get()),
    })))
}

/// The longest a request may wait for Redis.
const MOST_DECISION_MS: u64 = 1_000;

pub(super) fn rate_limits(
    section: Option<&RateLimitsSection>,
    any_rate_limit: bool,
    fleet: bool,
    errs: &mut Errors,
    warnings: &mut Vec<String>,
) -> Option<Arc<Store>> {
    let r = section?;
    let scheme = r.redis.split_once("://").map(|(s, _)| s);
    let tls = match scheme {
        Some("redis") => false,
        Some("rediss") => true,
        _ => {
            errs.push(format!(
                "rate_limits.redis: '{}' must be redis://host:port or rediss://host:port",
                shared::redact(&r.redis)
            ));
            return None;
        }
    };
    if r.decision_timeout_ms.get() > MOST_DECISION_MS {
        errs.push(format!(
            "rate_limits.decision_timeout_ms: {} ms would hold requests; at most {MOST_DECISION_MS} (a few ms is usual)",
            r.decision_timeout_ms
        ));
    }
    let ca = match &r.redis_ca_file {
        Some(_) if !tls => {
            errs.push("rate_limits.redis_ca_file: only for rediss:// (TLS)".into());
            None
        }
        Some(path) => read(path, "rate_limits.redis_ca_file", errs).map(String::into_bytes),
        None => None,
    };
    let password = r
        .redis_password_file
        .as_ref()
        .and_then(|p| read(p, "rate_limits.redis_password_file", errs))
        .map(|p| p.trim_end_matches(['\n', '\r']).to_string());
    if r.key_prefix.is_empty() || r.key_prefix.contains(['{', '}', ' ']) {
        errs.push("rate_limits.key_prefix: needs a prefix without braces or spaces".into());
    }
    if !any_rate_limit {
        warnings.push("rate_limits: no route has a rate_limit; Redis is never asked".into());
    }
    if !fleet {
        warnings.push(
            "rate_limits: without [fleet], a replica that cannot reach Redis takes the whole limit for itself (it knows of no other replica)".into(),
        );
    }
    let settings = shared::Settings {
        url: r.redis.clone(),
        ca,
        password,
        timeout: Duration::from_millis(r.decision_timeout_ms.get()),
        prefix: r.key_prefix.clone(),
    };
    Store::new(settings)
        .map_err(|e| errs.push(format!("rate_limits.redis: {e}")))
        .ok()
        .map(Arc::new)
}

fn read(path: &std::path::Path, key: &str, errs: &mut Errors) -> Option<String> {
    std::fs::read_to_string(path)
        .map_err(|e| errs.push(format!("{key}: {}: {e}", path.display())))
        .ok()
}
