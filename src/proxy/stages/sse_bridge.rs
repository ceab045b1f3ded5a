//! HTTP+SSE clients (2024-11-05) bridged to 2026-07-28 members (`bridge_legacy` on a route
//! with `sse_path` and `messages_path`). Such a client opens an event stream with a `GET`,
//! learns from its `endpoint` event where to POST, and reads every answer on the stream;
//! the members have no stream to give it, so the edge holds one itself.
//!
//! - `GET` on the route's `sse_path`: the edge answers with its own event stream (once the
//!   later checks let it through: a stream slot, the rate limit). Its `endpoint` event names
//!   the messages path with a session token (kind `Stream`) naming the stream and, with
//!   `[fleet] handoff_listen`, this replica; the stream lives in
//!   [`crate::session::streams`] until the client goes, the edge shuts down, or the client
//!   stops reading.
//! - `POST` on `messages_path`: the token opens to the stream (another replica's: the
//!   `handoff` stage sent the POST there before this stage runs; one that is not held here
//!   any more: 404). The bridge stage turns the message into a 2026-07-28 request as for a
//!   Streamable HTTP client, what the client declared at `initialize` kept with the stream.
//! - The answer, the member's (each message of a JSON answer or an event stream, progress
//!   included, converted by the bridge) or the edge's own (an error, a bridged `ping`, a
//!   hidden entry), becomes events on the stream; the POST itself gets `202 Accepted` with no
//!   body, as an HTTP+SSE server answers. A request that got no answer at all (the member's
//!   answer broke off) gets a JSON-RPC error event, so no client waits forever.

mod hold;

use bytes::{Bytes, BytesMut};
use pingora::http::ResponseHeader;
use pingora::proxy::Session;

use crate::error::{EdgeError, Rejection};
use crate::mcp::jsonrpc::code;
use crate::mcp::media::Media;
use crate::mcp::{era, jsonrpc, sse};
use crate::metrics::{self, BridgedStream, TokenOp};
use crate::net::budget::Holder;
use crate::proxy::ctx::Ctx;
use crate::proxy::edge::Edge;
use crate::proxy::stage::{Admission, Flow, Outbound, Phase, Site, Stage};
use crate::runtime::{EndpointKind, Route};
use crate::session::streams::{self, Asked};
use crate::session::{self, Kind};

use hold::HeldStream;

/// The largest message of a member's answer turned into one event (a stream queues at most
/// [`streams::MAX_QUEUED_BYTES`]).
const MAX_MESSAGE_BYTES: usize = 4 * 1024 * 1024;

/// A POST whose answer goes to its stream.
pub struct State {
    stream: u64,
    /// The member's answer head arrived: its body becomes events.
    diverting: bool,
    media: Media,
    status: u16,
    /// What of the member's answer is not a whole message yet, and where its next event
    /// ends.
    held: BytesMut,
    ends: sse::EventEnds,
    /// An answer (or an error) reached the stream, or the stream is gone.
    answered: bool,
    /// The client speaks HTTP/2 (no `Transfer-Encoding`).
    h2: bool,
    /// The POST got its `202` before the request went to the member ([`accept`]).
    early: bool,
    /// The id (JSON text) of the request the answer is for (a retry's: the first request's).
    id: Option<String>,
    /// The request as it went to the member, kept while the member may ask the client for
    /// input (`tools/call`, `prompts/get`, `resources/read`).
    sent: Option<Asked>,
    /// What the bridge decided for the answer (`ctx.request.stream_reply`) is taken.
    adopted: bool,
}

/// This stage's state, with what the bridge decided for the answer taken into it once (the
/// bridge runs after this stage's request phase, and before every later one).
fn state(ctx: &mut Ctx) -> Option<&mut State> {
    let state = ctx.stages.sse_bridge.as_deref_mut()?;
    if !state.adopted {
        state.adopted = true;
        if let Some(reply) = ctx.request.stream_reply.as_deref() {
            if let Some(first) = &reply.answers {
                state.id = Some(first.clone());
            }
            state.sent = reply.kept.clone();
        }
    }
    Some(state)
}

pub struct SseBridge;

impl Stage for SseBridge {
    const NAME: &'static str = "sse_bridge";

    /// A route that bridges legacy clients.
    fn serves(site: &Site<'_>, _phase: Phase) -> bool {
        site.endpoint.route.bridge
    }

    async fn admitted(a: &mut Admission<'_>) -> Result<Flow, Rejection> {
        Ok(accept(a))
    }

    async fn request(a: &mut Admission<'_>) -> Result<Flow, Rejection> {
        let Some(endpoint) = &a.ctx.request.endpoint else {
            return Ok(Flow::Next);
        };
        if !endpoint.route.bridge {
            return Ok(Flow::Next);
        }
        let route = endpoint.route.clone();
        let reject = |e| Rejection::with_id(e, a.ctx.request_id().cloned());
        match endpoint.kind {
            EndpointKind::SseStream => {
                let held = open(a, &route).map_err(reject)?;
                Ok(Flow::Hold(Box::new(held)))
            }
            EndpointKind::Messages if a.ctx.request.body.is_some() => {
                let message = a.ctx.request.message.as_deref();
                if message.is_some_and(|m| m.has_id && m.id.is_none()) {
                    // Its answer could not name it on the stream.
                    let long = EdgeError::InvalidRequest {
                        detail: "the request's id is too long to bridge (1 KiB at most)".into(),
                    };
                    return Err(reject(long));
                }
                let stream = stream_of(a, &route).map_err(reject)?;
                a.ctx.request.held_stream = Some(stream);
                a.ctx.stages.sse_bridge = Some(Box::new(State {
                    stream,
                    diverting: false,
                    media: Media::Other,
                    status: 0,
                    held: BytesMut::new(),
                    ends: sse::EventEnds::default(),
                    answered: false,
                    h2: a.session.is_http2(),
                    early: false,
                    // A request's (a posted response or notification has no answer).
                    id: a
                        .ctx
                        .request
                        .message
                        .as_ref()
                        .filter(|m| m.method.is_some())
                        .and_then(|m| m.id.as_ref())
                        .map(ToString::to_string),
                    sent: None,
                    adopted: false,
                }));
                Ok(Flow::Next)
            }
            _ => Ok(Flow::Next),
        }
    }

    /// The member gets a 2026-07-28 request on its own endpoint (the route's path), without
    /// the client's session parameter.
    fn upstream_request(o: &mut Outbound<'_>) -> pingora::Result<()> {
        if o.ctx.stages.sse_bridge.is_none() {
            return Ok(());
        }
        let route = o.ctx.endpoint()?.route.clone();
        let path = route
            .name
            .strip_prefix(route.prefix.as_str())
            .unwrap_or(&route.name);
        super::route::set_target(o.head, path)
    }

    /// The POST is accepted (its answer goes to the stream).
    fn response(head: &mut ResponseHeader, ctx: &mut Ctx, _edge: &Edge) -> pingora::Result<()> {
        let (media, encoded) = (ctx.response.media, ctx.response.encoded);
        let Some(state) = state(ctx) else {
            return Ok(());
        };
        state.diverting = true;
        state.status = head.status.as_u16();
        state.media = if encoded { Media::Other } else { media };
        if state.early {
            // The client has its answer: this head goes nowhere.
            return Ok(());
        }
        accepted(head)?;
        // The POST's answer ends when the member's does (an exchange whose answer is done
        // stops reading the member's): no length.
        head.remove_header(&http::header::CONTENT_LENGTH);
        if !state.h2 {
            head.insert_header(http::header::TRANSFER_ENCODING, "chunked")?;
        }
        Ok(())
    }

    /// The member's answer, message by message (converted by the bridge's rewrite), onto
    /// the stream; nothing of it to the POST.
    fn response_body(body: &mut Option<Bytes>, end: bool, ctx: &mut Ctx) -> pingora::Result<()> {
        let Some(state) = state(ctx) else {
            return Ok(());
        };
        if !state.diverting {
            return Ok(());
        }
        if let Some(chunk) = body.as_mut() {
            if state.media != Media::Other {
                state.held.extend_from_slice(chunk);
            }
            *chunk = Bytes::new();
        }
        // The member's answer is this request's, though only its last message answers it.
        state.pass_on(end);
        Ok(())
    }

    /// An answer of the edge's own (a bridged `ping`, an error, a hidden entry) goes to the
    /// stream too; a notification's `202` stays as it is.
    fn answer(head: &mut ResponseHeader, body: &mut Bytes, ctx: &mut Ctx) -> pingora::Result<()> {
        let Some(state) = state(ctx) else {
            return Ok(());
        };
        if let (Some(id), false) = (state.id.clone(), body.is_empty()) {
            let message = answering(one_line(body), Some(&id), true);
            state.send(&message, true);
        }
        *body = Bytes::new();
        accepted(head)
    }

    /// A request that got no answer on its stream gets an error there.
    fn logging(_session: &Session, ctx: &mut Ctx) {
        let error = ctx.error.as_ref().map(|e| e.kind().as_str());
        let Some(state) = state(ctx) else {
            return;
        };
        if let (Some(id), false) = (state.id.clone(), state.answered) {
            let why = match error {
                Some(kind) => {
                    format!("the request failed at the edge ({kind}) before an answer came")
                }
                None => "the server's answer ended before a message came".to_string(),
            };
            state.send_error(&id, &why);
        }
    }
}

impl State {
    /// Whole messages of what is held go to the stream; at the end, what remains.
    fn pass_on(&mut self, end: bool) {
        if self.media == Media::EventStream {
            while let Some(n) = self.ends.next(&self.held) {
                let event = self.held.split_to(n);
                let text = String::from_utf8_lossy(&event);
                if let Some(data) = sse::data(&sse::lines(&text)) {
                    if !data.trim().is_empty() {
                        let message =
                            answering(one_line(data.as_bytes()), self.id.as_deref(), false);
                        self.deliver(message);
                    }
                }
            }
        }
        if self.held.len() > MAX_MESSAGE_BYTES {
            self.held = BytesMut::new();
            self.ends = sse::EventEnds::default();
            if let (Some(id), false) = (self.id.clone(), self.answered) {
                self.send_error(
                    &id,
                    "the server's answer is too large to bridge to an HTTP+SSE stream",
                );
            }
            self.media = Media::Other;
        }
        if !end {
            return;
        }
        let rest = std::mem::take(&mut self.held);
        if self.media == Media::Json && rest.iter().any(|b| !b.is_ascii_whitespace()) {
            let message = answering(one_line(&rest), self.id.as_deref(), false);
            self.deliver(message);
        }
        if let (Some(id), false) = (self.id.clone(), self.answered) {
            let why = format!(
                "the server answered HTTP {} without a JSON-RPC message",
                self.status
            );
            self.send_error(&id, &why);
        }
    }

    /// One message of the member's answer to the stream; a request for the client's input
    /// (`input_required`) as the questions it asks (one it cannot be asked: as the error a
    /// client that cannot be asked gets).
    fn deliver(&mut self, message: String) {
        if message.contains("input_required") {
            if let Ok(value) = serde_json::from_str::<serde_json::Value>(&message) {
                if let Some(questions) = era::input_required(&value) {
                    return self.ask(value, questions);
                }
                if let Some(error) = era::to_legacy(value, None, false) {
                    return self.send(&error.to_string(), true);
                }
            }
        }
        let answers = is_response(&message);
        self.send(&message, answers);
    }

    /// Ask the client the server's questions on its stream; the request waits for the
    /// answers. A request that cannot wait gets the error a client that cannot be asked gets.
    fn ask(&mut self, answer: serde_json::Value, questions: era::InputRequired) {
        let asked = self.sent.take().and_then(|sent| {
            streams::get().ask(self.stream, sent, questions.requests, questions.state)
        });
        let Some(requests) = asked else {
            let error = era::to_legacy(answer.clone(), None, false).unwrap_or(answer);
            return self.send(&error.to_string(), true);
        };
        for request in requests {
            self.send(&request.to_string(), true);
        }
    }

    /// One message as an event on the stream; `answers`: it answers the request (a
    /// response, or the questions the request now waits on), so no error follows.
    fn send(&mut self, message: &str, answers: bool) {
        let event = Bytes::from(sse::message_event(message, "\n"));
        match streams::get().send(self.stream, event) {
            Ok(()) => self.answered |= answers,
            Err(lost) => {
                if lost == streams::Lost::Unread {
                    metrics::get().bridged_stream(BridgedStream::Lost);
                }
                // Nothing more can reach the client.
                self.answered = true;
            }
        }
    }

    fn send_error(&mut self, id: &str, message: &str) {
        let error = jsonrpc::error(id, code::INTERNAL, message, None);
        self.send(&error, true);
    }
}

/// A JSON-RPC response (no `method`), not a notification or a request.
fn is_response(message: &str) -> bool {
    #[derive(serde::Deserialize)]
    struct Head<'a> {
        #[serde(borrow)]
        method: Option<&'a serde_json::value::RawValue>,
    }
    serde_json::from_str::<Head>(message).is_ok_and(|h| h.method.is_none())
}

/// A JSON answer as the answer to the request: an error the member gave without an id
/// (`null`: it could not read the request) answers this request, whose client would
/// otherwise wait for its answer on the stream forever; so does an error of the edge's own
/// (`any`) for a POST that carried the client's answer to a question (its retry failed).
fn answering(message: String, id: Option<&str>, any: bool) -> String {
    let Some(id) = id else {
        return message;
    };
    let Ok(mut value) = serde_json::from_str::<serde_json::Value>(&message) else {
        return message;
    };
    let Some(object) = value.as_object_mut() else {
        return message;
    };
    let null = object.get("id").is_none_or(|v| v.is_null());
    if !object.contains_key("error") || !(null || any) {
        return message;
    }
    match serde_json::from_str(id) {
        Ok(id) => {
            object.insert("id".into(), id);
            value.to_string()
        }
        Err(_) => message,
    }
}

/// A bridged HTTP+SSE POST about to go to a member gets its `202 Accepted` now, as an
/// HTTP+SSE server answers (over HTTP/1.1, where the hook writes it: [`Flow::Accepted`]), so
/// the client's next POST does not wait behind this one; the client closing it does not
/// cancel the call. The connection is not kept alive after a bridged POST.
fn accept(a: &mut Admission<'_>) -> Flow {
    let Some(state) = a.ctx.stages.sse_bridge.as_deref_mut() else {
        return Flow::Next;
    };
    a.session.downstream_session.set_keepalive(None);
    if state.h2 {
        return Flow::Next;
    }
    state.early = true;
    Flow::Accepted
}

/// `202 Accepted`, no body: the answer is on the stream.
fn accepted(head: &mut ResponseHeader) -> pingora::Result<()> {
    head.set_status(202)?;
    for name in [
        http::header::CONTENT_TYPE,
        http::header::CONTENT_ENCODING,
        http::header::TRANSFER_ENCODING,
        http::header::ETAG,
    ] {
        head.remove_header(&name);
    }
    head.insert_header(http::header::CONTENT_LENGTH, "0")
}

/// A JSON message on one `data:` line: its line ends (only ever whitespace between tokens
/// in JSON, inside strings they are escaped) go.
fn one_line(message: &[u8]) -> String {
    let text = String::from_utf8_lossy(message);
    match text.contains(['\r', '\n']) {
        true => text.replace(['\r', '\n'], ""),
        false => text.into_owned(),
    }
}

/// A new stream for the client, and the token naming it.
fn open(a: &Admission<'_>, route: &Route) -> Result<HeldStream, EdgeError> {
    let sessions = a.ctx.snapshot.ring()?;
    let messages = route.messages_path.as_deref().ok_or(EdgeError::Internal {
        detail: "a bridged HTTP+SSE route needs messages_path".into(),
    })?;
    // What the stream queues is held against the memory budget (its slot's share is not).
    let room = a.edge.load.budget.force(Holder::Stream, 0);
    let opened = streams::get()
        .open(Box::new(room))
        .ok_or(EdgeError::Internal {
            detail: "no stream id".into(),
        })?;
    let credential = session::binding(a.session.req_header(), a.ctx.request.principal.as_deref());
    let owner = a.ctx.snapshot.fleet.as_deref().and_then(|f| f.this());
    let id = format!("{:016x}", opened.id);
    let held = session::Held {
        pool: &route.pool.name,
        member: "",
        upstream_id: &id,
        owner,
    };
    let token = session::seal_session(sessions, Kind::Stream, held, credential)?;
    metrics::get().token(TokenOp::Sealed);
    let param = route
        .session_params
        .first()
        .map_or("sessionId", String::as_str);
    let max_age = std::time::Duration::from_secs(sessions.max_age_secs);
    Ok(HeldStream::new(
        opened,
        format!("{messages}?{param}={token}"),
        max_age,
    ))
}

/// The stream a POST's token names, held here.
fn stream_of(a: &Admission<'_>, route: &Route) -> Result<u64, EdgeError> {
    let sessions = a.ctx.snapshot.ring()?;
    let endpoint = a.ctx.request.endpoint.as_ref().ok_or(EdgeError::Internal {
        detail: "no endpoint".into(),
    })?;
    let req = a.session.req_header();
    let token = super::legacy::token_of(req, endpoint)?.ok_or(EdgeError::SessionMissing)?;
    let credential = session::binding(req, a.ctx.request.principal.as_deref());
    let claims =
        session::open_session(sessions, &route.pool.name, token, credential, Kind::Stream)?;
    let id =
        u64::from_str_radix(&claims.upstream_id, 16).map_err(|_| EdgeError::SessionUnknown {
            reason: "malformed",
        })?;
    if !streams::get().holds(id) {
        metrics::get().token_failure(metrics::TokenFailure::MemberGone);
        return Err(EdgeError::SessionUnknown {
            reason: "its event stream has closed",
        });
    }
    metrics::get().token(TokenOp::Opened);
    Ok(id)
}
