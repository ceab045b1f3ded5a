//! The scopes a call needs (`[[routes.scopes]]`, see [`crate::identity::scopes`]), once the
//! policy let the caller see the entry it names (a hidden one stays absent, never "forbidden"):
//! a `tools/call`, `prompts/get`, `resources/read` (…) naming an entry that needs scopes the
//! caller's token lacks gets 403 with `WWW-Authenticate: Bearer error="insufficient_scope",
//! scope="…"` naming what the token has and what the call needs, and the metadata
//! document's URL; the client may come back with a token that has them (step-up). A batch
//! (2025-03-26), which names several entries at once, is refused.

use crate::error::{EdgeError, Rejection};
use crate::proxy::ctx::Policed;
use crate::proxy::stage::{Admission, Flow, Phase, Site, Stage};

pub struct Scopes;

impl Stage for Scopes {
    const NAME: &'static str = "scopes";

    /// A route with scopes, where callers are identified.
    fn serves(site: &Site<'_>, _phase: Phase) -> bool {
        site.endpoint.route.access.scopes.is_some() && site.runtime.identity.is_some()
    }

    async fn request(a: &mut Admission<'_>) -> Result<Flow, Rejection> {
        let request = &a.ctx.request;
        let Some(endpoint) = &request.endpoint else {
            return Ok(Flow::Next);
        };
        let (Some(scopes), Some(identity)) = (
            &endpoint.route.access.scopes,
            a.ctx.snapshot.identity.as_deref(),
        ) else {
            return Ok(Flow::Next);
        };
        // A batch (2025-03-26) names several entries at once: refused, as the policy does.
        if request.message.as_deref().is_some_and(|m| m.batch) {
            let id = a.ctx.request_id().cloned();
            return Err(Rejection::with_id(EdgeError::BatchRefused, id));
        }
        let hidden = request
            .decided
            .policy
            .as_ref()
            .is_some_and(|p| p.verdict != Policed::Allowed);
        let target = request.message.as_deref().and_then(|m| m.target.as_ref());
        let Some(target) = target.filter(|_| !hidden) else {
            return Ok(Flow::Next);
        };
        let principal = request.principal.as_deref();
        let Some(ask) = scopes.lacking(principal, target.kind, &target.value) else {
            return Ok(Flow::Next);
        };
        let scheme = if super::identity::tls(a) {
            "https"
        } else {
            "http"
        };
        let host = super::route::request_host(a.session.req_header());
        let have = |s: &&String| principal.is_some_and(|p| p.scopes.contains(s));
        let missing: Vec<&str> = ask
            .iter()
            .filter(|s| !have(s))
            .map(String::as_str)
            .collect();
        let error = EdgeError::InsufficientScope {
            challenge: identity.step_up(&ask, scheme, host, &endpoint.route.name),
            missing: missing.join(" "),
        };
        Err(Rejection::with_id(error, a.ctx.request_id().cloned()))
    }
}
