//! The method, and what comes with it: a POST's JSON body read whole before a member is
//! chosen; a GET, DELETE or OPTIONS body read and dropped; anything else 405. A pass-through
//! route takes any method, its body read whole within the same limits.
//!
//! `Content-Type` must be JSON, `Expect: 100-continue` is answered here, and at most
//! `limits.max_body_bytes` are read, with `timeouts.request_body_ms` as the longest gap between
//! reads and, past that long, `limits.min_upload_bytes_per_second` as the slowest average.
//! Every byte held is reserved in the memory budget; an upload that stalls may be closed to
//! make room for others. The body goes to `ctx.request.body`. Whether a route takes a GET or
//! DELETE (a legacy stream, a session's end) is the rules' to say ([`super::rules`]).
//!
//! On the way out: no `Expect` when the edge answered it, no framing header for a body that
//! was read and dropped, and a rewritten body's length.

use std::sync::Arc;
use std::task::Poll;
use std::time::Instant;

use bytes::BytesMut;
use http::Method as HttpMethod;
use pingora::http::RequestHeader;
use pingora::proxy::Session;
use pingora::ErrorType;

use crate::error::{EdgeError, Rejection};
use crate::mcp::media;
use crate::net::budget::{Budget, Eviction, Holder, Reservation, Watch};
use crate::proxy::body::Body;
use crate::proxy::stage::{Admission, Flow, Outbound, Stage};
use crate::runtime::{EndpointKind, Runtime};

#[derive(Default)]
pub struct State {
    /// The edge answered `Expect: 100-continue` itself.
    pub answered_continue: bool,
}

pub struct Method;

impl Stage for Method {
    const NAME: &'static str = "method";

    async fn request(a: &mut Admission<'_>) -> Result<Flow, Rejection> {
        let Some(endpoint) = a.ctx.request.endpoint.clone() else {
            return Ok(Flow::Next);
        };
        let method = a.session.req_header().method.clone();
        let not_allowed = || EdgeError::MethodNotAllowed {
            method: method.to_string(),
            allow: super::route::allowed_methods(&endpoint),
        };
        match (endpoint.kind, &method) {
            (EndpointKind::Passthrough, _) => a.ctx.request.body = read_any(a).await?,
            (EndpointKind::Streamable | EndpointKind::Messages, &HttpMethod::POST) => {
                a.ctx.request.body = Some(read(a).await?);
            }
            // A stream or a session's end: whether the route takes one is the rules' (they
            // own the era).
            (EndpointKind::Streamable, &HttpMethod::GET | &HttpMethod::DELETE)
            | (EndpointKind::SseStream, &HttpMethod::GET) => discard(a).await?,
            (_, &HttpMethod::OPTIONS) => discard(a).await?,
            _ => return Err(not_allowed().into()),
        }
        Ok(Flow::Next)
    }

    fn upstream_request(o: &mut Outbound<'_>) -> pingora::Result<()> {
        if o.ctx.stages.method.answered_continue {
            o.head.remove_header(&http::header::EXPECT);
        }
        if o.ctx.stored.is_empty() {
            // Nothing will follow the head (a body of a GET, DELETE or OPTIONS was read and
            // dropped): no framing header may promise bytes.
            o.head.remove_header(&http::header::CONTENT_LENGTH);
            o.head.remove_header(&http::header::TRANSFER_ENCODING);
        } else if let Some(len) = o.ctx.stored.rewritten_len() {
            if o.head.headers.contains_key(http::header::CONTENT_LENGTH) {
                o.head
                    .insert_header(http::header::CONTENT_LENGTH, len.to_string())?;
            }
        }
        Ok(())
    }
}

const BUDGET_FULL: EdgeError = EdgeError::Overloaded {
    limit: "memory budget",
};

/// A POST's body: JSON, read whole.
async fn read(a: &mut Admission<'_>) -> Result<Body, EdgeError> {
    check_content_type(a.session.req_header())?;
    start_reading(a).await?;
    read_all(a.session, &a.ctx.snapshot, &a.edge.load.budget).await
}

/// Answer `Expect: 100-continue` (the client waits for it before it sends the body) and
/// bound the gaps between body reads.
async fn start_reading(a: &mut Admission<'_>) -> Result<(), EdgeError> {
    let session = &mut *a.session;
    if expects_continue(session.req_header()) {
        a.ctx.stages.method.answered_continue = true;
        session
            .downstream_session
            .write_continue_response()
            .await
            .map_err(|e| EdgeError::ClientError {
                detail: e.to_string(),
            })?;
    }
    let timeouts = a.ctx.snapshot.timeouts;
    session
        .downstream_session
        .set_read_timeout(Some(timeouts.request_body));
    Ok(())
}

/// A pass-through request's body, whatever its type: read whole within the same limits
/// (so that it can be sent again after a refused connection), or `None` when it has none.
async fn read_any(a: &mut Admission<'_>) -> Result<Option<Body>, EdgeError> {
    if a.session.downstream_session.is_body_empty() {
        return Ok(None);
    }
    start_reading(a).await?;
    let budget = &a.edge.load.budget;
    read_all(a.session, &a.ctx.snapshot, budget).await.map(Some)
}

/// A GET, DELETE or OPTIONS that came with a body: read it (within the same limits) and
/// drop it. It is never forwarded (`upstream_request_filter` drops its framing headers), and
/// reading it keeps the client connection in step for its next request.
pub async fn discard(a: &mut Admission<'_>) -> Result<(), EdgeError> {
    if a.session.downstream_session.is_body_empty() {
        return Ok(());
    }
    start_reading(a).await?;
    read_all(a.session, &a.ctx.snapshot, &a.edge.load.budget).await?;
    Ok(())
}

/// Read the whole request body, refusing more than `limits.max_body_bytes`.
async fn read_all(
    session: &mut Session,
    snapshot: &Runtime,
    budget: &Arc<Budget>,
) -> Result<Body, EdgeError> {
    let limit = snapshot.limits.max_body_bytes;
    let declared = session
        .req_header()
        .headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<usize>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(EdgeError::BodyTooLarge { limit });
    }
    let room = budget.reserve(Holder::Body, 0).await.ok_or(BUDGET_FULL)?;
    let mut body = Growing {
        buf: BytesMut::new(),
        room,
        reserved: 0,
        declared,
        limit,
    };
    // Registered as a stalled-upload candidate only once a read has to wait: a body that
    // came with its head (most do) is read without it. (Candidates are closed oldest first by
    // registration, so an upload ranks by its first wait.)
    let mut watch: Option<Watch> = None;
    let pace = Pace::new(snapshot);
    loop {
        match next_chunk(session, &mut watch, budget).await? {
            Ok(Some(chunk)) => {
                body.take(&chunk).await?;
                if let Some(watch) = &watch {
                    watch.candidate().progressed();
                }
                pace.check(body.buf.len())?;
            }
            Ok(None) => return Ok(Body::new(body.buf.freeze(), body.room)),
            Err(e) if e.etype() == &ErrorType::ReadTimedout => return Err(EdgeError::BodyTimeout),
            Err(e) => {
                return Err(EdgeError::ClientError {
                    detail: e.to_string(),
                })
            }
        }
    }
}

/// The next read of the body; an upload whose read waits becomes a candidate for closing
/// to make room (`watch`), and one told to close stops even though the client keeps sending.
async fn next_chunk(
    session: &mut Session,
    watch: &mut Option<Watch>,
    budget: &Arc<Budget>,
) -> Result<pingora::Result<Option<bytes::Bytes>>, EdgeError> {
    let reading = session.downstream_session.read_request_body();
    tokio::pin!(reading);
    match futures::poll!(&mut reading) {
        Poll::Ready(_) if watch.as_ref().is_some_and(Watch::is_evicted) => Err(BUDGET_FULL),
        Poll::Ready(r) => Ok(r),
        Poll::Pending => {
            let watch = watch.get_or_insert_with(|| budget.watch(Eviction::StalledUpload));
            tokio::select! {
                r = &mut reading => Ok(r),
                _ = watch.candidate().evicted() => Err(BUDGET_FULL),
            }
        }
    }
}

/// A body as it arrives, and the room it holds in the budget.
struct Growing {
    buf: BytesMut,
    room: Reservation,
    reserved: usize,
    declared: Option<usize>,
    limit: usize,
}

impl Growing {
    /// Take one chunk. The buffer grows by doubling with what has arrived (never to what the
    /// client only declared: a trickle must not hold 4 MiB); once a quarter of the declared
    /// length is here it takes the rest at once (no last copy of a half-size buffer). The
    /// budget holds what the buffer holds.
    async fn take(&mut self, chunk: &[u8]) -> Result<(), EdgeError> {
        let (buf, limit) = (&mut self.buf, self.limit);
        if buf.len() + chunk.len() > limit {
            return Err(EdgeError::BodyTooLarge { limit });
        }
        let needed = buf.len() + chunk.len();
        if needed > buf.capacity() {
            let ceiling = self.declared.unwrap_or(limit).clamp(needed, limit);
            let capacity = match self.declared {
                Some(_) if needed * 4 >= ceiling => ceiling,
                _ => needed.max(buf.capacity() * 2).min(ceiling),
            };
            if capacity > self.reserved {
                if !self.room.grow(capacity - self.reserved).await {
                    return Err(BUDGET_FULL);
                }
                self.reserved = capacity;
            }
            buf.reserve(capacity - buf.len());
        }
        buf.extend_from_slice(chunk);
        Ok(())
    }
}

/// The slowest an upload may go: after `timeouts.request_body_ms`, it must have averaged
/// `limits.min_upload_bytes_per_second`.
struct Pace {
    started: Instant,
    grace: std::time::Duration,
    rate: usize,
}

impl Pace {
    fn new(snapshot: &Runtime) -> Pace {
        Pace {
            started: Instant::now(),
            grace: snapshot.timeouts.request_body,
            rate: snapshot.limits.min_upload_rate,
        }
    }

    fn check(&self, received: usize) -> Result<(), EdgeError> {
        let elapsed = self.started.elapsed();
        let owed = self.rate as f64 * elapsed.as_secs_f64();
        if elapsed > self.grace && (received as f64) < owed {
            return Err(EdgeError::BodyTimeout);
        }
        Ok(())
    }
}

fn check_content_type(req: &RequestHeader) -> Result<(), EdgeError> {
    let ct = req
        .headers
        .get(http::header::CONTENT_TYPE)
        .map(|v| v.as_bytes())
        .unwrap_or(b"");
    if media::is_json_essence(ct) {
        Ok(())
    } else {
        Err(EdgeError::UnsupportedMediaType {
            content_type: String::from_utf8_lossy(ct).chars().take(100).collect(),
        })
    }
}

fn expects_continue(req: &RequestHeader) -> bool {
    req.headers
        .get(http::header::EXPECT)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"))
}
