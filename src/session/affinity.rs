//! Turning a client's session token into the member that owns the session, and an
//! upstream's session identifier into a token.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::error::EdgeError;
use crate::metrics;
use crate::routing::{Member, Pool};

use super::token::{self, Claims, Kind, TokenError};
use super::Sessions;
use crate::metrics::{TokenFailure, TokenOp};

/// Where a legacy request with a session must go, and what to restore on the way.
#[derive(Debug, Clone)]
pub struct Sticky {
    /// The owning member (from the route's current pool).
    pub member: Arc<Member>,
    /// The upstream's own session identifier.
    pub upstream_id: String,
    /// The token the client sent (echoed back when the upstream repeats its identifier).
    pub token: String,
}

pub fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn refuse(reason: TokenFailure, error: EdgeError) -> EdgeError {
    metrics::get().token_failure(reason);
    error
}

/// Open `token` for a route served by `pool`. Every failure is a 404 the client answers by
/// re-initialising; the member must be in the pool now, so a token never makes the edge
/// connect to an address of its own choosing.
pub fn resolve(
    sessions: Option<&Sessions>,
    pool: &Pool,
    token: &str,
    credential: Option<[u8; 16]>,
) -> Result<Sticky, EdgeError> {
    let Some(s) = sessions else {
        return Err(refuse(
            TokenFailure::UnknownKey,
            EdgeError::SessionUnknown {
                reason: "this edge holds no session keys",
            },
        ));
    };
    let claims = open_session(s, &pool.name, token, credential, Kind::Session)?;
    let Some(member) = pool.find(&claims.member) else {
        return Err(refuse(
            TokenFailure::MemberGone,
            EdgeError::SessionMemberGone {
                member: claims.member,
            },
        ));
    };
    metrics::get().token(TokenOp::Opened);
    Ok(Sticky {
        member,
        upstream_id: claims.upstream_id,
        token: token.to_string(),
    })
}

/// Open a session token of `kind` (a legacy session, a bridged one) for the pool named
/// `pool`: every failure is counted and is a 404 the client answers by re-initialising. The
/// token is counted as opened only by the caller, once it is used.
pub fn open_session(
    s: &Sessions,
    pool: &str,
    token: &str,
    credential: Option<[u8; 16]>,
    kind: Kind,
) -> Result<Claims, EdgeError> {
    let claims = token::open_kind(&s.ring, token, now_secs(), s.max_age_secs, kind).map_err(
        |e| match e {
            TokenError::Expired => refuse(TokenFailure::Expired, EdgeError::SessionExpired),
            other => refuse(
                other.into(),
                EdgeError::SessionUnknown {
                    reason: other.reason(),
                },
            ),
        },
    )?;
    if claims.pool != pool {
        return Err(refuse(
            TokenFailure::OtherPool,
            EdgeError::SessionUnknown {
                reason: "issued for another pool",
            },
        ));
    }
    if s.bind_credential && claims.credential != credential {
        return Err(refuse(
            TokenFailure::ForeignCredential,
            EdgeError::SessionForeign,
        ));
    }
    Ok(claims)
}

/// Seal an upstream session identifier minted by `member` of the pool named `pool`.
pub fn seal(
    sessions: &Sessions,
    pool: &str,
    member: &str,
    upstream_id: &str,
    credential: Option<[u8; 16]>,
) -> Result<String, EdgeError> {
    let claims = Claims {
        pool: pool.to_string(),
        member: member.to_string(),
        upstream_id: upstream_id.to_string(),
        issued_at: now_secs(),
        credential: if sessions.bind_credential {
            credential
        } else {
            None
        },
    };
    let t = token::seal(&sessions.ring, &claims).map_err(|e| EdgeError::Internal {
        detail: format!("sealing a session token: {e}"),
    })?;
    metrics::get().token(TokenOp::Sealed);
    Ok(t)
}
