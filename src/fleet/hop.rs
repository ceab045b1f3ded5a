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
//! sha256> <mac>` (hex). The MAC (HMAC-SHA256) covers every field before it, the replica it
//! is for (its hand-off address: a forward replayed to another replica does not verify), the
//! method, the path and query, and each header that decides what the owner does
//! ([`COVERED`], values without surrounding whitespace, as any HTTP/1.1 parser reads them);
//! the body by its digest, checked once the owner has read it. A forward older or newer than
//! [`WINDOW_SECS`] is refused; one whose nonce was seen is refused (a replay).

use std::collections::HashSet;
use std::fmt::Write;
use std::net::{IpAddr, SocketAddr};
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
/// Nonces remembered at most per generation (a fleet handing more to one replica within a
/// generation is refused, `busy`, rather than remembered without bound: 16 bytes and the
/// map's overhead each, about 25 MiB for both generations full).
const MOST_NONCES: usize = 1 << 19;

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
/// What a replica hands another: where to, and what it saw of the client.
#[derive(Debug, Clone, Copy)]
pub struct Forward<'a> {
    /// The hand-off address of the replica the request is for.
    pub to: SocketAddr,
    pub client: Option<IpAddr>,
    pub tls: bool,
    pub body: &'a [u8],
}

pub fn sign(ring: &KeyRing, head: &RequestHeader, forward: Forward<'_>, now: u64) -> String {
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
        client: forward
            .client
            .map_or_else(|| "-".to_string(), |c| c.to_string()),
        tls: forward.tls,
        body: hex(digest(&SHA256, forward.body).as_ref()),
    };
    let mac = hmac::sign(key, &canonical(&fields, forward.to, head));
    format!("{} {}", fields.text(), hex(mac.as_ref()))
}

/// Check the signature of a request that reached the hand-off listener of the replica at
/// `me` (its body is checked against [`Hop::body`] once read).
pub fn verify(
    ring: &KeyRing,
    head: &RequestHeader,
    me: SocketAddr,
    now: u64,
) -> Result<Hop, Refused> {
    let mut values = head.headers.get_all(HEADER).iter();
    let (Some(value), None) = (values.next(), values.next()) else {
        return Err(Refused::Unsigned);
    };
    let text = value.to_str().map_err(|_| Refused::Unsigned)?;
    let (fields, mac) = parse(text).ok_or(Refused::Unsigned)?;
    let key = ring.signing_key(fields.key).ok_or(Refused::UnknownKey)?;
    // Signed before this process took hand-offs: captured before a restart, replayed.
    if now.abs_diff(fields.time) > WINDOW_SECS || fields.time < super::handoff::started() {
        return Err(Refused::Stale);
    }
    hmac::verify(key, &canonical(&fields, me, head), &mac).map_err(|_| Refused::Forged)?;
    let mut nonce = [0u8; 16];
    unhex(&fields.nonce, &mut nonce).ok_or(Refused::Unsigned)?;
    REPLAYS.first_time(nonce, now)?;
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

/// What the MAC covers, as bytes: the fields, the replica it is for, the method, the target
/// and the covered headers (each by name, every value in order, without surrounding
/// whitespace).
fn canonical(fields: &Fields, to: SocketAddr, head: &RequestHeader) -> Vec<u8> {
    let mut out = String::with_capacity(512);
    out.push_str("mcp-edge/hop/v1\n");
    out.push_str(&fields.text());
    out.push('\n');
    out.push_str(&to.to_string());
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
            bytes.extend_from_slice(v.as_bytes().trim_ascii());
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

/// The nonces of forwards seen, in two generations that take turns: a nonce is remembered
/// for at least one generation ([`GENERATION_SECS`]), longer than a signature can still be
/// inside the window once seen.
struct Replays {
    seen: Mutex<Generations>,
}

#[derive(Default)]
struct Generations {
    current: HashSet<[u8; 16]>,
    previous: HashSet<[u8; 16]>,
    /// When `current` began.
    began: u64,
}

/// A signature is inside the window from its time − 30 s to its time + 30 s; seen at the
/// earliest at its time − 30 s, it must be remembered until 60 s later.
const GENERATION_SECS: u64 = 2 * WINDOW_SECS;

static REPLAYS: LazyLock<Replays> = LazyLock::new(|| Replays {
    seen: Mutex::new(Generations::default()),
});

impl Replays {
    /// Remember `nonce`: refused when it was seen (a replay) or no room is left.
    fn first_time(&self, nonce: [u8; 16], now: u64) -> Result<(), Refused> {
        let mut g = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if now.saturating_sub(g.began) >= GENERATION_SECS {
            let current = std::mem::take(&mut g.current);
            // Two generations or more without a forward: nothing is left to remember.
            g.previous = match now.saturating_sub(g.began) >= 2 * GENERATION_SECS {
                true => HashSet::new(),
                false => current,
            };
            g.began = now;
        }
        if g.current.contains(&nonce) || g.previous.contains(&nonce) {
            return Err(Refused::Replayed);
        }
        if g.current.len() >= MOST_NONCES {
            return Err(Refused::Busy);
        }
        g.current.insert(nonce);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S1: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";
    const S2: &str = "ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA";
    /// After this process began to take hand-offs (what is signed before is refused).
    fn now() -> u64 {
        crate::fleet::handoff::started() + 1_000
    }

    fn head() -> RequestHeader {
        let mut h = RequestHeader::build("POST", b"/mcp?x=1", None).unwrap();
        h.insert_header("host", "edge.example").unwrap();
        h.insert_header("authorization", "Bearer k-alice").unwrap();
        h.insert_header("mcp-session-id", "tok").unwrap();
        h
    }

    fn me() -> SocketAddr {
        "10.0.0.2:7444".parse().unwrap()
    }

    fn signed(ring: &KeyRing, body: &[u8], now: u64) -> RequestHeader {
        let mut h = head();
        let forward = Forward {
            to: me(),
            client: Some("10.1.2.3".parse().unwrap()),
            tls: true,
            body,
        };
        let sig = sign(ring, &h, forward, now);
        h.insert_header(HEADER, sig).unwrap();
        h
    }

    #[test]
    fn a_signed_forward_opens_once_with_what_the_first_replica_saw() {
        let ring = KeyRing::parse(&format!("1:{S1}")).unwrap();
        let h = signed(&ring, b"{}", now());
        let hop = verify(&ring, &h, me(), now() + 3).unwrap();
        assert_eq!(hop.client, Some("10.1.2.3".parse().unwrap()));
        assert!(hop.tls);
        assert_eq!(hop.body, body_digest(b"{}"));
        assert_eq!(verify(&ring, &h, me(), now() + 3), Err(Refused::Replayed));
    }

    #[test]
    fn unsigned_stale_or_of_another_ring_is_refused() {
        let ring = KeyRing::parse(&format!("1:{S1}")).unwrap();
        let other = KeyRing::parse(&format!("1:{S2}")).unwrap();
        assert_eq!(verify(&ring, &head(), me(), now()), Err(Refused::Unsigned));
        let h = signed(&other, b"", now());
        assert_eq!(verify(&ring, &h, me(), now()), Err(Refused::Forged));
        let rotated = KeyRing::parse(&format!("2:{S2}")).unwrap();
        let h = signed(&rotated, b"", now());
        assert_eq!(verify(&ring, &h, me(), now()), Err(Refused::UnknownKey));
        let h = signed(&ring, b"", now());
        assert_eq!(verify(&ring, &h, me(), now() + 31), Err(Refused::Stale));
        let before = crate::fleet::handoff::started() - 1;
        let h = signed(&ring, b"", before);
        assert_eq!(
            verify(&ring, &h, me(), before),
            Err(Refused::Stale),
            "signed before this process began"
        );
        // A ring that rotated keeps verifying what its older key signed.
        let both = KeyRing::parse(&format!("2:{S2}\n1:{S1}")).unwrap();
        let h = signed(&ring, b"", now());
        assert!(verify(&both, &h, me(), now()).is_ok());
    }

    #[test]
    fn every_signed_part_changed_is_refused() {
        let ring = KeyRing::parse(&format!("1:{S1}")).unwrap();
        for name in COVERED {
            let mut h = signed(&ring, b"", now());
            h.insert_header(name, "changed").unwrap();
            assert_eq!(
                verify(&ring, &h, me(), now()),
                Err(Refused::Forged),
                "{name}"
            );
        }
        let mut h = signed(&ring, b"", now());
        h.set_method(http::Method::PUT);
        assert_eq!(
            verify(&ring, &h, me(), now()),
            Err(Refused::Forged),
            "the method"
        );
        let time = (format!(" {} ", now()), format!(" {} ", now() + 1));
        for (field, changed) in [
            (" 10.1.2.3 ", " 10.1.2.4 "),
            (time.0.as_str(), time.1.as_str()),
        ] {
            let mut h = signed(&ring, b"", now());
            let v = h.headers.get(HEADER).unwrap().to_str().unwrap().to_string();
            h.insert_header(HEADER, v.replace(field, changed)).unwrap();
            assert_eq!(
                verify(&ring, &h, me(), now()),
                Err(Refused::Forged),
                "{field}"
            );
        }
        let mut h = signed(&ring, b"", now());
        h.set_uri("/mcp?x=2".parse().unwrap());
        assert_eq!(verify(&ring, &h, me(), now()), Err(Refused::Forged));
        let mut h = signed(&ring, b"", now());
        let v = h.headers.get(HEADER).unwrap().to_str().unwrap().to_string();
        h.insert_header(HEADER, v.replace(" 10.1.2.3 1 ", " 10.1.2.3 0 "))
            .unwrap();
        assert_eq!(
            verify(&ring, &h, me(), now()),
            Err(Refused::Forged),
            "the tls flag"
        );
        // Another replica's forward, replayed here.
        let h = signed(&ring, b"", now());
        let other: SocketAddr = "10.0.0.3:7444".parse().unwrap();
        assert_eq!(verify(&ring, &h, other, now()), Err(Refused::Forged));
        // Whitespace around a value (an HTTP/2 client's) is not what the owner reads.
        let mut h = head();
        h.insert_header("mcp-method", " tools/call ").unwrap();
        let forward = Forward {
            to: me(),
            client: None,
            tls: false,
            body: b"",
        };
        let sig = sign(&ring, &h, forward, now());
        h.insert_header("mcp-method", "tools/call").unwrap();
        h.insert_header(HEADER, sig).unwrap();
        assert!(verify(&ring, &h, me(), now()).is_ok());
    }
}

#[cfg(test)]
mod replays {
    use super::*;

    #[test]
    fn a_nonce_is_remembered_a_generation_at_least_and_room_is_bounded() {
        let r = Replays {
            seen: Mutex::new(Generations::default()),
        };
        let t = crate::fleet::handoff::started() + 1_000;
        assert_eq!(r.first_time([1; 16], t), Ok(()));
        assert_eq!(r.first_time([1; 16], t + 59), Err(Refused::Replayed));
        assert_eq!(r.first_time([2; 16], t + 61), Ok(()), "a new generation");
        assert_eq!(
            r.first_time([1; 16], t + 100),
            Err(Refused::Replayed),
            "the previous one"
        );
        assert_eq!(
            r.first_time([3; 16], t + 400),
            Ok(()),
            "long idle: both forgotten"
        );
        assert_eq!(r.first_time([1; 16], t + 401), Ok(()));
        let full = Replays {
            seen: Mutex::new(Generations::default()),
        };
        for i in 0..MOST_NONCES as u32 {
            let mut n = [0u8; 16];
            n[..4].copy_from_slice(&i.to_be_bytes());
            assert_eq!(full.first_time(n, t), Ok(()));
        }
        assert_eq!(full.first_time([9; 16], t), Err(Refused::Busy));
    }
}
