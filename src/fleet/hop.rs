//! A request one replica hands another, signed: the hand-off listener serves only requests
//! a replica of the same fleet signed, each once, within a short window.
//!
//! Why a MAC and not mutual TLS: every replica already holds the session key ring (it must,
//! to open the tokens that say where state lives), so an HMAC key derived from it needs no
//! fleet certificate to issue, mount, rotate and watch; rotation follows the ring's (the
//! first key signs, every key verifies). What TLS would add is secrecy on the pod network,
//! which the client's own hop to the edge does not have behind a TLS-terminating balancer
//! either; the NetworkPolicy keeps everyone but edge pods off the listener.
//!
//! `x-mcp-edge-hop: 1 <key id> <unix seconds> <nonce> <client ip or -> <tls 0|1> <body
//! sha256> <mac>` (hex). The MAC (HMAC-SHA256) covers every field before it, the method, the
//! path and query, and each header that decides what the owner does ([`COVERED`]); the body
//! by its digest, checked once the owner has read it. A forward older or newer than
//! [`WINDOW_SECS`] is refused; one whose nonce was seen is refused (a replay).

use std::collections::HashMap;
use std::fmt::Write;
use std::net::IpAddr;
use std::sync::{LazyLock, Mutex};

use pingora::http::RequestHeader;
use ring::digest::{digest, SHA256};
use ring::hmac;
use ring::rand::{SecureRandom, SystemRandom};

use crate::session::KeyRing;

/// The header carrying the signature.
pub const HEADER: &str = "x-mcp-edge-hop";
/// How far a forward's time may be from the owner's clock.
pub const WINDOW_SECS: u64 = 30;
/// Nonces remembered at most (a replica signing more within the window is refused rather
/// than remembered without bound).
const MOST_NONCES: usize = 1 << 20;

/// The headers the signature covers: everything that decides what the owner does with the
/// request (who calls, which session, which revision and method, how it answers).
pub const COVERED: [&str; 12] = [
    "host",
    "authorization",
    "content-type",
    "accept",
    "origin",
    "mcp-session-id",
    "mcp-protocol-version",
    "mcp-method",
    "mcp-name",
    "last-event-id",
    "traceparent",
    "tracestate",
];

/// What a verified forward says about the client behind it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hop {
    /// The client's address as the first replica saw it.
    pub client: Option<IpAddr>,
    /// The client reached the first replica over TLS.
    pub tls: bool,
    /// The SHA-256 of the body the first replica sent.
    pub body: [u8; 32],
}

pub use crate::metrics::HopRefused as Refused;

/// The signature for `head` (as it is about to be sent) and `body`, from the replica that
/// saw the client at `client`.
pub fn sign(
    ring: &KeyRing,
    head: &RequestHeader,
    client: Option<IpAddr>,
    tls: bool,
    body: &[u8],
    now: u64,
) -> String {
    let (id, key) = ring.signer();
    let mut nonce = [0u8; 16];
    if SystemRandom::new().fill(&mut nonce).is_err() {
        // Never reuse a nonce: without randomness, the clock's nanoseconds and a counter.
        static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        nonce[..8].copy_from_slice(&n.to_be_bytes());
        nonce[8..].copy_from_slice(&(now ^ super::handoff::boot()).to_be_bytes());
    }
    let fields = Fields {
        key: id,
        time: now,
        nonce: hex(&nonce),
        client: client.map_or_else(|| "-".to_string(), |c| c.to_string()),
        tls,
        body: hex(digest(&SHA256, body).as_ref()),
    };
    let mac = hmac::sign(key, &canonical(&fields, head));
    format!("{} {}", fields.text(), hex(mac.as_ref()))
}

/// Check the signature of a request that reached the hand-off listener (its body is checked
/// against [`Hop::body`] once read).
pub fn verify(ring: &KeyRing, head: &RequestHeader, now: u64) -> Result<Hop, Refused> {
    let mut values = head.headers.get_all(HEADER).iter();
    let (Some(value), None) = (values.next(), values.next()) else {
        return Err(Refused::Unsigned);
    };
    let text = value.to_str().map_err(|_| Refused::Unsigned)?;
    let (fields, mac) = parse(text).ok_or(Refused::Unsigned)?;
    let key = ring.signing_key(fields.key).ok_or(Refused::UnknownKey)?;
    if now.abs_diff(fields.time) > WINDOW_SECS {
        return Err(Refused::Stale);
    }
    hmac::verify(key, &canonical(&fields, head), &mac).map_err(|_| Refused::Forged)?;
    if !REPLAYS.first_time(&fields.nonce, fields.time.saturating_add(WINDOW_SECS), now) {
        return Err(Refused::Replayed);
    }
    let client = match fields.client.as_str() {
        "-" => None,
        c => Some(c.parse().map_err(|_| Refused::Unsigned)?),
    };
    let mut body = [0u8; 32];
    unhex(&fields.body, &mut body).ok_or(Refused::Unsigned)?;
    Ok(Hop {
        client,
        tls: fields.tls,
        body,
    })
}

/// The body's digest, to compare with [`Hop::body`].
pub fn body_digest(body: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    out.copy_from_slice(digest(&SHA256, body).as_ref());
    out
}

struct Fields {
    key: u8,
    time: u64,
    nonce: String,
    client: String,
    tls: bool,
    body: String,
}

impl Fields {
    fn text(&self) -> String {
        format!(
            "1 {} {} {} {} {} {}",
            self.key,
            self.time,
            self.nonce,
            self.client,
            u8::from(self.tls),
            self.body
        )
    }
}

fn parse(text: &str) -> Option<(Fields, Vec<u8>)> {
    let parts: Vec<&str> = text.split(' ').collect();
    let [version, key, time, nonce, client, tls, body, mac] = parts.as_slice() else {
        return None;
    };
    let hex_of = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit());
    if *version != "1" || !hex_of(nonce, 32) || !hex_of(body, 64) || !hex_of(mac, 64) {
        return None;
    }
    let mut mac_bytes = vec![0u8; 32];
    unhex(mac, &mut mac_bytes)?;
    let fields = Fields {
        key: key.parse().ok()?,
        time: time.parse().ok()?,
        nonce: nonce.to_string(),
        client: client.to_string(),
        tls: match *tls {
            "0" => false,
            "1" => true,
            _ => return None,
        },
        body: body.to_string(),
    };
    Some((fields, mac_bytes))
}

/// What the MAC covers, as bytes: the fields, the method, the target and the covered
/// headers (each by name, every value in order).
fn canonical(fields: &Fields, head: &RequestHeader) -> Vec<u8> {
    let mut out = String::with_capacity(512);
    out.push_str("mcp-edge/hop/v1\n");
    out.push_str(&fields.text());
    out.push('\n');
    out.push_str(head.method.as_str());
    out.push('\n');
    out.push_str(head.uri.path_and_query().map_or("/", |p| p.as_str()));
    out.push('\n');
    let mut bytes = out.into_bytes();
    for name in COVERED {
        bytes.extend_from_slice(name.as_bytes());
        bytes.push(b':');
        for v in head.headers.get_all(name) {
            bytes.extend_from_slice(v.as_bytes());
            bytes.push(0);
        }
        bytes.push(b'\n');
    }
    bytes
}

fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

fn unhex(text: &str, out: &mut [u8]) -> Option<()> {
    if text.len() != out.len() * 2 {
        return None;
    }
    for (i, pair) in text.as_bytes().chunks(2).enumerate() {
        let s = std::str::from_utf8(pair).ok()?;
        out[i] = u8::from_str_radix(s, 16).ok()?;
    }
    Some(())
}

/// The nonces of forwards seen within the window, until their window ends.
struct Replays {
    seen: Mutex<HashMap<String, u64>>,
}

static REPLAYS: LazyLock<Replays> = LazyLock::new(|| Replays {
    seen: Mutex::new(HashMap::new()),
});

impl Replays {
    /// Remember `nonce` until `until`; `false` when it was seen (or no room is left).
    fn first_time(&self, nonce: &str, until: u64, now: u64) -> bool {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if seen.len() >= MOST_NONCES / 2 {
            seen.retain(|_, end| *end >= now);
        }
        if seen.contains_key(nonce) || seen.len() >= MOST_NONCES {
            return false;
        }
        seen.insert(nonce.to_string(), until);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S1: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";
    const S2: &str = "ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA";
    const NOW: u64 = 1_800_000_000;

    fn head() -> RequestHeader {
        let mut h = RequestHeader::build("POST", b"/mcp?x=1", None).unwrap();
        h.insert_header("host", "edge.example").unwrap();
        h.insert_header("authorization", "Bearer k-alice").unwrap();
        h.insert_header("mcp-session-id", "tok").unwrap();
        h
    }

    fn signed(ring: &KeyRing, body: &[u8], now: u64) -> RequestHeader {
        let mut h = head();
        let sig = sign(ring, &h, Some("10.1.2.3".parse().unwrap()), true, body, now);
        h.insert_header(HEADER, sig).unwrap();
        h
    }

    #[test]
    fn a_signed_forward_opens_once_with_what_the_first_replica_saw() {
        let ring = KeyRing::parse(&format!("1:{S1}")).unwrap();
        let h = signed(&ring, b"{}", NOW);
        let hop = verify(&ring, &h, NOW + 3).unwrap();
        assert_eq!(hop.client, Some("10.1.2.3".parse().unwrap()));
        assert!(hop.tls);
        assert_eq!(hop.body, body_digest(b"{}"));
        assert_eq!(verify(&ring, &h, NOW + 3), Err(Refused::Replayed));
    }

    #[test]
    fn anything_changed_unsigned_stale_or_of_another_ring_is_refused() {
        let ring = KeyRing::parse(&format!("1:{S1}")).unwrap();
        let other = KeyRing::parse(&format!("1:{S2}")).unwrap();
        assert_eq!(verify(&ring, &head(), NOW), Err(Refused::Unsigned));
        let h = signed(&other, b"", NOW);
        assert_eq!(verify(&ring, &h, NOW), Err(Refused::Forged));
        let rotated = KeyRing::parse(&format!("2:{S2}")).unwrap();
        let h = signed(&rotated, b"", NOW);
        assert_eq!(verify(&ring, &h, NOW), Err(Refused::UnknownKey));
        let h = signed(&ring, b"", NOW);
        assert_eq!(verify(&ring, &h, NOW + 31), Err(Refused::Stale));
        for (name, value) in [
            ("authorization", "Bearer k-bob"),
            ("mcp-session-id", "other"),
            ("mcp-method", "tools/call"),
        ] {
            let mut h = signed(&ring, b"", NOW);
            h.insert_header(name, value).unwrap();
            assert_eq!(verify(&ring, &h, NOW), Err(Refused::Forged), "{name}");
        }
        let mut h = signed(&ring, b"", NOW);
        h.set_uri("/mcp?x=2".parse().unwrap());
        assert_eq!(verify(&ring, &h, NOW), Err(Refused::Forged));
        let mut h = signed(&ring, b"", NOW);
        let v = h.headers.get(HEADER).unwrap().to_str().unwrap().to_string();
        h.insert_header(HEADER, v.replace(" 10.1.2.3 1 ", " 10.1.2.3 0 "))
            .unwrap();
        assert_eq!(verify(&ring, &h, NOW), Err(Refused::Forged), "the tls flag");
        // A ring that rotated keeps verifying what its older key signed.
        let both = KeyRing::parse(&format!("2:{S2}\n1:{S1}")).unwrap();
        let h = signed(&ring, b"", NOW);
        assert!(verify(&both, &h, NOW).is_ok());
    }
}
