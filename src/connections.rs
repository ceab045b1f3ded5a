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

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use async_trait::async_trait;
use pingora::apps::ServerApp;
use pingora::protocols::l4::stream::Stream as TcpStream;
use pingora::protocols::Stream;
use pingora::server::ShutdownWatch;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::budget::{Budget, Eviction, Holder, Watch, CONNECTION_COST};
use crate::error::{EdgeError, ErrorKind, ERROR_HEADER};
use crate::metrics;
use crate::runtime::Runtime;

/// Wraps a listener's app: counts its connections, reserves their memory and reads each
/// one's first request head within the deadline.
pub struct ConnectionLimit<A> {
    inner: Arc<A>,
    runtime: Arc<ArcSwap<Runtime>>,
    budget: Arc<Budget>,
    /// The listener accepts HTTP/2 with prior knowledge.
    h2c: bool,
    open: AtomicUsize,
}

impl<A> ConnectionLimit<A> {
    pub fn new(inner: A, runtime: Arc<ArcSwap<Runtime>>, budget: Arc<Budget>, h2c: bool) -> Self {
        ConnectionLimit {
            inner: Arc::new(inner),
            runtime,
            budget,
            h2c,
            open: AtomicUsize::new(0),
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
        let snapshot = self.runtime.load_full();
        self.budget.set_limit(snapshot.limits.memory_budget);
        let before = self.open.fetch_add(1, Ordering::AcqRel);
        let _open = Open(&self.open);
        if before >= snapshot.limits.max_connections {
            metrics::get().edge_error(ErrorKind::Overloaded);
            // Dropping the stream closes the connection.
            return None;
        }
        let _room = self
            .budget
            .reserve(Holder::Connection, CONNECTION_COST)
            .await?;
        let t = &snapshot;
        let (session, http2) = first_head(
            session,
            &self.budget,
            t.timeouts.request_head,
            t.limits.max_header_bytes,
            self.h2c,
        )
        .await?;
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

/// Read until the first request head is complete, then give the bytes back to the stream for
/// Pingora. `None`: the connection is to be closed (the client left, the deadline passed,
/// the head was too large — answered 431 — or the budget needed the room); `true` beside
/// the stream: the client speaks HTTP/2.
async fn first_head(
    session: Stream,
    budget: &Arc<Budget>,
    deadline: Duration,
    max_bytes: usize,
    h2c: bool,
) -> Option<(Stream, bool)> {
    if !session.as_any().is::<TcpStream>() {
        // Not a plain TCP stream (TLS, say): Pingora's own reads apply.
        return Some((session, true));
    }
    let mut stream = session.into_any().downcast::<TcpStream>().ok()?;
    let watch = budget.watch(Eviction::StalledHead);
    let deadline = tokio::time::Instant::now() + deadline;
    let mut head = Vec::new();
    let mut chunk = [0u8; 2048];
    loop {
        if head.len() > max_bytes {
            too_large(&mut stream, max_bytes).await;
            return None;
        }
        let n = tokio::select! {
            r = stream.read(&mut chunk) => r.ok().filter(|n| *n > 0)?,
            _ = tokio::time::sleep_until(deadline) => {
                metrics::get().budget.head_timeouts.inc();
                return None;
            }
            _ = watch.candidate().evicted() => return None,
        };
        watch.candidate().progressed();
        // Only the new bytes (and the two before them) can complete the head.
        let from = head.len().saturating_sub(2);
        head.extend_from_slice(&chunk[..n]);
        // An h2c listener's preface check reads 24 bytes before it looks: hand over fewer
        // and it would wait with no deadline.
        if head_complete(&head, from) && (!h2c || head.len() >= H2_PREFACE_LEN) {
            break;
        }
    }
    let http2 = head.starts_with(H2_PREFACE);
    stream.rewind(&head);
    Some((stream, http2))
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
async fn too_large(stream: &mut TcpStream, limit: usize) {
    let error = EdgeError::HeadersTooLarge { limit };
    metrics::get().edge_error(error.kind());
    let body = error.body(None);
    let head = format!(
        "HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: application/json\r\n{ERROR_HEADER}: {}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        error.kind().as_str(),
        body.len()
    );
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
