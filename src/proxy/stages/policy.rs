//! The route's policy (see [`crate::identity::policy`]), once the body named its method and
//! entry (and the rate limit let the request by: [`super::rate`]); the list answers of a
//! route with a policy are filtered on their way ([`crate::mcp::lists`]).
//!
//! - A request naming a hidden tool, prompt or resource is answered as the server answers an
//!   absent one, and never forwarded. Where the edge cannot give that answer exactly (an
//!   HTTP+SSE POST, whose answer belongs on a stream another replica may hold; a legacy
//!   request with an id too long to echo, or whose `Accept` a server refuses), it goes on with
//!   the name replaced by one no server has, the server answers for it and runs nothing, and
//!   the edge puts the name back in that answer.
//! - A `subscriptions/listen` loses the URIs the caller may not see; a batch is refused (its
//!   calls could not each be checked).
//! - The answer to a list request, and a legacy event stream (where HTTP+SSE answers
//!   arrive), lose the entries the caller may not see; they are asked for uncompressed.

use pingora::http::ResponseHeader;
use serde_json::Value;

use crate::error::{EdgeError, Rejection};
use crate::identity::policy::Grant;
use crate::mcp::absent::{self, AbsentAs};
use crate::mcp::learned::{AbsentAnswers, Framing, KINDS};
use crate::mcp::lists::{self, ListFilter, LIST_METHODS};
use crate::mcp::media::{self, Media};
use crate::mcp::rules::{Era, Verdict};
use crate::mcp::sse;
use crate::mcp::target::Target;
use crate::metrics;
use crate::proxy::answer::Answer;
use crate::proxy::ctx::{Ctx, Policed, PolicyVerdict};
use crate::proxy::edge::Edge;
use crate::proxy::rewrite;
use crate::proxy::stage::{Admission, Flow, Outbound, Phase, Site, Stage};
use crate::runtime::{EndpointKind, Route};

/// What the caller may see, on a route with a policy, and what its answer needs.
pub struct State {
    grant: Grant,
    /// The id of a list request (`tools/list`, …): its answer is filtered.
    answering: Option<Value>,
    /// A legacy event stream: its list answers are filtered.
    stream: bool,
    /// A hidden name was replaced in this request: the answer gets it back.
    restore_hidden: bool,
}

pub struct Policy;

impl Stage for Policy {
    const NAME: &'static str = "policy";

    /// A route with a tool policy.
    fn serves(site: &Site<'_>, _phase: Phase) -> bool {
        site.endpoint.route.access.policy.is_some()
    }

    async fn request(a: &mut Admission<'_>) -> Result<Flow, Rejection> {
        let Some(endpoint) = a.ctx.request.endpoint.clone() else {
            return Ok(Flow::Next);
        };
        let Some(policy) = &endpoint.route.access.policy else {
            return Ok(Flow::Next);
        };
        let id = a.ctx.request_id().cloned();
        let reject = |e| Rejection::with_id(e, id.clone());
        let grant = policy.grant(a.ctx.request.principal.as_deref());
        let message = a.ctx.request.message.as_deref();
        if message.is_some_and(|m| m.batch) {
            decide(a.ctx, Policed::Refused, &grant);
            return Err(reject(EdgeError::BatchRefused));
        }
        let messages = endpoint.kind == EndpointKind::Messages;
        let method = message.and_then(|m| m.method.as_deref());
        let mut state = State {
            grant,
            // Over HTTP+SSE the answer comes on the stream, filtered there (a bridged
            // route's: the POST's own answer, which the edge puts on the stream it holds).
            // Filtered whatever the id (one too long to read is answered as `null`).
            answering: method
                .filter(|m| LIST_METHODS.contains(m) && (!messages || endpoint.route.bridge))
                .map(|_| a.ctx.request_id().cloned().unwrap_or(Value::Null)),
            stream: a.session.req_header().method == http::Method::GET,
            restore_hidden: false,
        };
        let flow = police(a, &endpoint.route, &mut state);
        let verdict = match &flow {
            Ok(Flow::Next) if !state.restore_hidden => Policed::Allowed,
            Ok(_) => Policed::Hidden,
            Err(_) => Policed::Refused,
        };
        decide(a.ctx, verdict, &state.grant);
        let flow = flow?;
        a.ctx.stages.policy = Some(Box::new(state));
        Ok(flow)
    }

    fn upstream_request(o: &mut Outbound<'_>) -> pingora::Result<()> {
        if o.ctx.stages.policy.is_some() {
            // List answers are filtered: they must come uncompressed.
            o.head.remove_header(&http::header::ACCEPT_ENCODING);
        }
        Ok(())
    }

    fn response(head: &mut ResponseHeader, ctx: &mut Ctx, edge: &Edge) -> pingora::Result<()> {
        filter_lists(head, ctx, edge)
    }
}

/// The policy's verdict, for the trace and the access log.
fn decide(ctx: &mut Ctx, verdict: Policed, grant: &Grant) {
    ctx.request.decided.policy = Some(PolicyVerdict {
        verdict,
        rule: grant.rule().to_string(),
    });
}

/// A request naming a hidden entry, or a subscription with hidden URIs.
fn police(a: &mut Admission<'_>, route: &Route, state: &mut State) -> Result<Flow, Rejection> {
    let id = a.ctx.request_id().cloned();
    let Some(message) = a.ctx.request.message.as_deref() else {
        return Ok(Flow::Next);
    };
    let method = message.method.as_deref();
    match (&message.target, method) {
        (Some(target), Some(method)) if !state.grant.allows(target.kind, &target.value) => {
            metrics::get()
                .access
                .policy_refusals
                .with_label_values(&[route.name.as_str(), state.grant.rule()])
                .inc();
            let spoken = route.pool.spoken.load();
            let answers = Answers {
                style: route.access.absent_as,
                learned: spoken.absent.as_deref(),
            };
            let hidden = hidden(a, &answers, method, target);
            match hidden.map_err(|e| Rejection::with_id(e, id))? {
                Hidden::Answer(answer) => Ok(Flow::Answer(answer)),
                Hidden::Disguised(body) => {
                    state.restore_hidden = true;
                    replace_body(a, body);
                    Ok(Flow::Next)
                }
            }
        }
        (_, Some("subscriptions/listen")) => {
            let body = a.ctx.request.body.as_ref().map(|b| b.bytes().clone());
            match body.map(|b| lists::filter_subscriptions(&b, &state.grant)) {
                Some(Ok(Some(body))) => replace_body(a, body),
                Some(Err(_)) => {
                    return Err(Rejection::with_id(
                        EdgeError::InvalidRequest {
                            detail: "a key appears more than once in the subscriptions".into(),
                        },
                        id,
                    ))
                }
                _ => {}
            }
            Ok(Flow::Next)
        }
        _ => Ok(Flow::Next),
    }
}

fn replace_body(a: &mut Admission<'_>, bytes: Vec<u8>) {
    if let Some(body) = a.ctx.request.body.as_mut() {
        body.replace(bytes);
    }
}

/// What becomes of a request naming a hidden entry.
enum Hidden {
    /// The edge answers for the server.
    Answer(Answer),
    /// It goes on with this body: the name renamed (see [`absent::disguise`]).
    Disguised(Vec<u8>),
}

/// Where the answer for a hidden entry comes from: the route's `absent_as` (an override),
/// else what the pool's servers were learned to answer, else the `typescript` catalogue.
struct Answers<'a> {
    style: Option<AbsentAs>,
    learned: Option<&'a AbsentAnswers>,
}

impl Answers<'_> {
    /// Status and JSON-RPC message for `method` naming `target`, in `modern`'s era, and how
    /// to frame it: the server's way when it was learned, else the catalogue's (JSON for a
    /// 2026-07-28 request, an SSE event for a legacy one, CRLF for `python`).
    fn answer(
        &self,
        modern: bool,
        method: &str,
        target: &Target,
        id: &serde_json::Value,
    ) -> (u16, String, Framing) {
        let era = self
            .learned
            .filter(|_| self.style.is_none())
            .map(|l| l.era(modern));
        let learned = era
            .filter(|_| KINDS.iter().any(|(k, m)| *k == target.kind && *m == method))
            .and_then(|answers| answers.get(target.kind));
        if let (Some(l), Some(answers)) = (learned, era) {
            return (l.status, l.render(id, &target.value), answers.framing);
        }
        let style = self.style.unwrap_or_default();
        let (status, json) = absent::absent_answer(style, modern, method, target, id);
        // The catalogue's words, framed as the server frames this era when that was learned.
        let framing = era.filter(|a| !a.is_empty()).map_or(
            Framing {
                sse: !modern,
                crlf: !modern && style == AbsentAs::Python,
            },
            |a| a.framing,
        );
        (status, json, framing)
    }
}

/// A 2026-07-28 answer in the legacy shape, exactly as the bridge makes one from a member's
/// answer (`era::ToLegacy`: a result loses `resultType` and is written anew; an error stays
/// as it is).
fn as_bridged(json: String) -> String {
    serde_json::from_str::<Value>(&json)
        .ok()
        .and_then(|m| crate::mcp::era::to_legacy(m, None, false))
        .map_or(json, |m| m.to_string())
}

/// A request naming a hidden entry: answered as the server answers an absent one, or sent
/// on disguised where the edge cannot give that answer exactly (see the module doc).
fn hidden(
    a: &Admission<'_>,
    answers: &Answers<'_>,
    method: &str,
    target: &Target,
) -> Result<Hidden, EdgeError> {
    let request = &a.ctx.request;
    let (req, bridged) = (a.session.req_header(), request.bridged);
    let messages = request
        .endpoint
        .as_ref()
        .is_some_and(|e| e.kind == EndpointKind::Messages);
    let modern = matches!(request.era, Some(Era::Modern(_)));
    let message: Option<&Verdict> = request.message.as_deref();
    let (id, has_id) = (a.ctx.request_id(), message.is_some_and(|m| m.has_id));
    let exact = match id {
        _ if bridged => true,
        Some(_) => modern || (media::accepts_event_stream(&req.headers) && !messages),
        None => false,
    };
    if !exact && (has_id || messages) {
        let body = request.body.as_ref().map(|b| b.bytes().as_ref());
        return match body.and_then(|b| absent::disguise(b, method)) {
            Some(body) => Ok(Hidden::Disguised(body)),
            None => Err(EdgeError::InvalidRequest {
                detail: "params do not name what the method needs".into(),
            }),
        };
    }
    let Some(id) = id else {
        // A notification: accepted, as a server accepts one, and dropped.
        return Ok(Hidden::Answer(Answer::empty(202)));
    };
    if bridged {
        // What a bridged member's answer becomes: 2026-07-28 JSON in the legacy shape, with
        // no session header (the bridge's own token is the client's session).
        let (_, json, _) = answers.answer(true, method, target, id);
        let json = as_bridged(json);
        return Ok(Hidden::Answer(Answer::json(200, json)));
    }
    let (status, json, framing) = answers.answer(modern, method, target, id);
    // A legacy answer echoes the session.
    let session = (!modern)
        .then(|| req.headers.get(crate::mcp::headers::SESSION_ID).cloned())
        .flatten();
    Ok(Hidden::Answer(framed(status, json, framing, session)))
}

/// The hidden entry's answer, framed as the member frames its answers: JSON, or one event on
/// one `data:` line (a line end in the message, only ever whitespace in JSON, goes).
fn framed(
    status: u16,
    json: String,
    framing: Framing,
    session: Option<http::HeaderValue>,
) -> Answer {
    if !framing.sse {
        return Answer {
            session,
            ..Answer::json(status, json)
        };
    }
    let eol = if framing.crlf { "\r\n" } else { "\n" };
    let json = if json.contains(['\r', '\n']) {
        json.replace(['\r', '\n'], "")
    } else {
        json
    };
    Answer {
        content_type: media::EVENT_STREAM,
        session,
        ..Answer::json(status, sse::message_event(&json, eol))
    }
}

/// On a route with a policy: the answer to a list request, and a legacy event stream, are
/// filtered on their way; a disguised name comes back in the answer.
fn filter_lists(head: &mut ResponseHeader, ctx: &mut Ctx, edge: &Edge) -> pingora::Result<()> {
    let Some(state) = ctx.stages.policy.as_deref() else {
        return Ok(());
    };
    let stream = state.stream && ctx.response.is_event_stream();
    if state.answering.is_none() && !stream && !state.restore_hidden {
        return Ok(());
    }
    let unfilterable = |detail: &str| {
        pingora::Error::because(
            pingora::ErrorType::HTTPStatus(502),
            "filtering a list answer",
            EdgeError::UpstreamError {
                detail: detail.into(),
            },
        )
    };
    if ctx.response.encoded {
        // Asked without Accept-Encoding, and compressed anyway: it cannot be filtered.
        return Err(unfilterable(
            "the server compressed an answer the route's policy must filter",
        ));
    }
    let (route, rule) = (ctx.route_name().to_string(), state.grant.rule().to_string());
    let filter = ListFilter {
        shown: state.grant.clone(),
        answering: state.answering.clone(),
        on_hidden: Some(Box::new(move |hidden| {
            metrics::get()
                .access
                .policy_hidden
                .with_label_values(&[route.as_str(), rule.as_str()])
                .inc_by(hidden as u64)
        })),
    };
    let answering = filter.answering.is_some();
    let filtered = rewrite::add(head, ctx, edge, Box::new(filter));
    if !filtered && answering && head.status == http::StatusCode::OK {
        // Neither JSON nor an event stream: not something the edge can filter.
        return Err(unfilterable(
            "the server answered a list request with a body the edge cannot filter",
        ));
    }
    debug_assert!(filtered || ctx.response.media == Media::Other);
    Ok(())
}
