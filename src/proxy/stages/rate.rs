//! The route's rate limit (429), once the body named the method and the tool; before the
//! policy, so a caller over its limit learns nothing more of what it may see.
//!
//! - The caller is its principal on a route with `auth`, else its address (after the
//!   trusted proxies); a `tools/call` also draws from the caller's bucket for that tool, when
//!   the route's policy lets the caller use the tool (a made-up name buys nothing).
//! - Who decides ([`crate::identity::rate`]): this replica's buckets, or, with
//!   `[rate_limits] redis`, Redis for the whole fleet, and this replica's share of the limit
//!   when Redis cannot decide within its deadline.
//! - Out: the verdict for the trace and the access log (`ctx.request.decided.rate`); a 429 with
//!   `Retry-After`, `RateLimit-Limit`, `RateLimit-Remaining` and `data.retryAfterMs`.

use crate::error::{EdgeError, Rejection};
use crate::identity::rate::{self, Decided, Limited};
use crate::identity::Principal;
use crate::mcp::rules::Verdict;
use crate::mcp::target::Kind;
use crate::metrics;
use crate::proxy::ctx::RateVerdict;
use crate::proxy::stage::{Admission, Flow, Phase, Site, Stage};
use crate::runtime::Route;

/// The longest tool name that gets a bucket of its own (longer ones draw from the caller's
/// only).
const MAX_TOOL: usize = 128;

pub struct Rate;

impl Stage for Rate {
    const NAME: &'static str = "rate";

    /// A route with a rate limit.
    fn serves(site: &Site<'_>, _phase: Phase) -> bool {
        site.endpoint.route.access.rate.is_some()
    }

    async fn request(a: &mut Admission<'_>) -> Result<Flow, Rejection> {
        let Some(endpoint) = a.ctx.request.endpoint.clone() else {
            return Ok(Flow::Next);
        };
        let route = &endpoint.route;
        let Some(limit) = &route.access.rate else {
            return Ok(Flow::Next);
        };
        let principal = a.ctx.request.principal.as_deref();
        let tool = own_bucket(route, principal, a.ctx.request.message.as_deref());
        let address = match principal {
            Some(_) => super::forwarding::peer(a.session, a.ctx).map(|ip| ip.to_canonical()),
            None => super::forwarding::client_address(a.session, a.ctx),
        };
        let caller = rate::caller_key(principal, address);
        let snapshot = &a.ctx.snapshot;
        let (verdict, decided) = match &snapshot.rate_store {
            None => (limit.local(&caller, tool), Decided::Local),
            Some(store) => match store
                .decide(&route.name, &limit.settings, &caller, tool)
                .await
            {
                Some(verdict) => (verdict, Decided::Shared),
                None => {
                    let live = snapshot.fleet.as_ref().map_or(1, |f| f.live());
                    (limit.fallback(live, &caller, tool), Decided::Fallback)
                }
            },
        };
        let m = metrics::get();
        m.access
            .rate_decisions
            .with_label_values(&[route.name.as_str(), metrics::label(decided)])
            .inc();
        a.ctx.request.decided.rate = Some(match verdict {
            Ok(()) => RateVerdict::Allowed,
            Err(_) => RateVerdict::Limited,
        });
        let Err(Limited { retry_after, limit }) = verdict else {
            return Ok(Flow::Next);
        };
        m.access
            .rate_limited
            .with_label_values(&[route.name.as_str()])
            .inc();
        let error = EdgeError::RateLimited {
            retry_after_ms: rate::retry_after_ms(retry_after),
            limit,
        };
        Err(Rejection::with_id(error, a.ctx.request_id().cloned()))
    }
}

/// The tool a `tools/call` also draws from the caller's bucket for: one the route's policy
/// lets the caller use, of a bounded name.
fn own_bucket<'a>(
    route: &Route,
    principal: Option<&Principal>,
    message: Option<&'a Verdict>,
) -> Option<&'a str> {
    message
        .filter(|m| m.method.as_deref() == Some("tools/call"))
        .and_then(|m| m.target.as_ref())
        .map(|t| t.value.as_str())
        .filter(|name| name.len() <= MAX_TOOL)
        .filter(|name| {
            let policy = route.access.policy.as_ref();
            policy.is_none_or(|p| p.grant(principal).allows(Kind::Tool, name))
        })
}
