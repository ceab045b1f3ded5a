//! Legacy session affinity without a shared store: the edge replaces each upstream session
//! identifier with a token it seals, and routes a request carrying the token to the member
//! named inside, with the original identifier restored.
//!
//! - [`keyring`]: keys from a file or an environment variable; one seals, all open.
//! - [`token`]: what a token carries and the AES-256-GCM seal/open.
//! - [`open_for`]: a token of one kind opened for one pool and caller, the one check every
//!   sealed id the edge hands out (legacy sessions, bridged sessions, task ids) goes through;
//!   [`open_session`] and [`seal_session`] for the session kinds, which share the answer to a
//!   token that does not open (404: the client re-initialises).

pub mod keyring;
pub mod streams;
pub mod token;

pub use keyring::KeyRing;
pub use token::{Claims, Kind, Owner, TokenError};

use crate::error::EdgeError;
use crate::metrics::{self, TokenFailure, TokenOp};
use token::now_secs;

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

/// Whose a token must be to open for a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caller {
    /// Exactly this binding's (none: sealed for none).
    Exactly(Option<[u8; 16]>),
    /// This binding's, when the token was sealed for one at all.
    IfBound(Option<[u8; 16]>),
    /// Anyone's.
    Any,
}

/// Why a token did not open for a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unopened {
    Token(TokenError),
    OtherPool,
    OtherCaller,
}

/// Open a token of `kind` (at most `max_age_secs` old) for a route of `pool` and `caller`.
/// The member it names is the caller's to find in the pool: a token never makes the edge
/// connect to an address of its own choosing.
pub fn open_for(
    sessions: &Sessions,
    token: &str,
    kind: Kind,
    max_age_secs: u64,
    pool: &str,
    caller: Caller,
) -> Result<Claims, Unopened> {
    let claims = token::open_kind(&sessions.ring, token, now_secs(), max_age_secs, kind)
        .map_err(Unopened::Token)?;
    if claims.pool != pool {
        return Err(Unopened::OtherPool);
    }
    let theirs = match caller {
        Caller::Exactly(binding) => claims.credential == binding,
        Caller::IfBound(binding) => claims.credential.is_none() || claims.credential == binding,
        Caller::Any => true,
    };
    if !theirs {
        return Err(Unopened::OtherCaller);
    }
    Ok(claims)
}

/// Open a session token of `kind` (a legacy session, a bridged one) for `pool`: every
/// failure is counted and is a 404 the client answers by re-initialising. The token is
/// counted as opened only by the caller, once it is used.
pub fn open_session(
    s: &Sessions,
    pool: &str,
    token: &str,
    credential: Option<[u8; 16]>,
    kind: Kind,
) -> Result<Claims, EdgeError> {
    let caller = match s.bind_credential {
        true => Caller::Exactly(credential),
        false => Caller::Any,
    };
    open_for(s, token, kind, s.max_age_secs, pool, caller).map_err(|e| {
        let (failure, error) = match e {
            Unopened::Token(TokenError::Expired) => {
                (TokenFailure::Expired, EdgeError::SessionExpired)
            }
            Unopened::OtherCaller => (TokenFailure::ForeignCredential, EdgeError::SessionForeign),
            Unopened::Token(t) => (t.into(), EdgeError::SessionUnknown { reason: t.reason() }),
            Unopened::OtherPool => (
                TokenFailure::OtherPool,
                EdgeError::SessionUnknown {
                    reason: "issued for another pool",
                },
            ),
        };
        metrics::get().token_failure(failure);
        error
    })
}

/// Where a sealed session lives: `member` of `pool` knows it as `upstream_id` (a legacy
/// session's id; what a bridged client declared); `owner` is the replica holding it when
/// it lives inside one (a stdio pool's).
pub struct Held<'a> {
    pub pool: &'a str,
    pub member: &'a str,
    pub upstream_id: &'a str,
    pub owner: Option<&'a Owner>,
}

/// Seal a session token of `kind` for the session `held`, bound to `credential` when the
/// key ring binds them.
pub fn seal_session(
    sessions: &Sessions,
    kind: Kind,
    held: Held<'_>,
    credential: Option<[u8; 16]>,
) -> Result<String, EdgeError> {
    let claims = Claims {
        pool: held.pool.to_string(),
        member: held.member.to_string(),
        upstream_id: held.upstream_id.to_string(),
        issued_at: now_secs(),
        credential: credential.filter(|_| sessions.bind_credential),
        owner: held.owner.cloned(),
    };
    let t = token::seal_kind(&sessions.ring, &claims, kind).map_err(|e| EdgeError::Internal {
        detail: format!("sealing a session token: {e}"),
    })?;
    metrics::get().token(TokenOp::Sealed);
    Ok(t)
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
