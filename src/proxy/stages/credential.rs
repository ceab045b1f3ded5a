//! What a pool's members are told of the caller (`[pools.credential]`, see
//! [`crate::identity::assertion`]):
//!
//! - `identity`: the header the pool names is stripped from every request to the pool (a
//!   client's forged assertion never passes, pass-through routes included); on an MCP route a
//!   request with a verified principal gets an assertion the edge signs for it; an anonymous
//!   one gets none (the member learns "nobody").
//! - `static`: on an MCP route the pool's value replaces whatever the client sent under that
//!   header.
//!
//! Either way, the caller's `Authorization` never reaches the member next to it (a route may
//! not say `forward_credential` for such a pool). The kind that reached the member is kept for
//! the access log and the span ([`kind`]), never the value.

use crate::identity::assertion::Credential;
use crate::metrics;
use crate::proxy::ctx::Ctx;
use crate::proxy::stage::{Outbound, Stage};
use crate::runtime::EndpointKind;

/// The credential kind that went with the request's last try.
#[derive(Default)]
pub struct State {
    sent: Option<&'static str>,
}

/// What reached the member: `none`, `identity` or `static`.
pub fn kind(ctx: &Ctx) -> &'static str {
    ctx.stages.credential.sent.unwrap_or("none")
}

pub struct Credentials;

impl Stage for Credentials {
    const NAME: &'static str = "credential";

    fn upstream_request(o: &mut Outbound<'_>) -> pingora::Result<()> {
        let endpoint = o.ctx.endpoint()?;
        let pool = endpoint.route.pool.clone();
        let passthrough = endpoint.kind == EndpointKind::Passthrough;
        let value = match &pool.credential {
            Credential::None => return Ok(()),
            Credential::Identity(a) => {
                o.head.remove_header(&a.header);
                if passthrough {
                    return Ok(());
                }
                let Some(principal) = o.ctx.request.principal.as_deref() else {
                    o.head.remove_header(&http::header::AUTHORIZATION);
                    return Ok(());
                };
                let token = a
                    .signer
                    .mint(principal, &a.audience, a.ttl_seconds, unix_now());
                // Base64url and dots only: always a header value.
                let value = http::HeaderValue::try_from(token).map_err(|_| {
                    pingora::Error::explain(pingora::ErrorType::InternalError, "assertion header")
                })?;
                (&a.header, value)
            }
            Credential::Static(s) if !passthrough => (&s.header, s.value.clone()),
            Credential::Static(_) => return Ok(()),
        };
        o.head.remove_header(&http::header::AUTHORIZATION);
        o.head.insert_header(value.0.clone(), value.1)?;
        let kind = pool.credential.kind();
        o.ctx.stages.credential.sent = Some(kind);
        metrics::get()
            .access
            .upstream_credentials
            .with_label_values(&[pool.name.as_str(), kind])
            .inc();
        Ok(())
    }
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
