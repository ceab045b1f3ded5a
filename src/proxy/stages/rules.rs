//! The MCP rules for a POST's body (see [`crate::mcp::rules`]): its era from the body, its
//! headers against the body (-32020), its revision against the route's `versions` narrowed
//! to what the pool's members speak (-32022), a well-formed JSON-RPC message. Its verdict
//! (`ctx.request.message`, `ctx.request.era`) is what every later stage reads of the body.
//! A refused message is recorded too, as far as it could be read (its method, the entry it
//! names, its era): the refusal's span, access-log line and operation metric say what was
//! refused. The HTTP+SSE messages endpoint serves legacy revisions only. A GET or DELETE
//! (a stream, a session's end) is legacy, where the route takes legacy revisions: this stage
//! is the era's one writer.

use http::Method;

use crate::error::{EdgeError, Rejection};
use crate::mcp::rules::{check_post, refused, Era, Verdict};
use crate::proxy::stage::{Admission, Flow, Stage};
use crate::runtime::EndpointKind;

pub struct Rules;

impl Stage for Rules {
    const NAME: &'static str = "rules";

    async fn request(a: &mut Admission<'_>) -> Result<Flow, Rejection> {
        let request = &a.ctx.request;
        let Some(endpoint) = &request.endpoint else {
            return Ok(Flow::Next);
        };
        let Some(body) = &request.body else {
            return without_body(a);
        };
        if endpoint.kind == EndpointKind::Passthrough {
            return Ok(Flow::Next);
        }
        let headers = &a.session.req_header().headers;
        let verdict = match check_post(headers, body.bytes(), &endpoint.route.versions) {
            Ok(verdict) => verdict,
            Err(refusal) => {
                if let Some(read) = refused(headers, body.bytes()) {
                    record(a, read);
                }
                return Err(refusal);
            }
        };
        let legacy_only = endpoint.kind == EndpointKind::Messages && verdict.era != Era::Legacy;
        let id = verdict.id.clone();
        record(a, verdict);
        if legacy_only {
            let detail = "the HTTP+SSE messages endpoint serves legacy revisions only";
            return Err(Rejection::with_id(
                EdgeError::InvalidRequest {
                    detail: detail.into(),
                },
                id,
            ));
        }
        Ok(Flow::Next)
    }
}

/// A GET or DELETE (its body, if any, dropped): a legacy stream or a session's end, where
/// the route takes legacy revisions; no standalone stream through the bridge (clients take
/// 405 as "none").
fn without_body(a: &mut Admission<'_>) -> Result<Flow, Rejection> {
    let Some(endpoint) = &a.ctx.request.endpoint else {
        return Ok(Flow::Next);
    };
    let method = &a.session.req_header().method;
    let stream_or_end = match endpoint.kind {
        EndpointKind::Streamable => method == Method::GET || method == Method::DELETE,
        EndpointKind::SseStream => method == Method::GET,
        _ => false,
    };
    if !stream_or_end {
        return Ok(Flow::Next);
    }
    let bridged = endpoint.kind == EndpointKind::Streamable && endpoint.route.bridge;
    if !bridged && !endpoint.route.versions.accepts_legacy() {
        return Err(EdgeError::MethodNotAllowed {
            method: method.to_string(),
            allow: super::route::allowed_methods(endpoint),
        }
        .into());
    }
    a.ctx.request.era = Some(Era::Legacy);
    a.ctx.labels.era = Era::Legacy.label();
    if bridged && method == Method::GET {
        return Err(EdgeError::MethodNotAllowed {
            method: method.to_string(),
            allow: "POST, DELETE, OPTIONS",
        }
        .into());
    }
    Ok(Flow::Next)
}

/// What the body says, for every later stage (and the logging stages).
fn record(a: &mut Admission<'_>, verdict: Verdict) {
    a.ctx.labels.record(&verdict);
    a.ctx.request.era = Some(verdict.era.clone());
    a.ctx.request.message = Some(Box::new(verdict));
}
