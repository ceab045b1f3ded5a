//! The error boundary: the one place an edge error becomes a response.
//!
//! Every error the edge raises arrives here as one value: a [`Rejection`] from admission, or
//! a Pingora error from a later phase whose cause is the [`EdgeError`] a step put there
//! (else one is derived from the Pingora error's type and source). Here it is counted
//! (`mcp_edge_errors_total{kind}`), recorded for the access log and, while the response head
//! is still unwritten, answered: the status, the JSON-RPC error body with the request's id,
//! and the `x-mcp-edge-error` marker.
//!
//! The heads the edge writes itself otherwise are written here too, each through the
//! pipeline's answer stages: an answer it gives ([`answer`]), a bridged POST's early `202`
//! ([`accepted`]), the head of a stream it holds for a client ([`hold`]).

use std::time::Duration;

use bytes::Bytes;
use pingora::http::ResponseHeader;
use pingora::proxy::Session;
use pingora::{Error, ErrorSource, ErrorType};
use serde_json::Value;

use super::answer::Answer;
use super::ctx::Ctx;
use super::edge::Edge;
use super::pipeline;
use super::stage::Held;
use crate::error::{EdgeError, Rejection};
use crate::metrics;

/// Answer a request admission refused. A body the edge did not read is then drained, so
/// that a client still sending it can read the answer (see [`drain_unread_body`]).
pub async fn reject(session: &mut Session, ctx: &mut Ctx, rejection: Rejection) {
    record(ctx, &rejection.error);
    write(session, ctx, &rejection.error, rejection.id.as_ref()).await;
    drain_unread_body(session, ctx).await;
}

/// Write an answer the edge gives itself, with the headers the stages put on every edge-made
/// head (CORS).
pub async fn answer(session: &mut Session, ctx: &mut Ctx, answer: Answer) {
    ctx.answered = true;
    let Ok(mut resp) = answer_head(&answer) else {
        return;
    };
    let mut body = answer.body;
    if pipeline::answer(&mut resp, &mut body, ctx).is_err() {
        return;
    }
    let body = (!body.is_empty()).then_some(body);
    let end = body.is_none();
    if session
        .write_response_header(Box::new(resp), end)
        .await
        .is_ok()
        && !end
    {
        let _ = session.write_response_body(body, true).await;
    }
}

/// A `202 Accepted` with no body, written before the request goes on to a member whose
/// answer goes elsewhere (a bridged HTTP+SSE POST's: [`super::stage::Flow::Accepted`]).
pub async fn accepted(session: &mut Session, ctx: &mut Ctx) {
    let Ok(mut head) = ResponseHeader::build(202, Some(2)) else {
        return;
    };
    if pipeline::answer(&mut head, &mut Bytes::new(), ctx).is_ok() {
        let _ = session.write_response_header(Box::new(head), true).await;
    }
}

/// An event stream the edge holds for the client ([`super::stage::Flow::Hold`]): its head
/// with the answer stages' headers, then the stage that opened it writes.
pub async fn hold(session: &mut Session, ctx: &mut Ctx, edge: &Edge, held: Box<dyn Held>) {
    ctx.answered = true;
    let Ok(mut head) = held.head(session) else {
        return;
    };
    if pipeline::answer(&mut head, &mut Bytes::new(), ctx).is_ok() {
        held.hold(head, session, ctx, edge).await;
    }
}

fn answer_head(answer: &Answer) -> pingora::Result<ResponseHeader> {
    let mut resp = ResponseHeader::build(answer.status, Some(4))?;
    if !answer.body.is_empty() {
        resp.insert_header(http::header::CONTENT_TYPE, answer.content_type)?;
    }
    resp.insert_header(http::header::CONTENT_LENGTH, answer.body.len().to_string())?;
    if let Some(id) = &answer.session {
        resp.insert_header(crate::mcp::headers::SESSION_ID, id.clone())?;
    }
    if answer.public {
        resp.insert_header(http::header::ACCESS_CONTROL_ALLOW_ORIGIN, "*")?;
    }
    Ok(resp)
}

/// The most of an unread body the edge reads and drops after an early answer (then closes).
const DRAIN_MAX_BYTES: usize = 16 * 1024 * 1024;
/// The longest the edge keeps reading it.
const DRAIN_MAX_TIME: Duration = Duration::from_secs(5);

/// After an early answer (413, 415, 403 …) the client may still be sending its body; closing
/// at once resets the connection under it and many clients (Python's `http.client`, Node's
/// `fetch`) then report the reset, not the answer. As nginx does, read and drop the rest for
/// a bounded number of bytes and seconds, then close.
async fn drain_unread_body(session: &mut Session, ctx: &Ctx) {
    let waits_for_continue = session
        .req_header()
        .headers
        .get(http::header::EXPECT)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    let answered_continue = ctx.stages.method.answered_continue;
    if session.downstream_session.is_body_done() || (waits_for_continue && !answered_continue) {
        // Nothing more will come: all of it was read, or the client waits for a 100 first.
        return;
    }
    let per_read = ctx.snapshot.timeouts.request_body.min(DRAIN_MAX_TIME);
    session.downstream_session.set_read_timeout(Some(per_read));
    let mut drained = 0usize;
    let _ = tokio::time::timeout(DRAIN_MAX_TIME, async {
        while drained <= DRAIN_MAX_BYTES {
            match session.downstream_session.read_request_body().await {
                Ok(Some(chunk)) => drained += chunk.len(),
                Ok(None) | Err(_) => break,
            }
        }
    })
    .await;
}

/// Answer a request that failed after admission; returns the status written (0: none, the
/// response had started or the client is gone, so the stream is cut instead).
pub async fn fail(session: &mut Session, ctx: &mut Ctx, e: &Error) -> u16 {
    let error = edge_error_in(e).cloned().unwrap_or_else(|| classify(e));
    let client_gone = matches!(error, EdgeError::ClientError { .. })
        && matches!(
            e.etype(),
            ErrorType::ConnectionClosed | ErrorType::ReadError | ErrorType::WriteError
        );
    // Pingora closes the client connection after a failure: say so (`Connection: close`),
    // so a keep-alive client does not send its next request into a closing connection.
    session.downstream_session.set_keepalive(None);
    if client_gone {
        // The client closed its connection or stream: how MCP cancels, and how a client
        // leaves a stream it listened to. Not an error.
        ctx.client_closed = true;
        return 0;
    }
    record(ctx, &error);
    if session.response_written().is_some() {
        return 0;
    }
    let id = ctx.request_id().cloned();
    write(session, ctx, &error, id.as_ref()).await;
    error.status()
}

fn record(ctx: &mut Ctx, error: &EdgeError) {
    metrics::get().edge_error(error.kind());
    ctx.error = Some(error.clone());
}

/// The edge error a step attached to a Pingora error (as its cause, at any depth).
fn edge_error_in(e: &Error) -> Option<&EdgeError> {
    let mut cause = e.cause.as_deref()?;
    loop {
        if let Some(edge) = cause.downcast_ref::<EdgeError>() {
            return Some(edge);
        }
        // A wrapped Pingora error is stored boxed once more (`more_context`, `because`).
        let inner = match cause.downcast_ref::<Box<Error>>() {
            Some(boxed) => boxed.as_ref(),
            None => cause.downcast_ref::<Error>()?,
        };
        cause = inner.cause.as_deref()?;
    }
}

/// Map a Pingora failure that carries no edge error to the one the client sees.
fn classify(e: &Error) -> EdgeError {
    let detail = e.to_string();
    match (e.esource(), e.etype()) {
        (
            _,
            ErrorType::ConnectTimedout
            | ErrorType::ConnectRefused
            | ErrorType::ConnectNoRoute
            | ErrorType::ConnectError,
        ) => EdgeError::ConnectFailed { detail },
        (ErrorSource::Upstream, ErrorType::ReadTimedout | ErrorType::WriteTimedout) => {
            EdgeError::UpstreamTimeout { detail }
        }
        (ErrorSource::Upstream, _) => EdgeError::UpstreamError { detail },
        (ErrorSource::Downstream, _) => EdgeError::ClientError { detail },
        _ => EdgeError::Internal { detail },
    }
}

/// Write an edge error response. Failures to write mean the client is gone; nothing to do.
async fn write(session: &mut Session, ctx: &mut Ctx, error: &EdgeError, id: Option<&Value>) {
    let mut body: Bytes = error.body(id);
    if !session.downstream_session.is_body_done() {
        // The request body was not read: the connection cannot carry another request.
        session.downstream_session.set_keepalive(None);
    }
    let Ok(mut resp) = head(error, body.len()) else {
        return;
    };
    // An allowed origin's page can read the error (its status, body and marker).
    if pipeline::answer(&mut resp, &mut body, ctx).is_err() {
        return;
    }
    let end = body.is_empty();
    if session
        .write_response_header(Box::new(resp), end)
        .await
        .is_ok()
        && !end
    {
        let _ = session.write_response_body(Some(body), true).await;
    }
}

fn head(error: &EdgeError, len: usize) -> pingora::Result<ResponseHeader> {
    let mut resp = ResponseHeader::build(error.status(), Some(4))?;
    resp.insert_header(http::header::CONTENT_TYPE, crate::mcp::media::JSON)?;
    resp.insert_header(http::header::CONTENT_LENGTH, len.to_string())?;
    for (name, value) in error.headers() {
        resp.insert_header(name, value)?;
    }
    Ok(resp)
}
