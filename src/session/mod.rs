//! Legacy session affinity without a shared store: the edge replaces each upstream session
//! identifier with a token it seals, and routes a request carrying the token to the member
//! named inside, with the original identifier restored.
//!
//! - [`keyring`]: keys from a file or an environment variable; one seals, all open.
//! - [`token`]: what a token carries and the AES-256-GCM seal/open.

pub mod affinity;
pub mod keyring;
pub mod token;

pub use keyring::KeyRing;
pub use token::{Claims, TokenError};

use crate::metrics::TokenFailure;

/// Legacy session settings with the loaded key ring (`[sessions]`).
#[derive(Debug)]
pub struct Sessions {
    pub ring: KeyRing,
    pub max_age_secs: u64,
    pub bind_credential: bool,
}

impl From<TokenError> for TokenFailure {
    fn from(e: TokenError) -> Self {
        match e {
            TokenError::Malformed => TokenFailure::Malformed,
            TokenError::UnknownKey => TokenFailure::UnknownKey,
            TokenError::Forged => TokenFailure::Forged,
            TokenError::Expired => TokenFailure::Expired,
        }
    }
}

/// What a legacy session token is bound to: the principal (issuer and subject) when the
/// route knows who calls, so a refreshed token keeps the session; else the digest of the
/// client's `Authorization` value.
pub fn binding(
    req: &pingora::http::RequestHeader,
    principal: Option<&crate::identity::Principal>,
) -> Option<[u8; 16]> {
    match principal {
        Some(p) => Some(p.binding()),
        None => credential_digest(
            req.headers
                .get(http::header::AUTHORIZATION)
                .map(|v| v.as_bytes()),
        ),
    }
}

/// Digest of a client credential (`Authorization` value) kept in a token: the first 16 bytes
/// of its SHA-256. Enough to tell credentials apart; useless for recovering one.
pub fn credential_digest(authorization: Option<&[u8]>) -> Option<[u8; 16]> {
    let value = authorization?;
    let d = ring::digest::digest(&ring::digest::SHA256, value);
    let mut out = [0u8; 16];
    out.copy_from_slice(&d.as_ref()[..16]);
    Some(out)
}
