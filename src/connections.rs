//! `limits.max_connections`: a listener closes new client connections at once while it
//! holds that many (a slowloris client holds a connection until Pingora's per-read timeout).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;
use async_trait::async_trait;
use pingora::apps::ServerApp;
use pingora::protocols::Stream;
use pingora::server::ShutdownWatch;

use crate::metrics;
use crate::runtime::Runtime;

/// Wraps a listener's app and counts the connections it is serving.
pub struct ConnectionLimit<A> {
    inner: Arc<A>,
    runtime: Arc<ArcSwap<Runtime>>,
    open: AtomicUsize,
}

impl<A> ConnectionLimit<A> {
    pub fn new(inner: A, runtime: Arc<ArcSwap<Runtime>>) -> Self {
        ConnectionLimit {
            inner: Arc::new(inner),
            runtime,
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
        let max = self.runtime.load().limits.max_connections;
        let before = self.open.fetch_add(1, Ordering::AcqRel);
        let _open = Open(&self.open);
        if before >= max {
            metrics::get().edge_error(crate::error::ErrorKind::Overloaded);
            // Dropping the stream closes the connection.
            return None;
        }
        self.inner.process_new(session, shutdown).await
    }

    async fn cleanup(&self) {
        self.inner.cleanup().await
    }
}
