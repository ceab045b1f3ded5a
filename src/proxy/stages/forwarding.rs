//! Forwarding headers: what the upstream learns about the client (`[forwarding]`).
//!
//! `X-Forwarded-For` / `-Proto` / `-Host` (on by default) and RFC 7239 `Forwarded` (off by
//! default). From a peer in `trusted_proxies` the headers it sent are kept and the peer's
//! address is appended; from anyone else the whole family (`Forwarded`, `X-Forwarded-*`,
//! `X-Real-IP`) is removed before the edge sets its own, whether or not it sets them, so a
//! client cannot claim to be someone else or move the URLs a server builds. `traceparent` /
//! `tracestate` are not touched.
//!
//! The member gets the pool's `host` when it has one (a remote server behind its own name),
//! else the client's (an HTTP/2 client's `:authority` as `Host`). Behind trusted proxies, the
//! client is the rightmost `X-Forwarded-For` entry that is not one of them ([`client_address`]).

use std::fmt::Write;
use std::net::IpAddr;

use http::header::{HeaderName, HeaderValue};
use pingora::http::RequestHeader;
use pingora::proxy::Session;

use crate::proxy::ctx::Ctx;
use crate::proxy::stage::{Outbound, Stage};
use crate::runtime::Forwarding as Settings;

pub struct Forwarding;

impl Stage for Forwarding {
    const NAME: &'static str = "forwarding";

    fn upstream_request(o: &mut Outbound<'_>) -> pingora::Result<()> {
        // HTTP/2 clients send :authority instead of Host; an HTTP/1.1 upstream needs Host.
        let req = o.session.req_header();
        let host = req
            .headers
            .get(http::header::HOST)
            .filter(|h| h.to_str().is_ok())
            .cloned()
            .or_else(|| {
                let authority = req.uri.authority()?;
                HeaderValue::from_str(authority.as_str()).ok()
            });
        let client = peer(o.session, o.ctx);
        // A request another replica handed here: what it saw of the client.
        let tls = o.ctx.request.hop.as_ref().map_or(o.edge.tls, |h| h.tls);
        apply(
            o.head,
            &o.ctx.snapshot.forwarding,
            client,
            tls,
            host.as_ref(),
        )?;
        match (&o.ctx.endpoint()?.route.pool.host, host) {
            // A remote server behind its own name (`[[pools]] host`).
            (Some(pool_host), _) => o.head.insert_header(http::header::HOST, pool_host)?,
            (None, Some(host)) if o.head.headers.get(http::header::HOST).is_none() => {
                o.head.insert_header(http::header::HOST, host)?
            }
            _ => {}
        }
        Ok(())
    }
}

/// The address of the client connection (of a request another replica handed here: the
/// client's, as that replica saw it).
pub fn peer(session: &Session, ctx: &Ctx) -> Option<IpAddr> {
    if let Some(hop) = &ctx.request.hop {
        return hop.client;
    }
    session
        .client_addr()
        .and_then(|a| a.as_inet())
        .map(|a| a.ip())
}

/// Who the client is: the connection's address, or behind a trusted proxy the client the
/// proxy names (the rightmost `X-Forwarded-For` entry that is not a trusted proxy). A
/// request another replica handed here: the client that replica found. Found once (once the
/// hand-off's arrival is known), kept in `ctx.request.client`: the rate limit, the trace and
/// the log read the same answer.
pub fn client_address(session: &Session, ctx: &Ctx) -> Option<IpAddr> {
    *ctx.request.client.get_or_init(|| find_client(session, ctx))
}

fn find_client(session: &Session, ctx: &Ctx) -> Option<IpAddr> {
    if let Some(hop) = &ctx.request.hop {
        return hop.client;
    }
    let forwarding = &ctx.snapshot.forwarding;
    let peer = peer(session, ctx)?.to_canonical();
    if !forwarding.trusts(peer) {
        return Some(peer);
    }
    // Every `X-Forwarded-For` line, in order, as one list.
    let lines: Vec<&str> = session
        .req_header()
        .headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect();
    let forwarded = lines.join(",");
    // From the right: each trusted hop vouches for the entry to its left. An entry that is
    // not an address ends the walk at the last hop that was vouched for (never further
    // left, where a client writes what it likes).
    let mut caller = peer;
    for entry in forwarded.rsplit(',') {
        let Some(ip) = forwarded_address(entry.trim()) else {
            break;
        };
        caller = ip;
        if !forwarding.trusts(ip) {
            break;
        }
    }
    Some(caller)
}

/// An `X-Forwarded-For` entry's address: `ip`, `ip:port`, `[v6]` or `[v6]:port`.
fn forwarded_address(entry: &str) -> Option<IpAddr> {
    if let Ok(ip) = entry.parse::<IpAddr>() {
        return Some(ip.to_canonical());
    }
    if let Some(rest) = entry.strip_prefix('[') {
        return rest
            .split(']')
            .next()?
            .parse::<IpAddr>()
            .ok()
            .map(|ip| ip.to_canonical());
    }
    let (host, port) = entry.rsplit_once(':')?;
    port.parse::<u16>().ok()?;
    host.parse::<std::net::Ipv4Addr>().ok().map(IpAddr::V4)
}

/// A header the edge sets, by name twice: parsed at compile time for lookups (a name given as
/// text is parsed and hashed again at each), and as static text for Pingora's insert (which
/// copies a parsed name it has no spelling of its own for, and takes static text as it is).
struct Name {
    parsed: HeaderName,
    text: &'static str,
}

impl Name {
    const fn new(text: &'static str) -> Name {
        Name {
            parsed: HeaderName::from_static(text),
            text,
        }
    }
}

const X_FORWARDED_FOR: Name = Name::new("x-forwarded-for");
const X_FORWARDED_PROTO: Name = Name::new("x-forwarded-proto");
const X_FORWARDED_HOST: Name = Name::new("x-forwarded-host");
const FORWARDED: Name = Name::new("forwarded");

/// What only a trusted proxy may tell an upstream.
const FAMILY: &[&str] = &[
    "forwarded",
    "x-forwarded-for",
    "x-forwarded-proto",
    "x-forwarded-host",
    "x-forwarded-port",
    "x-forwarded-prefix",
    "x-forwarded-server",
    "x-forwarded-ssl",
    "x-real-ip",
];

/// One of [`FAMILY`]: every member begins with `f` or `x`, which most names a client sends
/// do not (one byte read instead of nine comparisons).
fn in_family(name: &str) -> bool {
    matches!(name.as_bytes().first(), Some(b'f' | b'x')) && FAMILY.contains(&name)
}

/// Set the forwarding headers on the request to the upstream. `client`: the peer address
/// of the client connection; `host`: the `Host` (or `:authority`) the client used.
fn apply(
    upstream: &mut RequestHeader,
    config: &Settings,
    client: Option<IpAddr>,
    tls: bool,
    host: Option<&HeaderValue>,
) -> pingora::Result<()> {
    // An IPv4 client of a dual-stack listener arrives as ::ffff:a.b.c.d.
    let client = client.map(|ip| ip.to_canonical());
    let trusted = client.is_some_and(|ip| config.trusts(ip));
    // One pass over the names first: most requests carry none of the family, and removing
    // by name costs a lookup each.
    if !trusted && upstream.headers.keys().any(|k| in_family(k.as_str())) {
        for name in FAMILY {
            upstream.remove_header(*name);
        }
    }
    let proto = if tls { "https" } else { "http" };
    if config.x_forwarded {
        let chain = match client {
            // From anyone but a trusted proxy the chain is the client alone: its address is
            // the value as it is (no chain read, no copy).
            Some(ip) if !trusted => Some(text(address(ip))?),
            Some(ip) => Some(text(extend(
                joined(upstream, &X_FORWARDED_FOR.parsed),
                trusted,
                &address(ip),
            ))?),
            None => None,
        };
        set(upstream, X_FORWARDED_FOR, chain)?;
        keep_or_set(
            upstream,
            X_FORWARDED_PROTO,
            trusted,
            Some(HeaderValue::from_static(proto)),
        )?;
        keep_or_set(upstream, X_FORWARDED_HOST, trusted, host.cloned())?;
    }
    if config.forwarded {
        let mut element = match client {
            Some(IpAddr::V6(ip)) => format!("for=\"[{ip}]\";proto={proto}"),
            Some(IpAddr::V4(ip)) => format!("for={ip};proto={proto}"),
            None => format!("for=unknown;proto={proto}"),
        };
        if let Some(h) = host
            .and_then(|h| h.to_str().ok())
            .filter(|h| is_token_safe(h))
        {
            let _ = write!(element, ";host=\"{h}\"");
        }
        let value = extend(joined(upstream, &FORWARDED.parsed), trusted, &element);
        set(upstream, FORWARDED, Some(text(value)?))?;
    }
    Ok(())
}

/// A client address as text: IPv4 written directly (the formatter costs more than the rest
/// of the header's work), IPv6 by its `Display`.
fn address(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => {
            let mut s = String::with_capacity(15);
            for (i, octet) in v4.octets().into_iter().enumerate() {
                if i > 0 {
                    s.push('.');
                }
                if octet >= 100 {
                    s.push(char::from(b'0' + octet / 100));
                }
                if octet >= 10 {
                    s.push(char::from(b'0' + octet / 10 % 10));
                }
                s.push(char::from(b'0' + octet % 10));
            }
            s
        }
        IpAddr::V6(v6) => v6.to_string(),
    }
}

fn text(value: String) -> pingora::Result<HeaderValue> {
    HeaderValue::try_from(value).map_err(|e| {
        pingora::Error::because(
            pingora::ErrorType::InvalidHTTPHeader,
            "forwarding header",
            e,
        )
    })
}

/// Every value of `name` joined with ", " (a proxy chain may arrive in several lines).
fn joined(req: &RequestHeader, name: &HeaderName) -> Option<String> {
    let values: Vec<&str> = req
        .headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .collect();
    (!values.is_empty()).then(|| values.join(", "))
}

/// A trusted peer's chain with `hop` appended; from anyone else, `hop` alone.
fn extend(existing: Option<String>, trusted: bool, hop: &str) -> String {
    match existing {
        Some(chain) if trusted => format!("{chain}, {hop}"),
        _ => hop.to_string(),
    }
}

/// Replace every value of `name` by `value` (or by nothing).
fn set(req: &mut RequestHeader, name: Name, value: Option<HeaderValue>) -> pingora::Result<()> {
    match value {
        // Inserting replaces every earlier value.
        Some(v) => req.insert_header(name.text, v),
        None => {
            if req.headers.contains_key(&name.parsed) {
                req.remove_header(&name.parsed);
            }
            Ok(())
        }
    }
}

/// A trusted peer's value stays; anyone else's is replaced by ours.
fn keep_or_set(
    req: &mut RequestHeader,
    name: Name,
    trusted: bool,
    ours: Option<HeaderValue>,
) -> pingora::Result<()> {
    if trusted && req.headers.contains_key(&name.parsed) {
        return Ok(());
    }
    set(req, name, ours)
}

/// A host that can go in a quoted string as it is.
fn is_token_safe(host: &str) -> bool {
    host.bytes()
        .all(|b| b.is_ascii_alphanumeric() || b".-:[]_".contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(headers: &[(&str, &str)]) -> RequestHeader {
        let mut r = RequestHeader::build("POST", b"/mcp", None).unwrap();
        for (k, v) in headers {
            r.append_header(k.to_string(), *v).unwrap();
        }
        r
    }

    fn get(r: &RequestHeader, name: &str) -> Vec<String> {
        r.headers
            .get_all(name)
            .iter()
            .map(|v| v.to_str().unwrap().to_string())
            .collect()
    }

    fn config(trusted: &[&str], forwarded: bool) -> Settings {
        Settings {
            x_forwarded: true,
            forwarded,
            trusted: trusted.iter().map(|t| t.parse().unwrap()).collect(),
        }
    }

    #[test]
    fn forwarded_entries_are_addresses_with_or_without_a_port() {
        let ip = |s: &str| s.parse::<std::net::IpAddr>().ok();
        assert_eq!(forwarded_address("10.0.0.1"), ip("10.0.0.1"));
        assert_eq!(forwarded_address("10.0.0.1:8443"), ip("10.0.0.1"));
        assert_eq!(forwarded_address("[2001:db8::1]:443"), ip("2001:db8::1"));
        assert_eq!(forwarded_address("[2001:db8::1]"), ip("2001:db8::1"));
        assert_eq!(forwarded_address("::ffff:10.0.0.1"), ip("10.0.0.1"));
        assert_eq!(forwarded_address("unknown"), None);
        assert_eq!(forwarded_address("10.0.0.1:x"), None);
    }

    #[test]
    fn addresses_are_written_as_display_writes_them() {
        for ip in [
            "0.0.0.0",
            "9.10.99.100",
            "127.0.0.1",
            "203.0.113.255",
            "255.255.255.255",
            "::1",
            "2001:db8::8:800:200c:417a",
        ] {
            let ip: IpAddr = ip.parse().unwrap();
            assert_eq!(address(ip), ip.to_string());
        }
        for octet in 0..=255u8 {
            let ip = IpAddr::from([octet, 255 - octet, octet / 2, octet / 3]);
            assert_eq!(address(ip), ip.to_string());
        }
    }

    #[test]
    fn the_family_is_found_by_its_first_byte_and_its_name() {
        for name in FAMILY {
            assert!(in_family(name), "{name}");
        }
        for name in [
            "host",
            "content-type",
            "x-request-id",
            "from",
            "",
            "mcp-method",
        ] {
            assert!(!in_family(name), "{name}");
        }
    }

    #[test]
    fn untrusted_clients_cannot_spoof() {
        let mut r = request(&[
            ("x-forwarded-for", "1.2.3.4"),
            ("x-forwarded-proto", "https"),
            ("x-forwarded-host", "bank.example"),
            ("forwarded", "for=1.2.3.4"),
            ("x-forwarded-prefix", "/evil"),
            ("x-real-ip", "1.2.3.4"),
            ("traceparent", "00-abc-def-01"),
        ]);
        let ip: IpAddr = "203.0.113.9".parse().unwrap();
        apply(
            &mut r,
            &config(&["10.0.0.0/8"], true),
            Some(ip),
            false,
            Some(&HeaderValue::from_static("edge.example")),
        )
        .unwrap();
        assert_eq!(get(&r, "x-forwarded-for"), ["203.0.113.9"]);
        assert_eq!(get(&r, "x-forwarded-proto"), ["http"]);
        assert_eq!(get(&r, "x-forwarded-host"), ["edge.example"]);
        assert_eq!(
            get(&r, "forwarded"),
            ["for=203.0.113.9;proto=http;host=\"edge.example\""]
        );
        assert_eq!(get(&r, "traceparent"), ["00-abc-def-01"], "untouched");
        assert!(get(&r, "x-forwarded-prefix").is_empty());
        assert!(get(&r, "x-real-ip").is_empty());
        // Setting nothing still removes what the client claimed.
        let mut r = request(&[("forwarded", "for=1.2.3.4"), ("x-forwarded-for", "1.2.3.4")]);
        let off = Settings::default();
        apply(&mut r, &off, Some(ip), false, None).unwrap();
        assert!(get(&r, "forwarded").is_empty() && get(&r, "x-forwarded-for").is_empty());
        // A dual-stack listener's IPv4 client is its IPv4 address (and trusted as such).
        let mapped: IpAddr = "::ffff:10.1.2.3".parse().unwrap();
        let mut r = request(&[("x-forwarded-for", "1.2.3.4")]);
        apply(
            &mut r,
            &config(&["10.0.0.0/8"], false),
            Some(mapped),
            false,
            None,
        )
        .unwrap();
        assert_eq!(get(&r, "x-forwarded-for"), ["1.2.3.4, 10.1.2.3"]);
    }

    #[test]
    fn trusted_proxies_chains_are_extended() {
        let mut r = request(&[
            ("x-forwarded-for", "1.2.3.4"),
            ("x-forwarded-for", "5.6.7.8"),
            ("x-forwarded-proto", "https"),
            ("forwarded", "for=1.2.3.4"),
        ]);
        let ip: IpAddr = "10.1.2.3".parse().unwrap();
        apply(
            &mut r,
            &config(&["10.0.0.0/8"], true),
            Some(ip),
            false,
            Some(&HeaderValue::from_static("h")),
        )
        .unwrap();
        assert_eq!(get(&r, "x-forwarded-for"), ["1.2.3.4, 5.6.7.8, 10.1.2.3"]);
        assert_eq!(get(&r, "x-forwarded-proto"), ["https"], "kept");
        assert_eq!(get(&r, "x-forwarded-host"), ["h"], "absent: set");
        assert_eq!(
            get(&r, "forwarded"),
            ["for=1.2.3.4, for=10.1.2.3;proto=http;host=\"h\""]
        );
        let v6: IpAddr = "::1".parse().unwrap();
        let mut r = request(&[]);
        apply(&mut r, &config(&[], true), Some(v6), true, None).unwrap();
        assert_eq!(get(&r, "forwarded"), ["for=\"[::1]\";proto=https"]);
        assert_eq!(get(&r, "x-forwarded-for"), ["::1"]);
    }
}
