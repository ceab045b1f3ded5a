//! What a stdio pool's server answers: as an MCP server answers (its JSON-RPC errors with
//! the SDKs' codes and messages: "Session not found", "Method not found", …), or, where the
//! edge itself cannot serve the request (no process, a process that does not read, one that
//! ended), an edge error ([`EdgeError`]: its status, body, headers and marker, counted like
//! every edge error).

use std::convert::Infallible;

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use serde_json::value::RawValue;

use crate::error::{code, EdgeError};
use crate::mcp::json;
use crate::mcp::message::Message;
use crate::mcp::{jsonrpc, media, sse};
use crate::metrics;

pub type Body = BoxBody<Bytes, Infallible>;

/// An id as JSON text (`null` for none).
pub fn id_text(id: Option<&RawValue>) -> &str {
    id.map_or("null", |i| i.get())
}

/// One message as an event of the edge's own writing.
pub fn event(message: &str) -> Bytes {
    Bytes::from(sse::message_event(message, "\n"))
}

pub fn set_event_stream(r: &mut Response<Body>) {
    let h = r.headers_mut();
    h.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static(media::EVENT_STREAM),
    );
    h.insert(
        http::header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache"),
    );
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
}

pub fn json_response(status: StatusCode, body: String) -> Response<Body> {
    let mut r = Response::new(Full::new(Bytes::from(body)).boxed());
    *r.status_mut() = status;
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static(media::JSON),
    );
    r
}

pub fn plain(status: StatusCode, text: &str) -> Response<Body> {
    let mut r = Response::new(Full::new(Bytes::from(text.to_string())).boxed());
    *r.status_mut() = status;
    if !text.is_empty() {
        r.headers_mut().insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain"),
        );
    }
    r
}

/// A JSON-RPC error as the server would answer it.
pub fn rpc_error(
    status: StatusCode,
    id: Option<&RawValue>,
    code: i64,
    message: &str,
) -> Response<Body> {
    json_response(status, jsonrpc::error(id_text(id), code, message, None))
}

pub fn session_gone(id: Option<&RawValue>) -> Response<Body> {
    rpc_error(
        StatusCode::NOT_FOUND,
        id,
        code::SESSION_NOT_FOUND,
        "Session not found",
    )
}

pub fn session_required(id: Option<&RawValue>) -> Response<Body> {
    rpc_error(
        StatusCode::BAD_REQUEST,
        id,
        code::SERVER_ERROR,
        "Bad Request: Mcp-Session-Id header is required",
    )
}

pub fn invalid_request(id: Option<&RawValue>) -> Response<Body> {
    rpc_error(
        StatusCode::BAD_REQUEST,
        id,
        code::INVALID_REQUEST,
        "Invalid Request",
    )
}

pub fn cancelled(id: Option<&RawValue>) -> Response<Body> {
    json_response(StatusCode::OK, cancelled_body(id))
}

/// A request the client cancelled, as the SDKs answer it.
pub fn cancelled_body(id: Option<&RawValue>) -> String {
    jsonrpc::error(
        id_text(id),
        code::REQUEST_CANCELLED,
        "Request cancelled",
        None,
    )
}

/// The server's error answer to the client's own `initialize` (`per_session`), with the
/// client's id.
pub fn refused(answer: &str, id: &RawValue) -> Response<Body> {
    let body = Message::parse(answer)
        .and_then(|m| {
            m.id.and_then(|raw| json::splice_str(answer, &[(raw.get(), id.get())]))
        })
        .unwrap_or_else(|| jsonrpc::error(id.get(), code::INTERNAL, "initialize failed", None));
    json_response(StatusCode::OK, body)
}

/// An edge error, counted, with its status, headers and body.
pub fn edge_error(error: EdgeError, id: Option<&RawValue>) -> Response<Body> {
    metrics::get().edge_error(error.kind());
    let mut r = json_response(
        StatusCode::from_u16(error.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        String::from_utf8_lossy(&error.body_with_id_text(id_text(id))).into_owned(),
    );
    for (name, value) in error.headers() {
        if let Ok(value) = HeaderValue::from_str(&value) {
            r.headers_mut().insert(name, value);
        }
    }
    r
}

/// Said on a stream whose process ended or hung before answering: the request fails with a
/// reason, not a stream that just stops.
pub fn edge_error_body(error: EdgeError, id: Option<&RawValue>) -> String {
    jsonrpc::error(id_text(id), error.code(), &error.message(), None)
}

/// No process can take the request (`detail` says why): a 503 the client may retry.
pub fn unavailable(detail: String, id: Option<&RawValue>) -> Response<Body> {
    edge_error(EdgeError::StdioUnavailable { detail }, id)
}
