//! What a pool's members are told of the caller (`[pools.credential]`, see
//! [`crate::identity::assertion`] and [`crate::identity::exchange`]):
//!
//! - `identity`: the header the pool names is stripped from every request to the pool (a
//!   client's forged assertion never passes, pass-through routes included); on an MCP route a
//!   request with a verified principal gets an assertion the edge signs for it; an anonymous
//!   one gets none (the member learns "nobody").
//! - `static`: on an MCP route the pool's value replaces whatever the client sent under that
//!   header.
//! - `exchange`: once the request is admitted (every check passed, before a member is
//!   chosen), a caller verified by a JWT gets its token exchanged (RFC 8693), or the cached
//!   exchange; the member gets `Authorization: Bearer <exchanged>`. The authorization server
//!   refusing the caller's token: 401; failing or slow: 503 / 504 with `Retry-After`; either
//!   way nothing reaches the member. An anonymous caller, or one known by an API key, has no
//!   token to exchange: the member gets no `Authorization`.
//!
//! Either way, the caller's `Authorization` never reaches the member next to it (a route may
//! not say `forward_credential` for such a pool). The kind that reached the member is kept for
//! the access log and the span ([`kind`]), never the value.

use std::time::Instant;

use http::header::AUTHORIZATION;
use http::{HeaderName, HeaderValue};

use crate::error::{EdgeError, Rejection};
use crate::identity::assertion::Credential;
use crate::identity::exchange::Failure;
use crate::identity::{bearer_token, keys, Refusal};
use crate::metrics;
use crate::proxy::ctx::Ctx;
use crate::proxy::stage::{Admission, Flow, Outbound, Phase, Site, Stage};
use crate::runtime::EndpointKind;

/// The credential kind that went with the request's last try, and the exchanged token.
#[derive(Default)]
pub struct State {
    sent: Option<&'static str>,
    exchanged: Option<HeaderValue>,
}

/// What reached the member: `none`, `identity`, `static` or `exchange`.
pub fn kind(ctx: &Ctx) -> &'static str {
    ctx.stages.credential.sent.unwrap_or("none")
}

pub struct Credentials;

impl Stage for Credentials {
    const NAME: &'static str = "credential";

    /// Admission where the pool's credential is an exchanged token (not a pass-through);
    /// the member's head where the pool has a credential at all.
    fn serves(site: &Site<'_>, phase: Phase) -> bool {
        let credential = &site.endpoint.route.pool.credential;
        match phase {
            Phase::Admitted => {
                matches!(credential, Credential::Exchange(_))
                    && site.endpoint.kind != EndpointKind::Passthrough
            }
            Phase::UpstreamRequest => !matches!(credential, Credential::None),
            _ => true,
        }
    }

    async fn admitted(a: &mut Admission<'_>) -> Result<Flow, Rejection> {
        // Every other pool passes at this first look.
        let pool = match &a.ctx.request.endpoint {
            Some(e)
                if matches!(e.route.pool.credential, Credential::Exchange(_))
                    && e.kind != EndpointKind::Passthrough =>
            {
                e.route.pool.clone()
            }
            _ => return Ok(Flow::Next),
        };
        let Credential::Exchange(exchange) = &pool.credential else {
            return Ok(Flow::Next);
        };
        let principal = a.ctx.request.principal.as_deref();
        let token = bearer_token(&a.session.req_header().headers);
        let (Some(principal), Some(token)) = (principal, token) else {
            return Ok(Flow::Next);
        };
        if principal.issuer == keys::ISSUER {
            return Ok(Flow::Next);
        }
        let pool = pool.name.as_str();
        let started = Instant::now();
        let (source, pending) = exchange.lookup(token);
        let access = &metrics::get().credentials;
        access
            .token_exchange_cache
            .with_label_values(&[pool, source.label()])
            .inc();
        let outcome = pending.get().await;
        if source == crate::identity::exchange::Source::Miss {
            let label = outcome.as_ref().err().map_or("ok", Failure::label);
            access
                .token_exchanges
                .with_label_values(&[pool, label])
                .inc();
            access
                .token_exchange_seconds
                .with_label_values(&[pool])
                .observe(started.elapsed().as_secs_f64());
        }
        let error = match outcome {
            Ok(value) => {
                a.ctx.stages.credential.exchanged = Some(value);
                return Ok(Flow::Next);
            }
            Err(Failure::Refused(why)) => refused(a, &why),
            Err(Failure::Timeout) => {
                log::warn!("pool '{pool}': the token exchange did not end in time");
                EdgeError::ExchangeTimeout { pool: pool.into() }
            }
            Err(Failure::Failed(why)) => {
                log::warn!("pool '{pool}': the token exchange failed: {why}");
                EdgeError::ExchangeFailed { pool: pool.into() }
            }
        };
        Err(Rejection::with_id(error, a.ctx.request_id().cloned()))
    }

    fn upstream_request(o: &mut Outbound<'_>) -> pingora::Result<()> {
        let endpoint = o.ctx.endpoint()?;
        let pool = endpoint.route.pool.clone();
        let passthrough = endpoint.kind == EndpointKind::Passthrough;
        let (name, value): (HeaderName, HeaderValue) = match &pool.credential {
            Credential::None => return Ok(()),
            Credential::Identity(a) => {
                o.head.remove_header(&a.header);
                if passthrough {
                    return Ok(());
                }
                let Some(principal) = o.ctx.request.principal.as_deref() else {
                    o.head.remove_header(&AUTHORIZATION);
                    return Ok(());
                };
                let token = a
                    .signer
                    .mint(principal, &a.audience, a.ttl_seconds, unix_now());
                // Base64url and dots only: always a header value.
                let value = HeaderValue::try_from(token).map_err(|_| {
                    pingora::Error::explain(pingora::ErrorType::InternalError, "assertion header")
                })?;
                (a.header.clone(), value)
            }
            Credential::Static(s) if !passthrough => (s.header.clone(), s.value.clone()),
            Credential::Static(_) => return Ok(()),
            Credential::Exchange(_) => {
                if passthrough {
                    return Ok(());
                }
                let Some(value) = o.ctx.stages.credential.exchanged.clone() else {
                    o.head.remove_header(&AUTHORIZATION);
                    return Ok(());
                };
                (AUTHORIZATION, value)
            }
        };
        o.head.remove_header(&AUTHORIZATION);
        o.head.insert_header(name, value)?;
        let kind = pool.credential.kind();
        o.ctx.stages.credential.sent = Some(kind);
        metrics::get()
            .credentials
            .upstream_credentials
            .with_label_values(&[pool.name.as_str(), kind])
            .inc();
        Ok(())
    }
}

/// The authorization server says the caller's token is no good: 401, as if the edge had
/// found it so (the client gets a new token and tries again).
fn refused(a: &Admission<'_>, why: &str) -> EdgeError {
    log::info!("token exchange refused the caller's token: {why}");
    let Some(identity) = a.ctx.snapshot.identity.as_deref() else {
        return EdgeError::Internal {
            detail: "an exchange without [identity]".into(),
        };
    };
    let refusal = Refusal::Invalid("The authorization server refused to exchange the token");
    let scheme = if super::identity::tls(a) {
        "https"
    } else {
        "http"
    };
    let host = super::route::request_host(a.session.req_header());
    let route = a
        .ctx
        .request
        .endpoint
        .as_ref()
        .map_or("", |e| e.route.name.as_str());
    EdgeError::Unauthorized {
        challenge: identity.challenge(refusal, scheme, host, route),
        reason: refusal.description(),
    }
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
