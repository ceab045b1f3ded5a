//! Client connections before Pingora sees them.
//!
//! - `limits.max_connections`: a listener closes new connections at once while it holds that
//!   many.
//! - The memory budget: every connection reserves what it costs ([`CONNECTION_COST`]); when
//!   the budget is full the oldest stalled connections are closed for room, else the new one
//!   is.
//! - `timeouts.request_head_ms`: the first request head must be complete this long after
//!   accept. Pingora 0.9.1 bounds each read of a head, not the whole head, so a client that
//!   dribbles a byte at a time would hold the connection for ever. The edge reads the first
//!   head itself, before it hands the connection to Pingora (the bytes are given back with
//!   `Stream::rewind`, the hook Pingora keeps for protocol detection). Until then a
//!   connection costs a few KiB instead of Pingora's session state.
//! - TLS listeners: the edge runs the handshake itself, under the same deadline and memory
//!   watch, so a slow or stalled handshake holds no more than a stalled head and a flood of
//!   them cannot keep other clients out. Plain HTTP sent to a TLS port gets a readable 400
//!   (`tls_required`). The first head is then read through the TLS stream the same way as on
//!   a plain connection, by the same deadline (from accept), and given back with
//!   [`Rewound`]; an HTTP/2 client's preface likewise.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use async_trait::async_trait;
use pingora::apps::ServerApp;
use pingora::listeners::tls::Acceptor;
use pingora::protocols::l4::stream::Stream as TcpStream;
use pingora::protocols::{Stream, ALPN};
use pingora::server::ShutdownWatch;
use tokio::io::{AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::error::{EdgeError, ErrorKind};
use crate::metrics::{self, HandshakeFailure};
use crate::net::budget::{Budget, Eviction, Holder, Watch, CONNECTION_COST, TLS_HANDSHAKE_COST};
use crate::net::rewind::{Rewind, Rewound};
use crate::runtime::Runtime;

/// Wraps a listener's app: counts its connections, reserves their memory and reads each
/// one's first request head within the deadline.
pub struct ConnectionLimit<A> {
    inner: Arc<A>,
    runtime: Arc<ArcSwap<Runtime>>,
    budget: Arc<Budget>,
    /// The listener accepts HTTP/2 with prior knowledge.
    h2c: bool,
    /// A TLS listener's handshake.
    tls: Option<Acceptor>,
    open: AtomicUsize,
}

impl<A> ConnectionLimit<A> {
    pub fn new(
        inner: A,
        runtime: Arc<ArcSwap<Runtime>>,
        budget: Arc<Budget>,
        h2c: bool,
        tls: Option<Acceptor>,
    ) -> Self {
        ConnectionLimit {
            inner: Arc::new(inner),
            runtime,
            budget,
            h2c,
            tls,
            open: AtomicUsize::new(0),
        }
    }
}

impl<A> ConnectionLimit<A> {
    /// The connection's first request head (after the TLS handshake on a TLS listener), and
    /// whether it is HTTP/2; `None` when it did not come in time or the connection closed.
    async fn first_head(&self, session: Stream, head: &Head) -> Option<(Stream, bool)> {
        match &self.tls {
            Some(acceptor) => {
                // Boxed: the handshake's state is large, and this future lives as long as
                // the connection (an idle stream would carry it).
                let tls = tls_first_head(
                    session,
                    acceptor,
                    &self.budget,
                    head.deadline,
                    head.max_bytes,
                );
                Box::pin(tls).await
            }
            None => {
                let mut stream = *session.into_any().downcast::<TcpStream>().ok()?;
                // Boxed like the TLS one: its read buffer must not ride in this future for
                // the connection's life.
                let http2 = Box::pin(first_head(&mut stream, &self.budget, head)).await?;
                Some((Box::new(stream), http2))
            }
        }
    }
}

struct Open<'a>(&'a AtomicUsize);

impl Drop for Open<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

#[async_trait]
impl<A: ServerApp + Send + Sync + 'static> ServerApp for ConnectionLimit<A> {
    async fn process_new(
        self: &Arc<Self>,
        session: Stream,
        shutdown: &ShutdownWatch,
    ) -> Option<Stream> {
        // Read what the connection needs and let the configuration go: a connection must not
        // keep a replaced configuration (and the stdio processes of a pool a reload dropped)
        // alive for as long as the client keeps it open.
        let (head_deadline, max_connections, max_header_bytes) = {
            let snapshot = self.runtime.load();
            self.budget.set_limit(snapshot.limits.memory_budget);
            (
                tokio::time::Instant::now() + snapshot.timeouts.request_head,
                snapshot.limits.max_connections,
                snapshot.limits.max_header_bytes,
            )
        };
        let before = self.open.fetch_add(1, Ordering::AcqRel);
        let _open = Open(&self.open);
        if before >= max_connections {
            metrics::get().edge_error(ErrorKind::Overloaded);
            // Dropping the stream closes the connection.
            return None;
        }
        let _room = self
            .budget
            .reserve(Holder::Connection, CONNECTION_COST)
            .await?;
        let head = Head {
            deadline: head_deadline,
            max_bytes: max_header_bytes,
            h2_preface: self.h2c,
        };
        let (session, http2) = self.first_head(session, &head).await?;
        if http2 {
            // Its streams run in tasks of their own: no per-request marks reach it here.
            return self.inner.process_new(session, shutdown).await;
        }
        // Between requests a kept-alive connection may be closed for room; `request_started`
        // and `request_ended` (called by the proxy, in this task) say when it is busy.
        let idle = Arc::new(self.budget.watch(Eviction::IdleConnection));
        idle.candidate().busy();
        let serve = CONNECTION.scope(idle.clone(), self.inner.process_new(session, shutdown));
        tokio::select! {
            r = serve => r,
            _ = idle.candidate().evicted() => None,
        }
    }

    async fn cleanup(&self) {
        self.inner.cleanup().await
    }
}

/// The HTTP/2 connection preface: Pingora's h2c detection reads this many bytes at once.
const H2_PREFACE_LEN: usize = 24;
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0";

tokio::task_local! {
    /// The kept-alive HTTP/1 connection this task serves.
    static CONNECTION: Arc<Watch>;
}

/// A request started on this task's connection (the proxy's `request_filter`).
pub fn request_started() {
    let _ = CONNECTION.try_with(|c| c.candidate().busy());
}

/// The request ended (the proxy's `logging`): the connection is idle until the next one.
pub fn request_ended() {
    let _ = CONNECTION.try_with(|c| c.candidate().idle());
}

/// How the first head is read.
struct Head {
    /// Complete by then (from accept), or the connection closes.
    deadline: tokio::time::Instant,
    /// Larger: 431.
    max_bytes: usize,
    /// The client may speak HTTP/2 (h2c, or h2 by ALPN): read at least the 24-byte preface.
    h2_preface: bool,
}

/// Read until the first request head is complete, then give the bytes back to the stream for
/// Pingora. `None`: the connection is to be closed (the client left, the deadline passed,
/// the head was too large — answered 431 — or the budget needed the room); `Some(true)`:
/// the client speaks HTTP/2.
async fn first_head<S: Rewind>(stream: &mut S, budget: &Arc<Budget>, at: &Head) -> Option<bool> {
    let watch = budget.watch(Eviction::StalledHead);
    let mut head = Vec::new();
    let mut chunk = [0u8; 2048];
    loop {
        if head.len() > at.max_bytes {
            too_large(stream, at.max_bytes).await;
            return None;
        }
        let n = tokio::select! {
            r = stream.read(&mut chunk) => r.ok().filter(|n| *n > 0)?,
            _ = tokio::time::sleep_until(at.deadline) => {
                metrics::get().budget.head_timeouts.inc();
                return None;
            }
            _ = watch.candidate().evicted() => return None,
        };
        watch.candidate().progressed();
        // Only the new bytes (and the two before them) can complete the head.
        let from = head.len().saturating_sub(2);
        head.extend_from_slice(&chunk[..n]);
        // Pingora's h2c preface check reads 24 bytes before it looks (and the HTTP/2
        // handshake waits for the preface with no deadline): hand over fewer and it would
        // wait for ever.
        if head_complete(&head, from) && (!at.h2_preface || head.len() >= H2_PREFACE_LEN) {
            break;
        }
    }
    let http2 = head.starts_with(H2_PREFACE);
    stream.rewind(&head);
    Some(http2)
}

/// A TLS listener's connection: the handshake, then the first head read through the TLS
/// stream (given back to Pingora by `Rewound`), both by the same deadline.
async fn tls_first_head(
    session: Stream,
    acceptor: &Acceptor,
    budget: &Arc<Budget>,
    deadline: tokio::time::Instant,
    max_bytes: usize,
) -> Option<(Stream, bool)> {
    let handshaking = budget
        .reserve(Holder::Connection, TLS_HANDSHAKE_COST)
        .await?;
    let tls = handshake(session, acceptor, budget, deadline).await?;
    drop(handshaking);
    let h2 = tls.selected_alpn_proto() == Some(ALPN::H2);
    let mut stream = Rewound::new(tls);
    let head = Head {
        deadline,
        max_bytes,
        h2_preface: h2,
    };
    let http2 = first_head(&mut stream, budget, &head).await?;
    Some((Box::new(stream), http2))
}

/// The first byte of a TLS connection: a handshake record.
const TLS_HANDSHAKE_RECORD: u8 = 0x16;

/// Run a TLS listener's handshake by `deadline` (from accept). `None`: closed (plain HTTP
/// — answered 400 —, the deadline, a failed handshake, or the budget needed the room), each
/// counted once.
async fn handshake(
    session: Stream,
    acceptor: &Acceptor,
    budget: &Arc<Budget>,
    deadline: tokio::time::Instant,
) -> Option<Stream> {
    let mut stream = *session.into_any().downcast::<TcpStream>().ok()?;
    let watch = budget.watch(Eviction::StalledHead);
    let m = metrics::get();
    let mut first = [0u8; 1];
    let read = tokio::select! {
        r = stream.read(&mut first) => r.ok().filter(|n| *n > 0),
        _ = tokio::time::sleep_until(deadline) => {
            m.handshake_failure(HandshakeFailure::Timeout);
            return None;
        }
        _ = watch.candidate().evicted() => {
            m.handshake_failure(HandshakeFailure::Evicted);
            return None;
        }
    };
    read?;
    watch.candidate().progressed();
    if first[0] != TLS_HANDSHAKE_RECORD {
        m.handshake_failure(HandshakeFailure::PlainHttp);
        // What nginx does there too; the request is not read further.
        answer_and_close(&mut stream, "400 Bad Request", EdgeError::TlsRequired).await;
        drain_before_close(&mut stream).await;
        return None;
    }
    stream.rewind(&first);
    tokio::select! {
        r = acceptor.tls_handshake(stream) => match r {
            Ok(tls) => Some(Box::new(tls)),
            Err(e) => {
                log::debug!("TLS handshake failed: {e}");
                m.handshake_failure(HandshakeFailure::Failed);
                None
            }
        },
        _ = tokio::time::sleep_until(deadline) => {
            m.handshake_failure(HandshakeFailure::Timeout);
            None
        }
        _ = watch.candidate().evicted() => {
            m.handshake_failure(HandshakeFailure::Evicted);
            None
        }
    }
}

/// The bytes from `from` on end a request head: a blank line after a request line (bare LF
/// line ends count, as for the HTTP parser; leading empty lines do not start a head). An
/// HTTP/2 preface ends the same way.
fn head_complete(bytes: &[u8], from: usize) -> bool {
    let Some(start) = bytes.iter().position(|b| *b != b'\r' && *b != b'\n') else {
        return false;
    };
    let window = &bytes[start.max(from)..];
    window.windows(2).any(|w| w == b"\n\n") || window.windows(3).any(|w| w == b"\n\r\n")
}

/// 431 for a first head larger than `limits.max_header_bytes`, then close.
async fn too_large<S: AsyncWrite + Unpin>(stream: &mut S, limit: usize) {
    let error = EdgeError::HeadersTooLarge { limit };
    answer_and_close(stream, "431 Request Header Fields Too Large", error).await;
}

/// Read what the client still sends (a bounded amount, briefly) before closing, so that
/// the close is not a reset that could destroy the answer before the client reads it.
async fn drain_before_close(stream: &mut TcpStream) {
    let mut sink = [0u8; 4096];
    let mut left = 64 * 1024usize;
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        while left > 0 {
            match stream.read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(n) => left = left.saturating_sub(n),
            }
        }
    })
    .await;
}

/// Write an edge error as a whole HTTP/1.1 response before Pingora has the connection
/// (counted like every edge error; the body and headers are [`EdgeError::body`]'s and
/// [`EdgeError::headers`]', as the error boundary writes them); the caller then closes it.
async fn answer_and_close<S: AsyncWrite + Unpin>(stream: &mut S, status: &str, error: EdgeError) {
    metrics::get().edge_error(error.kind());
    let body = error.body(None);
    let mut head = format!(
        "HTTP/1.1 {status}\r\ncontent-type: {}\r\ncontent-length: {}\r\nconnection: close\r\n",
        crate::mcp::media::JSON,
        body.len()
    );
    for (name, value) in error.headers() {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(&body).await?;
        stream.flush().await
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::head_complete;

    #[test]
    fn heads_end_at_the_blank_line() {
        assert!(head_complete(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n", 0));
        assert!(head_complete(b"GET / HTTP/1.1\nhost: x\n\n", 0), "bare LF");
        assert!(head_complete(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 0));
        assert!(!head_complete(b"POST /mcp HTTP/1.1\r\nHost: x\r\n", 0));
        assert!(!head_complete(b"", 0));
        assert!(
            !head_complete(b"\r\n\r\n\r\n", 0),
            "leading empty lines are no head"
        );
        assert!(!head_complete(b"\r\n\r\nGET / HTTP/1.1\r\n", 0));
        assert!(head_complete(b"x\r\n\r\n", 1), "the end may straddle reads");
    }
}
