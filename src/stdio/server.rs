//! The Streamable HTTP server a stdio pool shows the proxy (on `127.0.0.1`, an ephemeral
//! port): each request becomes a message to one of the pool's processes, its answer (and
//! its progress, as an event stream) comes back.
//!
//! - Legacy (2025) clients: `initialize` opens a session (a process chosen by isolation; the
//!   answer is the process's own `InitializeResult`), then requests, notifications,
//!   responses, the standalone `GET` stream and `DELETE`. A session belongs to the caller
//!   that opened it. Notifications and responses from a client reach only a process that
//!   serves that client alone (a shared process hears only its cancellations).
//! - 2026-07-28 requests: no session; `server/discover` is answered from the process's
//!   `initialize` result; the methods of the revision are forwarded (others get 404
//!   -32601, as from a 2026-07-28 server), their results marked `resultType: "complete"`
//!   (and cache hints) where the server left them out; notifications are accepted and
//!   dropped (a 2026-07-28 client cancels by closing its stream).
//! - A request whose client goes away (its response closed) is cancelled at the process
//!   (`notifications/cancelled`).

use std::convert::Infallible;
use std::sync::{Arc, Weak};
use std::time::Duration;

use http::{HeaderValue, Request, Response, StatusCode};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use tokio::sync::watch;

use super::answers::*;
use super::exchange::{call, listen};
use super::group::{Group, Session, Target, Unavailable};
use super::process::{Proc, MAX_LINE};
use super::{Isolation, CALLER_HEADER, SECRET_HEADER};
use crate::error::code;
use crate::mcp::era::{discover_answer, strip_envelope, CACHEABLE};
use crate::mcp::message::{with_trace_context, Message, TraceHeaders};
use crate::mcp::{jsonrpc, MODERN_VERSION};

pub async fn serve(
    listener: tokio::net::TcpListener,
    group: Weak<Group>,
    mut stopped: watch::Receiver<bool>,
) {
    loop {
        let tcp = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((tcp, _)) => tcp,
                Err(e) => {
                    log::warn!("stdio listener: accept: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stopped_now(&mut stopped) => return,
        };
        let _ = tcp.set_nodelay(true);
        let group = group.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let group = group.clone();
                async move { Ok::<_, Infallible>(handle(group, req).await) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(Duration::from_secs(10))
                .keep_alive(true)
                .serve_connection(hyper_util::rt::TokioIo::new(tcp), service)
                .await;
        });
    }
}

async fn stopped_now(stopped: &mut watch::Receiver<bool>) {
    let _ = stopped.wait_for(|s| *s).await;
}

/// What the proxy told the member about the request.
struct Asked<'a> {
    caller: &'a str,
    session: Option<&'a str>,
    event_stream: bool,
    modern: bool,
    /// The trace context the edge sent (its CLIENT span), for the message's `_meta`.
    trace: Option<TraceHeaders>,
}

async fn handle(group: Weak<Group>, req: Request<Incoming>) -> Response<Body> {
    let Some(group) = group.upgrade() else {
        return plain(StatusCode::SERVICE_UNAVAILABLE, "the pool is gone");
    };
    let headers = req.headers();
    let secret = headers.get(SECRET_HEADER).map(|v| v.as_bytes());
    if !secret.is_some_and(|s| same(s, group.secret.as_bytes())) {
        return plain(StatusCode::FORBIDDEN, "only mcp-edge itself may call this");
    }
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let caller = text(CALLER_HEADER).unwrap_or("anonymous").to_string();
    let session = text(crate::mcp::headers::SESSION_ID).map(str::to_string);
    let event_stream = headers
        .get_all(http::header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("text/event-stream"));
    let modern = text(crate::mcp::headers::PROTOCOL_VERSION) == Some(MODERN_VERSION);
    // The edge's own span only (never a client's header passed through untraced).
    let trace = text(super::TRACED_HEADER)
        .and(text("traceparent"))
        .and_then(|p| TraceHeaders::new(p, text("tracestate")));
    let asked = Asked {
        caller: &caller,
        session: session.as_deref(),
        event_stream,
        modern,
        trace,
    };
    match *req.method() {
        http::Method::POST => {
            let body = match Limited::new(req.into_body(), MAX_LINE).collect().await {
                Ok(b) => b.to_bytes(),
                Err(_) => return plain(StatusCode::PAYLOAD_TOO_LARGE, "message too large"),
            };
            post(&group, &asked, &body).await
        }
        http::Method::GET if !modern => listen(&group, asked.caller, asked.session).await,
        http::Method::DELETE if !modern => match asked.session.and_then(|s| group.session(s)) {
            Some(s) if s.owned_by(asked.caller) => {
                group.end_session(&s.id).await;
                plain(StatusCode::OK, "")
            }
            _ => session_gone(None),
        },
        _ => {
            let mut r = rpc_error(
                StatusCode::METHOD_NOT_ALLOWED,
                None,
                code::SERVER_ERROR,
                "Method not allowed.",
            );
            r.headers_mut()
                .insert(http::header::ALLOW, HeaderValue::from_static("POST"));
            r
        }
    }
}

async fn post(group: &Arc<Group>, asked: &Asked<'_>, body: &[u8]) -> Response<Body> {
    let Ok(text) = std::str::from_utf8(body) else {
        return unreadable(false);
    };
    // A pipe has no headers: the trace context goes into the message.
    let traced = asked
        .trace
        .as_ref()
        .and_then(|t| with_trace_context(text, t));
    let text = traced.as_deref().unwrap_or(text);
    let Some(msg) = Message::parse(text) else {
        return unreadable(text.trim_start().starts_with('['));
    };
    if asked.modern {
        return modern(group, asked, text, &msg).await;
    }
    let method = msg.method.as_deref().unwrap_or_default();
    if method == "initialize" && msg.is_request() {
        return initialize(group, asked, &msg).await;
    }
    let Some(session) = asked.session.and_then(|s| group.session(s)) else {
        if asked.session.is_some() {
            return session_gone(msg.id);
        }
        return session_required(msg.id);
    };
    if !session.owned_by(asked.caller) {
        return session_gone(msg.id);
    }
    let proc = match group.session_process(&session).await {
        Ok(Some(p)) => p,
        Ok(None) => return session_gone(msg.id),
        Err(u) => return unavailable(u.detail(group), msg.id),
    };
    if msg.is_notification() || msg.is_response() {
        to_process(&proc, &msg, text, &session.id);
        return plain(StatusCode::ACCEPTED, "");
    }
    if !msg.is_request() {
        return invalid_request(msg.id);
    }
    let stream = asked.event_stream && (msg.progress_token().is_some() || proc.owner().is_some());
    call(proc, text, Some(session), msg.id, stream, None).await
}

/// Equal, in time independent of where they differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// A legacy `initialize`: a process by isolation, a new session, the process's answer.
async fn initialize(group: &Arc<Group>, asked: &Asked<'_>, msg: &Message<'_>) -> Response<Body> {
    let Some(id) = msg.id else {
        return invalid_request(None);
    };
    let Some(sid) = new_session_id() else {
        let why = Unavailable::NoProcess("no randomness".into());
        return unavailable(why.detail(group), Some(id));
    };
    let proc = match group.spec.isolation {
        Isolation::PerSession => {
            // The session is registered with its process.
            let params = msg.params.map_or("{}", |p| p.get());
            match group.for_session(sid.clone(), asked.caller, params).await {
                Ok(p) => p,
                Err(Unavailable::Refused(answer)) => return refused(&answer, id),
                Err(u) => return unavailable(u.detail(group), Some(id)),
            }
        }
        isolation => {
            let (target, proc) = match isolation {
                Isolation::PerPrincipal => match group.for_caller(asked.caller).await {
                    Ok(p) => (Target::Caller(asked.caller.to_string()), p),
                    Err(u) => return unavailable(u.detail(group), Some(id)),
                },
                _ => match group.any_slot().await {
                    Ok((slot, p)) => (Target::Slot(slot), p),
                    Err(u) => return unavailable(u.detail(group), Some(id)),
                },
            };
            let session = Session::new(sid.clone(), target, asked.caller);
            if let Err(u) = group.add_session(session).await {
                return unavailable(u.detail(group), Some(id));
            }
            proc
        }
    };
    let Some(init) = proc.init.get() else {
        return unavailable(
            Unavailable::NoProcess(String::new()).detail(group),
            Some(id),
        );
    };
    // The server's own answer (in the revision it speaks: 2025-11-25 to the edge's
    // `initialize`, or what it chose for the client's own, `per_session`).
    let body = jsonrpc::result(id.get(), &init.result);
    let mut r = json_response(StatusCode::OK, body);
    if let Ok(v) = HeaderValue::from_str(&sid) {
        r.headers_mut().insert(crate::mcp::headers::SESSION_ID, v);
    }
    r
}

/// A 2026-07-28 request: no session; the caller's process or any shared one.
async fn modern(
    group: &Arc<Group>,
    asked: &Asked<'_>,
    text: &str,
    msg: &Message<'_>,
) -> Response<Body> {
    if msg.is_notification() {
        return plain(StatusCode::ACCEPTED, "");
    }
    if !msg.is_request() {
        return invalid_request(None);
    }
    let method = msg.method.as_deref().unwrap_or_default();
    if !MODERN_METHODS.contains(&method) {
        return rpc_error(
            StatusCode::NOT_FOUND,
            msg.id,
            code::METHOD_NOT_FOUND,
            "Method not found",
        );
    }
    let proc = match group.spec.isolation {
        Isolation::PerPrincipal => group.for_caller(asked.caller).await,
        _ => group.any_shared().await,
    };
    let proc = match proc {
        Ok(p) => p,
        Err(u) => return unavailable(u.detail(group), msg.id),
    };
    if method == "server/discover" {
        if let (Some(init), Some(id)) = (proc.init.get(), msg.id) {
            return json_response(StatusCode::OK, discover_answer(id, &init.result));
        }
    }
    let stream = asked.event_stream && msg.progress_token().is_some();
    let Some(legacy) = strip_envelope(text, msg.params) else {
        return invalid_request(msg.id);
    };
    let cacheable = CACHEABLE.contains(&method);
    call(proc, &legacy, None, msg.id, stream, Some(cacheable)).await
}

/// 2026-07-28 methods a stdio server answers (the 2025 methods the revision removed, and
/// what a 2025 server cannot serve, such as `subscriptions/listen`, get 404 -32601).
const MODERN_METHODS: &[&str] = &[
    "server/discover",
    "tools/list",
    "tools/call",
    "prompts/list",
    "prompts/get",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "completion/complete",
];

/// A body that is not one JSON-RPC message (a batch, or not JSON at all).
fn unreadable(batch: bool) -> Response<Body> {
    let (code, why) = match batch {
        true => (
            code::INVALID_REQUEST,
            "Invalid Request: batches are not served by stdio pools",
        ),
        false => (code::PARSE_ERROR, "Parse error"),
    };
    rpc_error(StatusCode::BAD_REQUEST, None, code, why)
}

/// A client's notification or response (to the server's own request) of a legacy session:
/// what the process should hear of it.
fn to_process(proc: &Proc, msg: &Message<'_>, text: &str, session: &str) {
    if msg.is_response() {
        // An answer to the server's own request (`per_session`: ids are the process's).
        if proc.owner().is_some() {
            let _ = proc.send_line(text);
        }
        return;
    }
    match msg.method.as_deref().unwrap_or_default() {
        // The edge initialised the process itself (or did so with the client's own
        // `initialize`, `per_session`).
        "notifications/initialized" => {}
        "notifications/cancelled" => proc.forward_cancel(text, Some(session)),
        // Roots changed and the like: news for a server serving this client alone.
        _ if proc.is_private() => {
            let _ = proc.send_line(text);
        }
        _ => {}
    }
}

fn new_session_id() -> Option<Arc<str>> {
    let mut b = [0u8; 16];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut b).ok()?;
    Some(Arc::from(super::hex(&b)))
}
