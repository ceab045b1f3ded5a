//! A bridged HTTP+SSE client's stream, held by the edge: its head, the `endpoint` event,
//! then every event queued for it (see [`crate::session::streams`]).

use std::time::Duration;

use bytes::Bytes;
use pingora::http::ResponseHeader;
use pingora::proxy::Session;

use crate::mcp::media;
use crate::metrics::{self, BridgedStream};
use crate::proxy::ctx::Ctx;
use crate::proxy::edge::Edge;
use crate::proxy::stage;
use crate::session::streams::Opened;

/// A held stream's keep-alive comment, written when nothing else was for this long (it also
/// finds a client that went away without closing).
const KEEPALIVE: Duration = Duration::from_secs(15);
/// The longest one write to the client may take (a client not reading: its stream, and
/// what is queued for it, go).
const WRITE_TIMEOUT: Duration = Duration::from_secs(60);

/// A stream the edge holds for a client, once the request is admitted.
pub struct HeldStream {
    opened: Opened,
    /// The `endpoint` event's URL (the messages path with the client's token).
    endpoint: String,
    /// The token's life (`[sessions] max_age_seconds`).
    max_age: Duration,
}

impl stage::Held for HeldStream {
    fn head(&self, session: &Session) -> pingora::Result<ResponseHeader> {
        stream_head(session)
    }

    fn hold<'a>(
        self: Box<Self>,
        head: ResponseHeader,
        session: &'a mut Session,
        ctx: &'a mut Ctx,
        edge: &'a Edge,
    ) -> futures::future::BoxFuture<'a, ()> {
        Box::pin(hold(head, session, ctx, edge, self))
    }
}

impl HeldStream {
    pub(super) fn new(opened: Opened, endpoint: String, max_age: Duration) -> HeldStream {
        HeldStream {
            opened,
            endpoint,
            max_age,
        }
    }
}

/// Hold the client's stream: its head, the `endpoint` event, then every event queued for
/// it, until the client goes, the edge shuts down, or the client stops reading.
async fn hold(
    head: ResponseHeader,
    session: &mut Session,
    ctx: &mut Ctx,
    edge: &Edge,
    held: Box<HeldStream>,
) {
    let HeldStream {
        mut opened,
        endpoint,
        max_age,
    } = *held;
    session
        .downstream_session
        .set_write_timeout(Some(WRITE_TIMEOUT));
    let first = Bytes::from(crate::mcp::sse::endpoint_event(&endpoint));
    // Counted with the event streams members hold open (`mcp_edge_active_sse_streams`).
    let _open = OpenStream::count(ctx.labels.era);
    if session
        .write_response_header(Box::new(head), false)
        .await
        .is_err()
        || session
            .write_response_body(Some(first), false)
            .await
            .is_err()
    {
        return;
    }
    metrics::get().bridged_stream(BridgedStream::Opened);
    if pass(session, &mut opened, edge, max_age).await.is_err() {
        ctx.client_closed = true;
        return;
    }
    let _ = session.write_response_body(None, true).await;
}

/// Every event queued for the stream, until the client goes (a write fails: `Err`), the edge
/// shuts down, the token expires, or the client stops reading.
async fn pass(
    session: &mut Session,
    opened: &mut Opened,
    edge: &Edge,
    max_age: Duration,
) -> pingora::Result<()> {
    let mut cutoff = edge.cutoff.clone();
    // The stream ends when its token does: its POSTs would no longer open.
    let expiry = tokio::time::sleep(max_age);
    tokio::pin!(expiry);
    enum Next {
        Event(Option<Bytes>),
        Quiet,
        Gone,
    }
    loop {
        let next = tokio::select! {
            event = opened.events.recv() => Next::Event(event),
            _ = tokio::time::sleep(KEEPALIVE) => Next::Quiet,
            _ = session.downstream_session.read_body_or_idle(true) => Next::Gone,
            _ = cutoff.wait_for(|cut| *cut) => Next::Gone,
            _ = &mut expiry => Next::Gone,
        };
        let bytes = match next {
            Next::Event(Some(event)) => {
                opened.taken(event.len());
                event
            }
            Next::Quiet => Bytes::from_static(b": keep-alive\n\n"),
            // Let go (not read) or the client or the edge is going.
            Next::Event(None) | Next::Gone => break,
        };
        session.write_response_body(Some(bytes), false).await?;
    }
    Ok(())
}

/// A held stream in `mcp_edge_active_sse_streams` while it is open.
struct OpenStream(crate::metrics::EraLabel);

impl OpenStream {
    fn count(era: crate::metrics::EraLabel) -> OpenStream {
        metrics::get().sse_streams(era, 1);
        OpenStream(era)
    }
}

impl Drop for OpenStream {
    fn drop(&mut self) {
        metrics::get().sse_streams(self.0, -1);
    }
}

fn stream_head(session: &Session) -> pingora::Result<ResponseHeader> {
    let mut head = ResponseHeader::build(200, Some(4))?;
    head.insert_header(http::header::CONTENT_TYPE, media::EVENT_STREAM)?;
    head.insert_header(http::header::CACHE_CONTROL, "no-cache")?;
    if !session.downstream_session.is_http2() {
        head.insert_header(http::header::TRANSFER_ENCODING, "chunked")?;
    }
    Ok(head)
}
