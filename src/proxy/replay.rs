//! The Pingora body-replay workaround, in one box.
//!
//! The edge reads and validates the whole request body before it chooses an upstream. Pingora
//! 0.9.1 re-sends a body it has already read only from its retry buffer, which holds 64 KiB;
//! chunked and length-less h2 bodies over that size would reach the upstream empty. So once a
//! body is read, [`install`] swaps the downstream session for a [`Replay`] custom session: it
//! delegates everything to the real session, reports the body as read, and offers the whole
//! stored body as the retry buffer, which Pingora sends upstream (again after a refused
//! connection) whatever the framing was. [`restore`] puts the real session back before Pingora
//! finishes the request, so the client connection is reused.
//!
//! What this relies on in Pingora 0.9.1 (pinned `=0.9.1` in Cargo.toml; re-check each of
//! these before moving to another version):
//! - `HttpSession::Custom` and the `#[doc(hidden)]` trait
//!   `protocols::http::custom::server::Session` (~45 methods) that it wraps;
//! - the proxy loop sending the body from `get_retry_buffer()` when `is_body_done()` is true
//!   and `retry_buffer_truncated()` is false (`proxy_h1`/`proxy_h2` body tasks);
//! - `finish_custom()` being callable from our own code, as the hand-back hook. Pingora itself
//!   calls it on a downstream session only from `write_error_response` (`respond_error`, the
//!   default `fail_to_proxy`, the cache), none of which the edge reaches while a `Replay` is
//!   installed: its `fail_to_proxy` restores first;
//! - `read_body_or_idle()` being what the proxy polls on the client side while a response
//!   streams, which is where an event stream can be ended early (see `cutoff` below).
//!
//! Every proxied request gets a `Replay` (an empty body for GET and DELETE). Two more duties
//! sit here because `read_body_or_idle` is the one place polled for the whole exchange:
//! - the `cutoff` switch: when it turns `true`, an event-stream response ends with
//!   [`STREAM_CUT`] (shutdown owns the switch; see [`crate::ops::shutdown`]);
//! - upstream silence ([`Silence`]): no response head within `head`, or no response bytes
//!   for `gap` (`stream_idle` once the response is an event stream), ends the exchange with
//!   [`EdgeError::UpstreamTimeout`]. Pingora's own per-read timeout cannot tell an idle event
//!   stream from a stalled answer, so it is off for our peers.
//!
//! The stored body is released once it has been handed to the upstream ([`Stored::release`]):
//! a long-lived stream does not pin its request body.

use std::pin::Pin;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::{Future, Stream};
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
use tokio::time::Instant;

use super::body::Body;
use crate::error::EdgeError;

/// How long the upstream may stay silent.
#[derive(Debug, Clone, Copy)]
pub struct Silence {
    /// Until the response head.
    pub head: Duration,
    /// Between response bytes of an ordinary response.
    pub gap: Duration,
    /// Between bytes of an event stream (`text/event-stream`).
    pub stream_idle: Duration,
}

/// The request body, shared between the replay session and the request context so that it
/// can be released once the upstream has it.
#[derive(Clone, Default)]
pub struct Stored {
    body: Arc<Mutex<Option<Body>>>,
    /// The request has a body to forward (also after the edge's copy is released).
    present: bool,
    /// A stage rewrote it to this length.
    rewritten_len: Option<usize>,
}

impl Stored {
    fn new(body: Option<Body>) -> Stored {
        let body = body.filter(|b| !b.bytes().is_empty());
        Stored {
            present: body.is_some(),
            rewritten_len: body.as_ref().and_then(Body::rewritten_len),
            body: Arc::new(Mutex::new(body)),
        }
    }
    /// The length a stage rewrote the body to (`Content-Length` must say it).
    pub fn rewritten_len(&self) -> Option<usize> {
        self.rewritten_len
    }
    /// The request has no body to forward (GET, DELETE, OPTIONS, an empty POST).
    pub fn is_empty(&self) -> bool {
        !self.present
    }
    fn get(&self) -> Option<Bytes> {
        self.body.lock().ok()?.as_ref().map(|b| b.bytes().clone())
    }
    /// The body still held (empty once released, or when there is none).
    pub fn bytes(&self) -> Bytes {
        self.get().unwrap_or_default()
    }
    /// Drop the edge's copy (and give its memory back to the budget): the upstream has the
    /// body, and it is never sent again.
    pub fn release(&self) {
        if let Ok(mut b) = self.body.lock() {
            *b = None;
        }
    }
}

/// Where the real session comes back when the request is finished.
pub type Handback = oneshot::Receiver<Box<ServerSession>>;

/// Replace the downstream session with a [`Replay`] of `body` (possibly empty). When
/// `cutoff` turns `true`, an event-stream response ends at once (see
/// [`Replay::read_body_or_idle`]).
pub fn install(
    session: &mut Session,
    body: Option<Body>,
    cutoff: watch::Receiver<bool>,
    silence: Silence,
    answered: bool,
) -> (Handback, Stored) {
    let (tx, rx) = oneshot::channel();
    let real = swap_out(&mut session.downstream_session);
    let stored = Stored::new(body);
    let replay = ServerSession::new_custom(Box::new(Replay {
        inner: Some(real),
        orphan: None,
        body: stored.clone(),
        handback: Some(tx),
        cutoff,
        streaming: false,
        silence,
        head_seen: false,
        last_activity: None,
        timer: None,
        answered,
    }));
    put_back(&mut session.downstream_session, Box::new(replay));
    (rx, stored)
}

/// Whether the member's answer ended with these tasks (none of them goes to the client).
fn answered_elsewhere(tasks: Vec<HttpTask>) -> Result<bool> {
    let mut end = false;
    for task in tasks {
        end = match task {
            HttpTask::Header(_, end) | HttpTask::Body(_, end) | HttpTask::UpgradedBody(_, end) => {
                end
            }
            HttpTask::Trailer(_) | HttpTask::Done => true,
            HttpTask::Failed(e) => return Err(e),
        };
    }
    Ok(end)
}

/// The error that ends a streaming response when `cutoff` turns `true`.
pub const STREAM_CUT: ErrorType = ErrorType::Custom("draining");

async fn cut(rx: &mut watch::Receiver<bool>) {
    while !*rx.borrow_and_update() {
        if rx.changed().await.is_err() {
            // Nobody can flip the switch any more: wait forever.
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
        // `finish_custom` is the Replay's hand-back hook (see the module doc).
        let _ = custom.finish_custom().await;
    }
    if let Ok(real) = rx.try_recv() {
        session.downstream_session = real;
    }
}

/// A session with nothing behind it, standing in while the real one moves (one per worker
/// thread, reused: it is never read or written).
fn detached() -> Box<ServerSession> {
    let (stream, _) = tokio::io::duplex(1);
    Box::new(ServerSession::new_http1(Box::new(stream)))
}

thread_local! {
    static SPARE: std::cell::RefCell<Option<Box<ServerSession>>> = const { std::cell::RefCell::new(None) };
}

/// Take the session out of `slot`, leaving this thread's stand-in there for the moment; the
/// caller puts a real session back into the same box at once ([`put_back`] returns the
/// stand-in), so the stand-in is made once per thread instead of twice per request.
fn swap_out(slot: &mut Box<ServerSession>) -> Box<ServerSession> {
    let spare = SPARE
        .with(|s| s.borrow_mut().take())
        .unwrap_or_else(detached);
    std::mem::replace(slot, spare)
}

/// Put `session` into `slot` and keep the stand-in it held for the next [`swap_out`].
fn put_back(slot: &mut Box<ServerSession>, session: Box<ServerSession>) {
    let spare = std::mem::replace(slot, session);
    SPARE.with(|s| *s.borrow_mut() = Some(spare));
}

struct Replay {
    /// The real session, until [`CustomSession::finish_custom`] hands it back ([`restore`]
    /// then drops the `Replay`; should anything still call it, reads and writes fail and the
    /// getters answer as for a closed session).
    inner: Option<Box<ServerSession>>,
    /// What `req_header_mut` lends once the real session is gone (never in practice).
    orphan: Option<Box<RequestHeader>>,
    body: Stored,
    handback: Option<oneshot::Sender<Box<ServerSession>>>,
    cutoff: watch::Receiver<bool>,
    /// The response is an event stream (ended early when `cutoff` turns `true`).
    streaming: bool,
    silence: Silence,
    head_seen: bool,
    /// When the upstream last sent something (or, before that, when waiting began).
    last_activity: Option<Instant>,
    /// Armed once; when it fires before the real deadline (there was activity since), it is
    /// re-armed, so activity costs a clock read, not a timer update. Pingora's shared timer
    /// wheel, not Tokio's: arming a Tokio timer wakes the worker's own I/O driver (an extra
    /// `write` and `epoll_wait` per request, measured in docs/benchmarks.md).
    timer: Option<Pin<Box<dyn Future<Output = ()> + Send + Sync>>>,
    /// The client has its answer already (a bridged HTTP+SSE POST's `202`): what the member
    /// answers goes elsewhere (the response stages take it), none of it to the client.
    answered: bool,
}

impl Replay {
    /// A response head went to the client.
    fn saw_head(&mut self, resp: &ResponseHeader) {
        self.streaming = is_event_stream(resp);
        self.head_seen = true;
        self.last_activity = Some(Instant::now());
    }

    /// When the upstream's silence becomes an error.
    fn silence_deadline(&mut self) -> Instant {
        let since = *self.last_activity.get_or_insert_with(Instant::now);
        let allowed = match (self.head_seen, self.streaming) {
            (false, _) => self.silence.head,
            (true, false) => self.silence.gap,
            (true, true) => self.silence.stream_idle,
        };
        since + allowed
    }

    fn session(&mut self) -> Result<&mut ServerSession> {
        self.inner.as_deref_mut().ok_or_else(handed_back)
    }
}

fn handed_back() -> Box<Error> {
    Error::explain(ErrorType::InternalError, "session handed back")
}

/// The request head of a `Replay` whose session was handed back.
static NO_REQUEST: LazyLock<RequestHeader> = LazyLock::new(empty_request);

fn empty_request() -> RequestHeader {
    RequestHeader::from(http::Request::new(()).into_parts().0)
}

/// A timer that fires at `deadline` (at Pingora's 10 ms resolution).
fn arm(deadline: Instant) -> Pin<Box<dyn Future<Output = ()> + Send + Sync>> {
    let after = deadline.saturating_duration_since(Instant::now());
    Box::pin(pingora::time::fast_timeout::fast_sleep(after))
}

fn silence_error(allowed_for: &str) -> Box<Error> {
    let mut e = Error::because(
        ErrorType::ReadTimedout,
        "upstream silent",
        EdgeError::UpstreamTimeout {
            detail: format!("no {allowed_for} from the upstream in time"),
        },
    );
    e.as_up();
    e
}

/// A media type is case-insensitive (RFC 9110 §8.3.1): `Text/Event-Stream` is one too.
fn is_event_stream(resp: &ResponseHeader) -> bool {
    resp.headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.as_bytes().get(..17))
        .is_some_and(|t| t.eq_ignore_ascii_case(b"text/event-stream"))
}

type MessageReader = Box<dyn Stream<Item = Result<Bytes>> + Unpin + Send + Sync + 'static>;

#[async_trait]
impl CustomSession for Replay {
    fn req_header(&self) -> &RequestHeader {
        match &self.inner {
            Some(s) => s.req_header(),
            None => &NO_REQUEST,
        }
    }
    fn req_header_mut(&mut self) -> &mut RequestHeader {
        match &mut self.inner {
            Some(s) => s.req_header_mut(),
            None => self.orphan.get_or_insert_with(|| Box::new(empty_request())),
        }
    }
    async fn read_body_bytes(&mut self) -> Result<Option<Bytes>> {
        Ok(None)
    }
    async fn drain_request_body(&mut self) -> Result<()> {
        Ok(())
    }
    async fn write_response_header(&mut self, resp: Box<ResponseHeader>, end: bool) -> Result<()> {
        self.saw_head(&resp);
        if self.answered {
            return Ok(());
        }
        let inner = self.session()?;
        inner.write_response_header(resp).await?;
        if end {
            inner.finish_body().await?;
        }
        Ok(())
    }
    async fn write_response_header_ref(&mut self, resp: &ResponseHeader, end: bool) -> Result<()> {
        self.saw_head(resp);
        if self.answered {
            return Ok(());
        }
        let inner = self.session()?;
        inner.write_response_header_ref(resp).await?;
        if end {
            inner.finish_body().await?;
        }
        Ok(())
    }
    async fn write_body(&mut self, data: Bytes, end: bool) -> Result<()> {
        if self.answered {
            self.last_activity = Some(Instant::now());
            return Ok(());
        }
        let r = self.session()?.write_response_body(data, end).await;
        // After the write: time spent writing to a slow client is not upstream silence.
        self.last_activity = Some(Instant::now());
        r
    }
    async fn write_trailers(&mut self, trailers: HeaderMap) -> Result<()> {
        self.session()?.write_response_trailers(trailers).await
    }
    async fn response_duplex_vec(&mut self, tasks: Vec<HttpTask>) -> Result<bool> {
        // Proxied response heads arrive here, not through `write_response_header`.
        if let Some(HttpTask::Header(resp, _)) = tasks.first() {
            self.saw_head(resp);
        }
        if self.answered {
            // The exchange ends when the member's answer does, not when the client's did.
            self.last_activity = Some(Instant::now());
            return answered_elsewhere(tasks);
        }
        let r = self.session()?.response_duplex_vec(tasks).await;
        // After the write: time spent writing to a slow client is not upstream silence.
        self.last_activity = Some(Instant::now());
        r
    }
    fn set_read_timeout(&mut self, timeout: Option<Duration>) {
        if let Some(s) = &mut self.inner {
            s.set_read_timeout(timeout)
        }
    }
    fn get_read_timeout(&self) -> Option<Duration> {
        self.inner.as_ref()?.get_read_timeout()
    }
    fn set_write_timeout(&mut self, timeout: Option<Duration>) {
        if let Some(s) = &mut self.inner {
            s.set_write_timeout(timeout)
        }
    }
    fn get_write_timeout(&self) -> Option<Duration> {
        self.inner.as_ref()?.get_write_timeout()
    }
    fn set_total_drain_timeout(&mut self, timeout: Option<Duration>) {
        if let Some(s) = &mut self.inner {
            s.set_total_drain_timeout(timeout)
        }
    }
    fn get_total_drain_timeout(&self) -> Option<Duration> {
        self.inner.as_ref()?.get_total_drain_timeout()
    }
    fn request_summary(&self) -> String {
        self.inner
            .as_ref()
            .map(|s| s.request_summary())
            .unwrap_or_default()
    }
    fn response_written(&self) -> Option<&ResponseHeader> {
        self.inner.as_ref()?.response_written()
    }
    async fn shutdown(&mut self, _code: u32, _ctx: &str) {
        if let Some(s) = &mut self.inner {
            s.shutdown().await
        }
    }
    fn is_body_done(&mut self) -> bool {
        true
    }
    async fn finish(&mut self) -> Result<()> {
        self.session()?.finish_body().await
    }
    fn is_body_empty(&mut self) -> bool {
        self.body.is_empty()
    }
    async fn read_body_or_idle(&mut self, no_body_expected: bool) -> Result<Option<Bytes>> {
        // The body is consumed: this only watches for the client going away, for upstream
        // silence, and, for an event stream, for the cutoff, which ends the proxying of the
        // stream (the proxy's `logging` then ends the response cleanly).
        loop {
            let deadline = self.silence_deadline();
            let what = match (self.head_seen, self.streaming) {
                (false, _) => "response head",
                (true, false) => "response bytes",
                (true, true) => "event-stream bytes",
            };
            let streaming = self.streaming;
            // A client that has its answer may go (close, reset): the member's answer goes on.
            let watch_client = !self.answered;
            let inner = self.inner.as_deref_mut().ok_or_else(handed_back)?;
            let timer = self.timer.get_or_insert_with(|| arm(deadline));
            tokio::select! {
                r = inner.read_body_or_idle(no_body_expected), if watch_client => return r,
                _ = timer.as_mut() => {
                    // Armed for an earlier deadline; there was activity since.
                    if Instant::now() < deadline {
                        self.timer = Some(arm(deadline));
                        continue;
                    }
                    return Err(silence_error(what));
                }
                _ = cut(&mut self.cutoff), if streaming => {
                    return Err(Error::explain(STREAM_CUT, "the edge is shutting down"));
                }
            }
        }
    }
    fn body_bytes_sent(&self) -> usize {
        self.inner.as_ref().map_or(0, |s| s.body_bytes_sent())
    }
    fn body_bytes_read(&self) -> usize {
        self.inner.as_ref().map_or(0, |s| s.body_bytes_read())
    }
    fn digest(&self) -> Option<&Digest> {
        self.inner.as_ref()?.digest()
    }
    fn digest_mut(&mut self) -> Option<&mut Digest> {
        self.inner.as_mut()?.digest_mut()
    }
    fn client_addr(&self) -> Option<&SocketAddr> {
        self.inner.as_ref()?.client_addr()
    }
    fn server_addr(&self) -> Option<&SocketAddr> {
        self.inner.as_ref()?.server_addr()
    }
    fn pseudo_raw_h1_request_header(&self) -> Bytes {
        self.inner
            .as_ref()
            .map(|s| s.to_h1_raw())
            .unwrap_or_default()
    }
    fn enable_retry_buffering(&mut self) {}
    fn retry_buffer_truncated(&self) -> bool {
        false
    }
    fn get_retry_buffer(&self) -> Option<Bytes> {
        self.body.get()
    }
    async fn finish_custom(&mut self) -> Result<()> {
        // Taken, not swapped for a stand-in: nothing uses this `Replay` after the hand-back.
        if let Some(tx) = self.handback.take() {
            if let Some(real) = self.inner.take() {
                // The receiver lives in the request context; if it is gone there is nobody
                // to hand the session to and dropping it closes the connection, which is safe.
                let _ = tx.send(real);
            }
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

#[cfg(test)]
mod tests;
