//! A request's way to its process and back: the call, its answer as JSON or its events and
//! then its answer as a stream, its cancellation at the process when the client goes away;
//! and a legacy session's standalone stream.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Response, StatusCode};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use serde_json::value::RawValue;
use tokio::sync::{mpsc, oneshot};

use super::answers::*;
use super::calls::{Call, CallError, Out};
use super::group::{Group, Session};
use super::process::Proc;
use crate::error::{code, EdgeError};
use crate::mcp::era::mark_modern;

/// Keep-alive comments on open event streams.
const KEEPALIVE: Duration = Duration::from_secs(15);

/// Send a request to the process; answer with its answer (JSON), or stream its events and
/// then the answer.
pub(super) async fn call(
    proc: Arc<Proc>,
    text: &str,
    session: Option<Arc<Session>>,
    id: Option<&RawValue>,
    stream: bool,
    modern: Option<bool>,
) -> Response<Body> {
    let call = match proc.request(text, session.as_ref().map(|s| s.id.clone()), stream) {
        Ok(c) => c,
        Err(CallError::Unreadable) => return invalid_request(id),
        // Nothing was written: the process ended as the request came.
        Err(CallError::Exited) => {
            let why = format!(
                "mcp-edge: stdio pool {}: the process ended as the request came; try again",
                proc.pool
            );
            return edge_error(EdgeError::StdioUnavailable { detail: why }, id);
        }
        Err(CallError::Busy) => return edge_error(EdgeError::StdioBusy, id),
    };
    let Call {
        number,
        events,
        done,
    } = call;
    let flight = Flight {
        proc,
        number,
        finished: false,
        session,
    };
    match events {
        Some(events) if stream => event_stream(flight, events, done, modern, id),
        _ => answer(flight, done, modern, id).await,
    }
}

/// The one answer to a request (no event stream): the server's, or why there is none.
async fn answer(
    mut flight: Flight,
    done: oneshot::Receiver<Out>,
    modern: Option<bool>,
    id: Option<&RawValue>,
) -> Response<Body> {
    let out = done.await;
    flight.finished = true;
    match out {
        Ok(Out::Final(answer)) => {
            let answer = match modern {
                Some(cacheable) => mark_modern(answer, cacheable),
                None => answer,
            };
            json_response(StatusCode::OK, answer)
        }
        Ok(Out::Cancelled) => cancelled(id),
        Ok(Out::Hung) => edge_error(EdgeError::StdioUnresponsive, id),
        _ => edge_error(EdgeError::StdioExited, id),
    }
}

/// A request in flight: if its client goes away first, the server is told. Its end counts
/// as a use of its session (a long call does not leave it idle).
struct Flight {
    proc: Arc<Proc>,
    number: u64,
    finished: bool,
    session: Option<Arc<Session>>,
}

impl Drop for Flight {
    fn drop(&mut self) {
        if !self.finished {
            self.proc.cancel(self.number);
        }
        self.proc.touch();
        if let Some(s) = &self.session {
            s.touch();
        }
    }
}

struct Streaming {
    flight: Flight,
    events: mpsc::Receiver<String>,
    done: Option<oneshot::Receiver<Out>>,
    modern: Option<bool>,
    lost: String,
    hung: String,
    dropped: String,
}

fn event_stream(
    flight: Flight,
    events: mpsc::Receiver<String>,
    done: oneshot::Receiver<Out>,
    modern: Option<bool>,
    id: Option<&RawValue>,
) -> Response<Body> {
    // Said on the stream when the process ends before answering: the client's request
    // fails with a reason, not a stream that just stops.
    let lost = edge_error_body(EdgeError::StdioExited, id);
    let hung = edge_error_body(EdgeError::StdioUnresponsive, id);
    let dropped = cancelled_body(id);
    let state = Streaming {
        flight,
        events,
        done: Some(done),
        modern,
        lost,
        hung,
        dropped,
    };
    let frames = futures::stream::unfold(state, |mut s| async move {
        let done = s.done.as_mut()?;
        let frame = tokio::select! {
            biased;
            Some(message) = s.events.recv() => event(&message),
            answer = done => {
                // Events sent before the answer go first.
                let mut out = Vec::new();
                while let Ok(message) = s.events.try_recv() {
                    out.extend_from_slice(&event(&message));
                }
                s.flight.finished = true;
                s.done = None;
                match answer {
                    Ok(Out::Final(a)) => {
                        let a = match s.modern {
                            Some(cacheable) => mark_modern(a, cacheable),
                            None => a,
                        };
                        out.extend_from_slice(&event(&a));
                    }
                    Ok(Out::Cancelled) => out.extend_from_slice(&event(&s.dropped)),
                    Ok(Out::Hung) => out.extend_from_slice(&event(&s.hung)),
                    _ => out.extend_from_slice(&event(&s.lost)),
                }
                Bytes::from(out)
            }
        };
        Some((Ok::<_, Infallible>(Frame::data(frame)), s))
    });
    let mut r = Response::new(BodyExt::boxed(StreamBody::new(frames)));
    set_event_stream(&mut r);
    r
}

/// The standalone stream of a legacy session: the process's own messages for it.
pub(super) async fn listen(
    group: &Arc<Group>,
    caller: &str,
    session: Option<&str>,
) -> Response<Body> {
    let Some(session) = session.and_then(|s| group.session(s)) else {
        if session.is_none() {
            return session_required(None);
        }
        return session_gone(None);
    };
    if !session.owned_by(caller) {
        return session_gone(None);
    }
    let proc = match group.session_process(&session).await {
        Ok(Some(p)) => p,
        Ok(None) => return session_gone(None),
        Err(u) => return unavailable(u.detail(group), None),
    };
    let (tx, rx) = mpsc::channel(64);
    if !proc.listen(session.id.clone(), tx) {
        return rpc_error(
            StatusCode::CONFLICT,
            None,
            code::SERVER_ERROR,
            "Conflict: Only one SSE stream is allowed per session",
        );
    }
    let mut keepalive = tokio::time::interval(KEEPALIVE);
    keepalive.reset();
    let frames = futures::stream::unfold((rx, keepalive), |(mut rx, mut keepalive)| async move {
        let frame = tokio::select! {
            message = rx.recv() => event(&message?),
            _ = keepalive.tick() => Bytes::from_static(b": keepalive\n\n"),
        };
        Some((Ok::<_, Infallible>(Frame::data(frame)), (rx, keepalive)))
    });
    let mut r = Response::new(BodyExt::boxed(StreamBody::new(frames)));
    set_event_stream(&mut r);
    r
}
