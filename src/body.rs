//! Reading a whole request body before the upstream is chosen, and replaying it upstream.
//!
//! Pingora 0.9.1 re-sends a body it has already read only from its retry buffer, which holds
//! 64 KiB; chunked and length-less h2 bodies over that size would reach the upstream empty.
//! So once the edge has read and validated a body it swaps the downstream session for a
//! [`Replay`] session: it delegates everything to the real session, reports the body as read,
//! and offers the whole stored body as the retry buffer, which Pingora sends to the upstream
//! (again, after a refused connection) whatever the framing was. [`restore`] puts the real
//! session back before Pingora finishes the request, so the client connection is reused.
//! Every proxied request gets a `Replay` (with an empty body for GET and DELETE), which is
//! also how an SSE response learns that the edge is shutting down.

use std::time::Duration;

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use futures::Stream;
use http::HeaderMap;
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::protocols::http::custom::server::Session as CustomSession;
use pingora::protocols::http::custom::CustomMessageWrite;
use pingora::protocols::http::{HttpTask, ServerSession};
use pingora::protocols::l4::socket::SocketAddr;
use pingora::protocols::Digest;
use pingora::proxy::Session;
use pingora::{Error, ErrorType, Result};
use tokio::sync::{oneshot, watch};

use crate::error::EdgeError;

/// Read the whole request body, refusing more than `limit` bytes.
pub async fn read_all(
    session: &mut Session,
    limit: usize,
) -> std::result::Result<Bytes, EdgeError> {
    let declared = session
        .req_header()
        .headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<usize>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(EdgeError::BodyTooLarge { limit });
    }
    let mut buf = BytesMut::with_capacity(declared.unwrap_or(0).min(limit));
    loop {
        match session.downstream_session.read_request_body().await {
            Ok(Some(chunk)) => {
                if buf.len() + chunk.len() > limit {
                    return Err(EdgeError::BodyTooLarge { limit });
                }
                buf.extend_from_slice(&chunk);
            }
            Ok(None) => return Ok(buf.freeze()),
            Err(e) if e.etype() == &ErrorType::ReadTimedout => return Err(EdgeError::BodyTimeout),
            Err(e) => {
                return Err(EdgeError::ClientError {
                    detail: e.to_string(),
                })
            }
        }
    }
}

/// Where the real session comes back when the request is finished.
pub type Handback = oneshot::Receiver<Box<ServerSession>>;

/// Replace the downstream session with a [`Replay`] of `body` (possibly empty). `drain`
/// turns `true` when the edge shuts down: an SSE response then ends at once (see
/// [`Replay::read_body_or_idle`]).
pub fn install(session: &mut Session, body: Bytes, drain: watch::Receiver<bool>) -> Handback {
    let (tx, rx) = oneshot::channel();
    let real = std::mem::replace(&mut session.downstream_session, detached());
    *session.downstream_session = ServerSession::new_custom(Box::new(Replay {
        inner: real,
        body,
        handback: Some(tx),
        drain,
        streaming: false,
    }));
    rx
}

/// The error that ends a streaming response when the edge shuts down.
pub const DRAINING: ErrorType = ErrorType::Custom("draining");

async fn drained(rx: &mut watch::Receiver<bool>) {
    while !*rx.borrow_and_update() {
        if rx.changed().await.is_err() {
            // Nobody can start a drain any more: wait forever.
            std::future::pending::<()>().await;
        }
    }
}

/// Put the real session back (no-op when none was installed).
pub async fn restore(session: &mut Session, handback: &mut Option<Handback>) {
    let Some(mut rx) = handback.take() else {
        return;
    };
    if let Some(custom) = session.downstream_session.as_custom_mut() {
        // `finish_custom` is the Replay's hand-back hook (Pingora calls it only on custom
        // message writers, never on a downstream session).
        let _ = custom.finish_custom().await;
    }
    if let Ok(real) = rx.try_recv() {
        session.downstream_session = real;
    }
}

/// A session with nothing behind it, standing in while the real one moves.
fn detached() -> Box<ServerSession> {
    let (stream, _) = tokio::io::duplex(1);
    Box::new(ServerSession::new_http1(Box::new(stream)))
}

struct Replay {
    inner: Box<ServerSession>,
    body: Bytes,
    handback: Option<oneshot::Sender<Box<ServerSession>>>,
    drain: watch::Receiver<bool>,
    /// The response is an event stream (ended early when the edge drains).
    streaming: bool,
}

fn is_event_stream(resp: &ResponseHeader) -> bool {
    resp.headers
        .get(http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"))
}

type MessageReader = Box<dyn Stream<Item = Result<Bytes>> + Unpin + Send + Sync + 'static>;

#[async_trait]
impl CustomSession for Replay {
    fn req_header(&self) -> &RequestHeader {
        self.inner.req_header()
    }
    fn req_header_mut(&mut self) -> &mut RequestHeader {
        self.inner.req_header_mut()
    }
    async fn read_body_bytes(&mut self) -> Result<Option<Bytes>> {
        Ok(None)
    }
    async fn drain_request_body(&mut self) -> Result<()> {
        Ok(())
    }
    async fn write_response_header(&mut self, resp: Box<ResponseHeader>, end: bool) -> Result<()> {
        self.streaming = is_event_stream(&resp);
        self.inner.write_response_header(resp).await?;
        if end {
            self.inner.finish_body().await?;
        }
        Ok(())
    }
    async fn write_response_header_ref(&mut self, resp: &ResponseHeader, end: bool) -> Result<()> {
        self.streaming = is_event_stream(resp);
        self.inner.write_response_header_ref(resp).await?;
        if end {
            self.inner.finish_body().await?;
        }
        Ok(())
    }
    async fn write_body(&mut self, data: Bytes, end: bool) -> Result<()> {
        self.inner.write_response_body(data, end).await
    }
    async fn write_trailers(&mut self, trailers: HeaderMap) -> Result<()> {
        self.inner.write_response_trailers(trailers).await
    }
    async fn response_duplex_vec(&mut self, tasks: Vec<HttpTask>) -> Result<bool> {
        // Proxied response heads arrive here, not through `write_response_header`.
        if let Some(HttpTask::Header(resp, _)) = tasks.first() {
            self.streaming = is_event_stream(resp);
        }
        self.inner.response_duplex_vec(tasks).await
    }
    fn set_read_timeout(&mut self, timeout: Option<Duration>) {
        self.inner.set_read_timeout(timeout)
    }
    fn get_read_timeout(&self) -> Option<Duration> {
        self.inner.get_read_timeout()
    }
    fn set_write_timeout(&mut self, timeout: Option<Duration>) {
        self.inner.set_write_timeout(timeout)
    }
    fn get_write_timeout(&self) -> Option<Duration> {
        self.inner.get_write_timeout()
    }
    fn set_total_drain_timeout(&mut self, timeout: Option<Duration>) {
        self.inner.set_total_drain_timeout(timeout)
    }
    fn get_total_drain_timeout(&self) -> Option<Duration> {
        self.inner.get_total_drain_timeout()
    }
    fn request_summary(&self) -> String {
        self.inner.request_summary()
    }
    fn response_written(&self) -> Option<&ResponseHeader> {
        self.inner.response_written()
    }
    async fn shutdown(&mut self, _code: u32, _ctx: &str) {
        self.inner.shutdown().await
    }
    fn is_body_done(&mut self) -> bool {
        true
    }
    async fn finish(&mut self) -> Result<()> {
        self.inner.finish_body().await
    }
    fn is_body_empty(&mut self) -> bool {
        self.body.is_empty()
    }
    async fn read_body_or_idle(&mut self, no_body_expected: bool) -> Result<Option<Bytes>> {
        // The body is consumed: this only watches for the client going away, and, for an
        // event stream, for the edge shutting down, which ends the proxying of the stream
        // (the proxy's `logging` then ends the response cleanly).
        if !self.streaming {
            return self.inner.read_body_or_idle(no_body_expected).await;
        }
        tokio::select! {
            r = self.inner.read_body_or_idle(no_body_expected) => r,
            _ = drained(&mut self.drain) => Err(Error::explain(DRAINING, "the edge is shutting down")),
        }
    }
    fn body_bytes_sent(&self) -> usize {
        self.inner.body_bytes_sent()
    }
    fn body_bytes_read(&self) -> usize {
        self.inner.body_bytes_read()
    }
    fn digest(&self) -> Option<&Digest> {
        self.inner.digest()
    }
    fn digest_mut(&mut self) -> Option<&mut Digest> {
        self.inner.digest_mut()
    }
    fn client_addr(&self) -> Option<&SocketAddr> {
        self.inner.client_addr()
    }
    fn server_addr(&self) -> Option<&SocketAddr> {
        self.inner.server_addr()
    }
    fn pseudo_raw_h1_request_header(&self) -> Bytes {
        self.inner.to_h1_raw()
    }
    fn enable_retry_buffering(&mut self) {}
    fn retry_buffer_truncated(&self) -> bool {
        false
    }
    fn get_retry_buffer(&self) -> Option<Bytes> {
        (!self.body.is_empty()).then(|| self.body.clone())
    }
    async fn finish_custom(&mut self) -> Result<()> {
        if let Some(tx) = self.handback.take() {
            let real = std::mem::replace(&mut self.inner, detached());
            // The receiver lives in the request context; if it is gone there is nobody to
            // hand the session to and dropping it closes the connection, which is safe.
            let _ = tx.send(real);
        }
        Ok(())
    }
    fn take_custom_message_reader(&mut self) -> Option<MessageReader> {
        None
    }
    fn restore_custom_message_reader(&mut self, _reader: MessageReader) -> Result<()> {
        Ok(())
    }
    fn take_custom_message_writer(&mut self) -> Option<Box<dyn CustomMessageWrite>> {
        None
    }
    fn restore_custom_message_writer(
        &mut self,
        _writer: Box<dyn CustomMessageWrite>,
    ) -> Result<()> {
        Ok(())
    }
}
