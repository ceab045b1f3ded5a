//! Session tokens: what they carry and how they are sealed.
//!
//! Wire form, base64url without padding (visible ASCII, valid in a header and a query):
//!
//! ```text
//! version (1) | key id (1) | nonce (12) | AES-256-GCM( claims ) + tag (16)
//! ```
//!
//! The version byte also says what the token names: 1 a legacy session, 2 a task (Tasks
//! extension). A token of one kind never opens as the other. The version and key id are
//! authenticated as associated data. Claims, in order:
//! issue time (u64 seconds), flags (u8, bit 0: credential digest present; bit 1: owning
//! replica present), credential digest (16 bytes, if present), then pool, member and upstream
//! session id, each as a u16 length and UTF-8 bytes, then (bit 1) the owning replica: its boot
//! id (u64) and its hand-off address (u16 length and UTF-8). Tokens sealed before replicas
//! named themselves open unchanged (no owner: the replica that opens them holds the state).

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use ring::aead::{Aad, Nonce, NONCE_LEN};
use ring::rand::{SecureRandom, SystemRandom};

use super::KeyRing;

/// What a token names: its version byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Session = 1,
    Task = 2,
    /// A bridged legacy session: what the client declared at `initialize`.
    Bridge = 3,
    /// A bridged HTTP+SSE client's stream (held by the replica the token names).
    Stream = 4,
}
const HEADER_LEN: usize = 2 + NONCE_LEN;
const TAG_LEN: usize = 16;
/// Longest token text the edge will try to open.
pub const MAX_TOKEN_CHARS: usize = 4096;
/// Tokens issued this far in the future are accepted (clock skew between replicas).
const MAX_SKEW_SECS: u64 = 300;

/// What a token carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claims {
    pub pool: String,
    /// The owning member's identity (`ip:port`); it must still be in the pool to be used.
    pub member: String,
    /// The upstream's own session identifier, restored on the way in.
    pub upstream_id: String,
    pub issued_at: u64,
    pub credential: Option<[u8; 16]>,
    /// The replica holding the state the token names, when the state lives inside a replica
    /// (a stdio pool's session) and replicas hand requests to each other (`[fleet]`).
    pub owner: Option<Owner>,
}

/// A replica, as a token names it: its hand-off address and what tells it from a replica
/// started later at the same address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    pub addr: String,
    pub boot: u64,
}

/// Why a token did not open. Each is a 404 to the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenError {
    /// Not base64url, too short or long, unknown version.
    Malformed,
    /// Names a key id the ring does not hold (removed after rotation, or forged).
    UnknownKey,
    /// Authentication failed: altered, truncated or sealed with another key.
    Forged,
    /// Older than the configured maximum age.
    Expired,
}

impl TokenError {
    pub fn reason(self) -> &'static str {
        match self {
            TokenError::Malformed => "malformed",
            TokenError::UnknownKey => "unknown_key",
            TokenError::Forged => "forged",
            TokenError::Expired => "expired",
        }
    }
}

/// Seconds since the epoch (token issue times).
pub fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Seal a legacy session token.
pub fn seal(ring: &KeyRing, claims: &Claims) -> Result<String, &'static str> {
    seal_kind(ring, claims, Kind::Session)
}

/// Open a legacy session token.
pub fn open(
    ring: &KeyRing,
    token: &str,
    now: u64,
    max_age_secs: u64,
) -> Result<Claims, TokenError> {
    open_kind(ring, token, now, max_age_secs, Kind::Session)
}

pub fn seal_kind(ring: &KeyRing, claims: &Claims, kind: Kind) -> Result<String, &'static str> {
    let (key_id, key) = ring.sealing();
    let mut nonce = [0u8; NONCE_LEN];
    SystemRandom::new()
        .fill(&mut nonce)
        .map_err(|_| "no system randomness")?;

    let mut buf = Vec::with_capacity(HEADER_LEN + 64 + claims.upstream_id.len() + TAG_LEN);
    buf.extend_from_slice(&[kind as u8, key_id]);
    buf.extend_from_slice(&nonce);
    buf.extend_from_slice(&claims.issued_at.to_be_bytes());
    let owned = if claims.owner.is_some() { 2 } else { 0 };
    match claims.credential {
        Some(d) => {
            buf.push(1 | owned);
            buf.extend_from_slice(&d);
        }
        None => buf.push(owned),
    }
    let put = |buf: &mut Vec<u8>, field: &str| -> Result<(), &'static str> {
        let len = u16::try_from(field.len()).map_err(|_| "claim too long")?;
        buf.extend_from_slice(&len.to_be_bytes());
        buf.extend_from_slice(field.as_bytes());
        Ok(())
    };
    for field in [&claims.pool, &claims.member, &claims.upstream_id] {
        put(&mut buf, field)?;
    }
    if let Some(owner) = &claims.owner {
        buf.extend_from_slice(&owner.boot.to_be_bytes());
        put(&mut buf, &owner.addr)?;
    }
    let (header, body) = buf.split_at_mut(HEADER_LEN);
    let tag = key
        .seal_in_place_separate_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(&header[..2]),
            body,
        )
        .map_err(|_| "seal failed")?;
    buf.extend_from_slice(tag.as_ref());
    Ok(URL_SAFE_NO_PAD.encode(buf))
}

pub fn open_kind(
    ring: &KeyRing,
    token: &str,
    now: u64,
    max_age_secs: u64,
    kind: Kind,
) -> Result<Claims, TokenError> {
    if token.len() > MAX_TOKEN_CHARS {
        return Err(TokenError::Malformed);
    }
    let mut buf = URL_SAFE_NO_PAD
        .decode(token.as_bytes())
        .map_err(|_| TokenError::Malformed)?;
    if buf.len() < HEADER_LEN + TAG_LEN || buf[0] != kind as u8 {
        return Err(TokenError::Malformed);
    }
    let key = ring.get(buf[1]).ok_or(TokenError::UnknownKey)?;
    let mut nonce = [0u8; NONCE_LEN];
    nonce.copy_from_slice(&buf[2..HEADER_LEN]);
    let (header, body) = buf.split_at_mut(HEADER_LEN);
    let plain = key
        .open_in_place(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(&header[..2]),
            body,
        )
        .map_err(|_| TokenError::Forged)?;
    // Authenticated from here on: a parse failure is our own format changing, not an attack.
    let claims = parse_claims(plain).ok_or(TokenError::Malformed)?;
    if claims.issued_at > now.saturating_add(MAX_SKEW_SECS) {
        return Err(TokenError::Malformed);
    }
    if now.saturating_sub(claims.issued_at) > max_age_secs {
        return Err(TokenError::Expired);
    }
    Ok(claims)
}

fn parse_claims(mut b: &[u8]) -> Option<Claims> {
    let issued_at = u64::from_be_bytes(take(&mut b, 8)?.try_into().ok()?);
    let flags = take(&mut b, 1)?[0];
    if flags & !3 != 0 {
        return None;
    }
    let credential = match flags & 1 {
        0 => None,
        _ => Some(take(&mut b, 16)?.try_into().ok()?),
    };
    let field = |b: &mut &[u8]| -> Option<String> {
        let len = u16::from_be_bytes(take(b, 2)?.try_into().ok()?) as usize;
        String::from_utf8(take(b, len)?.to_vec()).ok()
    };
    let (pool, member, upstream_id) = (field(&mut b)?, field(&mut b)?, field(&mut b)?);
    let owner = match flags & 2 {
        0 => None,
        _ => {
            let boot = u64::from_be_bytes(take(&mut b, 8)?.try_into().ok()?);
            Some(Owner {
                boot,
                addr: field(&mut b)?,
            })
        }
    };
    Some(Claims {
        pool,
        member,
        upstream_id,
        issued_at,
        credential,
        owner,
    })
}

fn take<'a>(b: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
    if b.len() < n {
        return None;
    }
    let (head, rest) = b.split_at(n);
    *b = rest;
    Some(head)
}

#[cfg(test)]
mod tests {
    use super::*;

    const S1: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";
    const S2: &str = "ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA";
    const NOW: u64 = 1_800_000_000;

    fn claims() -> Claims {
        Claims {
            pool: "main".into(),
            member: "127.0.0.1:3001".into(),
            upstream_id: "0b7a3c1e-5f0c-4e43-9d1c-2f8d5b9f6a10".into(),
            issued_at: NOW,
            credential: super::super::credential_digest(Some(b"Bearer abc")),
            owner: None,
        }
    }

    #[test]
    fn a_token_names_its_owning_replica_and_old_tokens_name_none() {
        let ring = KeyRing::parse(&format!("1:{S1}")).unwrap();
        let owned = Claims {
            owner: Some(Owner {
                addr: "10.0.0.7:7444".into(),
                boot: 0x0123_4567_89ab_cdef,
            }),
            ..claims()
        };
        let t = seal(&ring, &owned).unwrap();
        assert_eq!(open(&ring, &t, NOW, 3600).unwrap(), owned);
        let plain = seal(&ring, &claims()).unwrap();
        assert_eq!(open(&ring, &plain, NOW, 3600).unwrap().owner, None);
    }

    #[test]
    fn round_trip_is_visible_ascii() {
        let ring = KeyRing::parse(&format!("1:{S1}")).unwrap();
        let t = seal(&ring, &claims()).unwrap();
        assert!(
            t.bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_'),
            "{t}"
        );
        assert_eq!(open(&ring, &t, NOW + 5, 3600).unwrap(), claims());
        assert_ne!(seal(&ring, &claims()).unwrap(), t, "random nonce per token");
    }

    #[test]
    fn a_task_token_is_no_session_token() {
        let ring = KeyRing::parse(&format!("1:{S1}")).unwrap();
        let task = seal_kind(&ring, &claims(), Kind::Task).unwrap();
        assert_eq!(
            open_kind(&ring, &task, NOW, 3600, Kind::Task).unwrap(),
            claims()
        );
        assert_eq!(open(&ring, &task, NOW, 3600), Err(TokenError::Malformed));
        let session = seal(&ring, &claims()).unwrap();
        assert_eq!(
            open_kind(&ring, &session, NOW, 3600, Kind::Task),
            Err(TokenError::Malformed)
        );
    }

    #[test]
    fn every_flipped_byte_and_every_truncation_fails() {
        let ring = KeyRing::parse(&format!("1:{S1}")).unwrap();
        let raw = URL_SAFE_NO_PAD
            .decode(seal(&ring, &claims()).unwrap())
            .unwrap();
        for i in 0..raw.len() {
            for bit in 0..8 {
                let mut m = raw.clone();
                m[i] ^= 1 << bit;
                assert!(
                    open(&ring, &URL_SAFE_NO_PAD.encode(&m), NOW, 3600).is_err(),
                    "byte {i} bit {bit}"
                );
            }
        }
        for n in 0..raw.len() {
            assert!(
                open(&ring, &URL_SAFE_NO_PAD.encode(&raw[..n]), NOW, 3600).is_err(),
                "truncated to {n}"
            );
        }
    }

    #[test]
    fn wrong_key_expiry_and_rotation() {
        let old = KeyRing::parse(&format!("1:{S1}")).unwrap();
        let t = seal(&old, &claims()).unwrap();
        // A ring with another secret under the same id: forged.
        let other = KeyRing::parse(&format!("1:{S2}")).unwrap();
        assert_eq!(open(&other, &t, NOW, 3600), Err(TokenError::Forged));
        // New sealing key added: old tokens still open.
        let rotated = KeyRing::parse(&format!("2:{S2}\n1:{S1}")).unwrap();
        assert!(open(&rotated, &t, NOW, 3600).is_ok());
        assert_eq!(
            open(&rotated, &seal(&rotated, &claims()).unwrap(), NOW, 3600).map(|c| c.pool),
            Ok("main".into())
        );
        // Old key removed: unknown key.
        let new_only = KeyRing::parse(&format!("2:{S2}")).unwrap();
        assert_eq!(open(&new_only, &t, NOW, 3600), Err(TokenError::UnknownKey));
        // Too old, and from too far in the future.
        assert_eq!(open(&old, &t, NOW + 3601, 3600), Err(TokenError::Expired));
        assert_eq!(open(&old, &t, NOW - 1000, 3600), Err(TokenError::Malformed));
    }

    /// A million random mutations of a real token (flips, truncations, insertions, splices):
    /// none opens.
    #[test]
    fn a_million_random_mutations_never_open() {
        let ring = KeyRing::parse(&format!("2:{S2}\n1:{S1}")).unwrap();
        let token = seal(&ring, &claims()).unwrap();
        let raw = URL_SAFE_NO_PAD.decode(&token).unwrap();
        let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut opened = 0;
        for _ in 0..1_000_000 {
            let mut m = raw.clone();
            match next() % 4 {
                0 => {
                    for _ in 0..(1 + next() % 3) {
                        let i = (next() as usize) % m.len();
                        m[i] ^= (next() % 255 + 1) as u8;
                    }
                }
                1 => m.truncate((next() as usize) % m.len()),
                2 => {
                    let i = (next() as usize) % (m.len() + 1);
                    m.insert(i, next() as u8);
                }
                _ => {
                    // Splice: the header of the real token, random bytes after it.
                    let keep = 2 + (next() as usize) % (m.len() - 2);
                    for b in &mut m[keep..] {
                        *b = next() as u8;
                    }
                }
            }
            // Two flips of one byte by the same value give the token back: not a mutation.
            if m == raw {
                continue;
            }
            if open(&ring, &URL_SAFE_NO_PAD.encode(&m), NOW, 3600).is_ok() {
                opened += 1;
            }
        }
        assert_eq!(opened, 0);
    }

    #[test]
    fn junk_is_malformed() {
        let ring = KeyRing::parse(&format!("1:{S1}")).unwrap();
        for junk in ["", "abc", "!!!!", &"A".repeat(MAX_TOKEN_CHARS + 1)] {
            assert_eq!(
                open(&ring, junk, NOW, 3600),
                Err(TokenError::Malformed),
                "{junk:.10}"
            );
        }
    }
}
