//! Era bridging (`bridge_legacy = true`): legacy (2025) Streamable HTTP clients served by
//! 2026-07-28 members, which know no `initialize` and no sessions. The conversions are
//! [`crate::mcp::era`]'s; here is when they apply.
//!
//! - `initialize` goes to a member as a `server/discover` (with the client's own headers, so
//!   a member that wants a credential says so), and its `DiscoverResult` comes back as the
//!   `InitializeResult`. The session id the edge adds is a sealed token (kind `Bridge`)
//!   carrying what the client declared; any replica opens it; nothing is stored.
//! - Every later request becomes a stateless 2026-07-28 request (the envelope written into
//!   its params, the 2026-07-28 headers set) and goes to any member
//!   (`ctx.request.bridged`).
//! - `ping`, `logging/setLevel`, notifications, posted responses, `DELETE` are answered by the
//!   edge, once the rate limit and policy let them through; `GET` (the standalone stream)
//!   gets 405 from the method stage, which clients take as "no stream".
//! - Answers come back in the client's revision; a JSON-RPC error a member answers with 400
//!   or 404 reaches the client with 200, as legacy servers answer errors.
//!
//! - HTTP+SSE clients (`sse_bridge.rs` holds their streams): what the client declared is
//!   kept with its stream; its answer to a server's question (`input_required`, asked on the
//!   stream) is recorded, and the last one makes the POST the question's request again.
//!
//! What does not bridge: see [`crate::mcp::era`]; also `resources/subscribe` (answered
//! -32601), cancellation, batches.

use std::borrow::Cow;

use pingora::http::{RequestHeader, ResponseHeader};
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::error::{code, EdgeError, Rejection};
use crate::mcp::era::{self, Declared, ToLegacy};
use crate::mcp::headers::{self, NAME, SESSION_ID};
use crate::mcp::rules::Era;
use crate::mcp::{json, jsonrpc, MODERN_VERSION};
use crate::metrics::{self, TokenOp};
use crate::proxy::answer::Answer;
use crate::proxy::body::Body;
use crate::proxy::ctx::{Ctx, StreamReply};
use crate::proxy::edge::Edge;
use crate::proxy::rewrite;
use crate::proxy::stage::{Admission, Flow, Outbound, Phase, Site, Stage};
use crate::runtime::{EndpointKind, Route};
use crate::session::streams::{self, Answered, Asked};
use crate::session::{self, Kind, Sessions};

/// A request forwarded as a 2026-07-28 one.
#[derive(Debug)]
pub struct State {
    method: String,
    /// The `Mcp-Name` subject (`params.name` / `params.uri`).
    name: Option<String>,
    /// An `initialize` sent as `server/discover`: the revision to answer with and the
    /// session id to hand out.
    initialize: Option<Initialize>,
}

#[derive(Debug)]
struct Initialize {
    version: String,
    /// The session id to hand out (an HTTP+SSE client's is its stream's, handed out already).
    session: Option<String>,
}

/// Where a bridged client's session lives: in a token in `Mcp-Session-Id` (Streamable HTTP,
/// bound to the caller), or with the stream this replica holds for it (HTTP+SSE).
#[derive(Clone, Copy)]
enum Client {
    Session(Option<[u8; 16]>),
    Stream(u64),
}

pub struct Bridge;

impl Stage for Bridge {
    const NAME: &'static str = "bridge";

    /// A route that bridges legacy clients.
    fn serves(site: &Site<'_>, _phase: Phase) -> bool {
        site.endpoint.route.bridge
    }

    async fn request(a: &mut Admission<'_>) -> Result<Flow, Rejection> {
        let request = &mut a.ctx.request;
        let Some(endpoint) = &request.endpoint else {
            return Ok(Flow::Next);
        };
        let bridged = endpoint.route.bridge
            && matches!(
                endpoint.kind,
                EndpointKind::Streamable | EndpointKind::Messages
            )
            && request.era == Some(Era::Legacy);
        if !bridged {
            return Ok(Flow::Next);
        }
        let Some(body) = request.body.as_mut() else {
            // A `DELETE` of a bridged session: nothing is held, nothing to end.
            return Ok(Flow::AnswerOnceAdmitted(Answer::empty(200)));
        };
        let req = a.session.req_header();
        let client = match request.held_stream {
            Some(stream) => Client::Stream(stream),
            None => Client::Session(session::binding(req, request.principal.as_deref())),
        };
        let id = request.message.as_ref().and_then(|m| m.id.clone());
        let bridged = post(req, &a.ctx.snapshot, &endpoint.route, body, client);
        let streamed = request.held_stream.is_some();
        let (state, retry_of) = match bridged.map_err(|e| Rejection::with_id(e, id.clone()))? {
            Bridged::Answer(answer) => return Ok(Flow::AnswerOnceAdmitted(answer)),
            Bridged::Refused(id, answer) => {
                if streamed {
                    let reply = StreamReply {
                        answers: Some(id),
                        kept: None,
                    };
                    request.stream_reply = Some(Box::new(reply));
                }
                return Ok(Flow::AnswerOnceAdmitted(answer));
            }
            Bridged::Forward(state) => (state, None),
            Bridged::Retry(asked) => {
                let state = State {
                    method: asked.method,
                    name: asked.name,
                    initialize: None,
                };
                (Box::new(state), Some(asked.id))
            }
        };
        request.bridged = true;
        if let (Some(first), Some(verdict)) = (&retry_of, request.message.as_deref_mut()) {
            // What the later stages (the rate limit, the policy, the log) see: the request
            // retried, not the client's answer that carried it.
            retried(verdict, &state, first);
            a.ctx.labels.record(verdict);
        }
        if streamed {
            let id = id.as_ref().map(ToString::to_string);
            request.stream_reply = Some(Box::new(remember(&state, retry_of, id, body)));
        }
        a.ctx.stages.bridge = Some(state);
        Ok(Flow::Next)
    }

    /// The 2026-07-28 headers, no session, plain bytes (the answer is converted).
    fn upstream_request(o: &mut Outbound<'_>) -> pingora::Result<()> {
        let Some(forward) = &o.ctx.stages.bridge else {
            return Ok(());
        };
        let head: &mut RequestHeader = o.head;
        head.remove_header(SESSION_ID);
        head.remove_header(&http::header::ACCEPT_ENCODING);
        head.insert_header(headers::PROTOCOL_VERSION, MODERN_VERSION)?;
        head.insert_header(headers::METHOD, forward.method.as_str())?;
        match &forward.name {
            Some(name) => head.insert_header(NAME, headers::encode_value(name))?,
            None => {
                head.remove_header(NAME);
            }
        }
        Ok(())
    }

    /// Never a member's session id; the bridged session id on a successful `initialize`; a
    /// member's JSON-RPC error answered with 400 or 404 reaches the client with 200 (legacy
    /// clients read error bodies of successful responses, and take a 404 for a lost
    /// session); the body converted to the client's revision.
    fn response(head: &mut ResponseHeader, ctx: &mut Ctx, edge: &Edge) -> pingora::Result<()> {
        let Some(forward) = ctx.stages.bridge.as_deref() else {
            return Ok(());
        };
        head.remove_header(SESSION_ID);
        let json = ctx.response.media == crate::mcp::media::Media::Json;
        if json && matches!(head.status.as_u16(), 400 | 404) {
            head.set_status(200)?;
        }
        let initialize = match &forward.initialize {
            Some(init) if head.status.as_u16() == 200 => {
                if let Some(session) = &init.session {
                    head.insert_header(SESSION_ID, session.as_str())?;
                }
                Some(init.version.clone())
            }
            _ => None,
        };
        if !ctx.response.encoded {
            // An HTTP+SSE client can be asked for input (`sse_bridge.rs` asks it).
            let asks = ctx.request.held_stream.is_some();
            let convert = ToLegacy { initialize, asks };
            rewrite::add(head, ctx, edge, Box::new(convert));
        }
        Ok(())
    }
}

enum Bridged {
    Answer(Answer),
    Forward(Box<State>),
    /// The client's last answer to a server's questions: the request it answered goes again
    /// with every answer (the POST's body is that request now).
    Retry(Box<Asked>),
    /// The client refused a server's question: the request it was for (its id) is answered.
    Refused(String, Answer),
}

/// Methods whose answer may ask the client for input (`input_required`).
const ASKING: &[&str] = &["tools/call", "prompts/get", "resources/read"];

/// The parts of a legacy message the bridge reads, borrowed from the body.
#[derive(Deserialize)]
struct Message<'a> {
    #[serde(borrow)]
    id: Option<&'a RawValue>,
    #[serde(borrow)]
    method: Option<Cow<'a, str>>,
    #[serde(borrow)]
    params: Option<&'a RawValue>,
    #[serde(borrow)]
    result: Option<&'a RawValue>,
    #[serde(borrow)]
    error: Option<&'a RawValue>,
}

fn invalid(detail: &str) -> EdgeError {
    EdgeError::InvalidRequest {
        detail: detail.into(),
    }
}

/// A legacy POST on a bridged route.
fn post(
    req: &RequestHeader,
    snapshot: &crate::runtime::Runtime,
    route: &Route,
    body: &mut Body,
    client: Client,
) -> Result<Bridged, EdgeError> {
    let sessions = snapshot.ring()?;
    let bytes = body.bytes().clone();
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[') {
        return Err(invalid("batches are not bridged to 2026-07-28 servers"));
    }
    let message: Message = serde_json::from_slice(&bytes)
        .map_err(|_| invalid("a key appears more than once in the message"))?;
    let method = message.method.as_deref();
    if let (Some("initialize"), Some(id)) = (method, message.id) {
        return initialize(sessions, route, id, message.params, body, client);
    }
    if let (None, Some(id), Client::Stream(stream)) = (method, message.id, client) {
        return answered(stream, id, &message, body);
    }
    let declared = match client {
        Client::Session(credential) => open(sessions, route, req, credential)?,
        Client::Stream(stream) => streams::get()
            .declared(stream)
            .ok_or_else(|| invalid("the session is not initialised (initialize first)"))?,
    };
    let (Some(method), Some(id)) = (method, message.id) else {
        // A notification, or a response to a request the edge never sent.
        return Ok(Bridged::Answer(Answer::empty(202)));
    };
    if !method.bytes().all(|b| (0x21..=0x7e).contains(&b)) {
        return Err(invalid("method must be visible ASCII"));
    }
    let answer = |body: String| Ok(Bridged::Answer(Answer::json(200, body)));
    match method {
        "ping" | "logging/setLevel" => answer(jsonrpc::result(id.get(), "{}")),
        "resources/subscribe" | "resources/unsubscribe" => answer(jsonrpc::error(
            id.get(),
            code::METHOD_NOT_FOUND,
            &format!("Method not found: {method} is not bridged to 2026-07-28 servers"),
            None,
        )),
        _ => {
            let name = match (method, message.params) {
                ("tools/call" | "prompts/get", Some(p)) => json::string_member(p.get(), "name"),
                ("resources/read", Some(p)) => json::string_member(p.get(), "uri"),
                _ => None,
            }
            .map(Cow::into_owned);
            let method = method.to_owned();
            body.replace(era::with_envelope(&bytes, message.params, &declared)?);
            Ok(Bridged::Forward(Box::new(State {
                method,
                name,
                initialize: None,
            })))
        }
    }
}

/// The verdict of a POST carrying the client's last answer, as the request it retries: its
/// method, id and the entry it names (`id`: JSON text).
fn retried(verdict: &mut crate::mcp::rules::Verdict, state: &State, id: &str) {
    use crate::mcp::target::{Kind as Entry, Target};
    let kind = match state.method.as_str() {
        "tools/call" => Some(Entry::Tool),
        "prompts/get" => Some(Entry::Prompt),
        "resources/read" => Some(Entry::Resource),
        _ => None,
    };
    verdict.method = Some(state.method.clone());
    verdict.id = serde_json::from_str(id).ok();
    verdict.has_id = true;
    verdict.name = state.name.clone();
    verdict.target = kind
        .zip(state.name.clone())
        .map(|(kind, value)| Target { kind, value });
}

/// An HTTP+SSE client's request as it goes to the member, kept while the member may ask the
/// client for input; a retry's answer goes with the first request's id (`retry_of`).
fn remember(
    state: &State,
    retry_of: Option<String>,
    id: Option<String>,
    body: &Body,
) -> StreamReply {
    let answers = retry_of.clone();
    let kept = retry_of
        .or(id)
        .filter(|_| ASKING.contains(&state.method.as_str()));
    let kept = kept.map(|id| {
        let (method, name) = (state.method.clone(), state.name.clone());
        Asked::new(id, method, name, body.bytes().clone())
    });
    StreamReply { answers, kept }
}

/// An HTTP+SSE client's answer to a question the edge asked for a server (`input_required`):
/// recorded; the last one makes the POST the request's retry. A refusal answers the request
/// with an error; an answer to nothing the edge asked is accepted and dropped.
fn answered(
    stream: u64,
    id: &RawValue,
    message: &Message<'_>,
    body: &mut Body,
) -> Result<Bridged, EdgeError> {
    let accepted = Ok(Bridged::Answer(Answer::empty(202)));
    let Ok(question) = serde_json::from_str::<String>(id.get()) else {
        return accepted;
    };
    let parse = |raw: &RawValue| serde_json::from_str(raw.get()).unwrap_or_default();
    let answer = match (message.result, message.error) {
        (Some(result), _) => Ok(parse(result)),
        (None, Some(error)) => Err(parse(error)),
        (None, None) => return accepted,
    };
    match streams::get().answer(stream, &question, answer) {
        Answered::Unknown | Answered::Waiting => accepted,
        Answered::Complete(asked) => {
            let answers = asked.answers.clone();
            match era::with_input_responses(&asked.body, answers, asked.state.clone()) {
                Ok(retry) => {
                    body.replace(retry);
                    Ok(Bridged::Retry(asked))
                }
                // The request waits no more: its client gets the error.
                Err(e) => {
                    let answer = Answer::json(200, e.body_with_id_text(&asked.id));
                    Ok(Bridged::Refused(asked.id, answer))
                }
            }
        }
        Answered::Refused(asked, error) => {
            let said = error.get("message").and_then(|m| m.as_str()).unwrap_or("");
            let message = format!("the client refused what the server asked ({said})");
            let error = jsonrpc::error(&asked.id, code::INTERNAL, &message, None);
            Ok(Bridged::Refused(asked.id, Answer::json(200, error)))
        }
    }
}

/// An `initialize`: what the client declares goes into the session id the bridge hands out;
/// the member gets a `server/discover`.
fn initialize(
    sessions: &Sessions,
    route: &Route,
    id: &RawValue,
    params: Option<&RawValue>,
    body: &mut Body,
    client: Client,
) -> Result<Bridged, EdgeError> {
    let legacy: Vec<&str> = route
        .versions
        .accepted
        .iter()
        .map(String::as_str)
        .filter(|v| crate::mcp::is_legacy_version(v))
        .collect();
    let declared = era::declare(params, &legacy, matches!(client, Client::Stream(_)))?;
    let session = match client {
        Client::Session(credential) => Some(seal(sessions, route, &declared, credential)?),
        Client::Stream(stream) => {
            if !streams::get().declare(stream, declared.clone()) {
                return Err(EdgeError::SessionUnknown {
                    reason: "its event stream has closed",
                });
            }
            None
        }
    };
    body.replace(era::discover_body(id, &declared)?);
    Ok(Bridged::Forward(Box::new(State {
        method: "server/discover".into(),
        name: None,
        initialize: Some(Initialize {
            version: declared.v,
            session,
        }),
    })))
}

/// What the client declared, sealed into the session id the bridge hands out.
fn seal(
    sessions: &Sessions,
    route: &Route,
    declared: &Declared,
    credential: Option<[u8; 16]>,
) -> Result<String, EdgeError> {
    let carried = serde_json::to_string(declared).map_err(|e| EdgeError::Internal {
        detail: e.to_string(),
    })?;
    let pool = &route.pool.name;
    let t = session::seal_session(
        sessions,
        Kind::Bridge,
        session::Held {
            pool,
            member: "",
            upstream_id: &carried,
            owner: None,
        },
        credential,
    )?;
    if t.len() > crate::session::token::MAX_TOKEN_CHARS {
        return Err(EdgeError::InvalidRequest {
            detail: "the client's capabilities and clientInfo are too large to bridge".into(),
        });
    }
    Ok(t)
}

/// The bridged session a request names in `Mcp-Session-Id`.
fn open(
    sessions: &Sessions,
    route: &Route,
    req: &RequestHeader,
    credential: Option<[u8; 16]>,
) -> Result<Declared, EdgeError> {
    let raw = headers::single(&req.headers, SESSION_ID)
        .map_err(|_| EdgeError::SessionUnknown {
            reason: "Mcp-Session-Id appears more than once",
        })?
        .ok_or_else(|| EdgeError::InvalidRequest {
            detail: "no valid session ID provided (Mcp-Session-Id)".into(),
        })?;
    let text = String::from_utf8_lossy(raw);
    let pool = &route.pool.name;
    let claims = session::open_session(sessions, pool, &text, credential, Kind::Bridge)?;
    metrics::get().token(TokenOp::Opened);
    serde_json::from_str(&claims.upstream_id).map_err(|_| EdgeError::SessionUnknown {
        reason: "malformed",
    })
}
