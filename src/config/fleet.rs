//! `[fleet]` and `[rate_limits]`, checked and built.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use super::file::{FleetSection, RateLimitsSection};
use super::Errors;
use crate::fleet::{Fleet, Handoff, Peers, Settings};
use crate::identity::rate::shared::{self, Store};

pub(super) fn fleet(
    section: Option<&FleetSection>,
    sessions: bool,
    errs: &mut Errors,
) -> Option<Arc<Fleet>> {
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
    let handoff = handoff(f, &peers, sessions, errs);
    Some(Arc::new(Fleet::new(Settings {
        peers,
        interval: Duration::from_millis(f.interval_ms.get()),
        timeout: Duration::from_millis(f.timeout_ms.get()),
        handoff,
    })))
}

/// `handoff_listen` and `advertise`: both or neither; signing needs the session key ring;
/// the peers are the replicas' hand-off listeners, this one among them.
fn handoff(f: &FleetSection, peers: &Peers, sessions: bool, errs: &mut Errors) -> Option<Handoff> {
    let (listen, advertise) = match (f.handoff_listen, &f.advertise) {
        (None, None) => return None,
        (Some(listen), Some(advertise)) => (listen, advertise),
        (None, Some(_)) => {
            errs.push("fleet.advertise: only with handoff_listen".into());
            return None;
        }
        (Some(_), None) => {
            errs.push(
                "fleet.handoff_listen: needs advertise (this replica's hand-off address as the others reach it, e.g. \"${POD_IP}:7444\")"
                    .into(),
            );
            return None;
        }
    };
    if !sessions {
        errs.push(
            "fleet.handoff_listen: needs [sessions] (its key ring signs the requests replicas hand each other)"
                .into(),
        );
    }
    let advertise = match expand(advertise).map(|a| address(&a)) {
        Ok(Some(a)) if !a.ip().is_unspecified() => a,
        Ok(_) => {
            errs.push(format!(
                "fleet.advertise: '{advertise}' is not the IP:port other replicas reach"
            ));
            return None;
        }
        Err(e) => {
            errs.push(format!("fleet.advertise: {e}"));
            return None;
        }
    };
    match peers {
        Peers::Dns(name) => {
            let port = name.rsplit_once(':').and_then(|(_, p)| p.parse::<u16>().ok());
            if port.is_some_and(|p| p != advertise.port()) {
                errs.push(format!(
                    "fleet.dns: with handoff_listen, the name's port is the replicas' hand-off port ({})",
                    advertise.port()
                ));
            }
        }
        Peers::Static(list) if !list.contains(&advertise) => errs.push(format!(
            "fleet.peers: with handoff_listen, the replicas' hand-off addresses, this one's ({advertise}) among them"
        )),
        Peers::Static(_) => {}
    }
    Some(Handoff { listen, advertise })
}

/// `IP:port`, `[v6]:port`, or `v6:port` as `"${POD_IP}:7444"` becomes with an IPv6 pod
/// address.
fn address(text: &str) -> Option<SocketAddr> {
    if let Ok(a) = text.parse::<SocketAddr>() {
        return Some(a);
    }
    let (ip, port) = text.rsplit_once(':')?;
    Some(SocketAddr::new(ip.parse().ok()?, port.parse().ok()?))
}

/// `${VAR}` in `text` replaced by the variable's value.
fn expand(text: &str) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let Some(end) = rest[start..].find('}') else {
            return Err(format!("'{text}': an unclosed ${{"));
        };
        let name = &rest[start + 2..start + end];
        let value =
            std::env::var(name).map_err(|_| format!("environment variable '{name}' is not set"))?;
        out.push_str(&value);
        rest = &rest[start + end + 1..];
    }
    out.push_str(rest);
    Ok(out)
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

#[cfg(test)]
mod tests {
    use super::address;

    #[test]
    fn an_advertised_address_may_be_an_ipv6_pod_address_with_its_port() {
        assert_eq!(address("10.0.0.5:7444"), "10.0.0.5:7444".parse().ok());
        assert_eq!(address("[fd00::5]:7444"), "[fd00::5]:7444".parse().ok());
        assert_eq!(address("fd00::5:7444"), "[fd00::5]:7444".parse().ok());
        assert_eq!(address("pod:7444"), None);
    }
}
