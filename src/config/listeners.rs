//! `[[listeners]]` (TLS certificates loaded and checked here) and `[forwarding]`.

use std::sync::Arc;
use std::time::Duration;

use super::file::{ForwardingSection, ListenerSection};
use super::{Errors, Listener, ListenerTls};
use crate::net::tls::{CertFiles, Certificates};
use crate::runtime::Forwarding;

/// Listeners, with the certificates of TLS ones loaded (a file that cannot be read or
/// parsed, or a key that does not match, is an error here, not at the first handshake).
pub(super) fn listeners(sections: &[ListenerSection], errs: &mut Errors) -> Vec<Listener> {
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
            trace_context: l.trace_context,
            handoff: false,
        });
    }
    out
}

pub(super) fn forwarding(f: &ForwardingSection, errs: &mut Errors) -> Forwarding {
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
