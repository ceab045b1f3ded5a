//! The export of ended spans: a bounded queue the request path pushes to, and a thread that
//! takes it whole and sends it to the collector in batches.
//!
//! The queue is a vector under a lock held for one push (or one swap, on the export side).
//! The export thread is woken only when a batch is full, a flush is asked for, or the flush
//! interval passes, never per span: on a busy edge that is one wake-up per `batch_spans`
//! spans, where a channel wakes its receiver at every send. The spans the thread has taken
//! and not yet sent count against `queue_spans` too: memory stays bounded while a collector
//! stalls every export.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{self, SyncSender};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::thread::Thread;
use std::time::{Duration, Instant};

use super::otlp::Encoder;
use super::{Settings, Span};
use crate::metrics::{self, SpanDrop};

/// Ended spans on their way to the export thread.
pub struct Queue {
    spans: Mutex<Vec<Span>>,
    /// Spans held at most (queued and taken for export); more are dropped.
    capacity: usize,
    /// Spans the export thread has taken and not yet sent.
    exporting: AtomicUsize,
    /// Spans per export; a push that fills a batch wakes the export thread.
    batch: usize,
    /// The export thread was woken and has not looked yet (one wake-up per batch).
    woken: AtomicBool,
    /// The queue was full (logged once per episode).
    dropping: AtomicBool,
    /// Export what is queued, then answer each of these.
    flushes: Mutex<Vec<SyncSender<()>>>,
    /// No more spans: the export thread exports what is queued and ends.
    closed: AtomicBool,
    /// `close` was called (once is enough).
    closing: AtomicBool,
    /// The export thread has ended (closed, or it could not start its runtime): a span
    /// pushed now is dropped and counted, a flush is not waited for.
    gone: AtomicBool,
    thread: OnceLock<Thread>,
}

/// The queue, and the thread exporting from it.
pub fn start(
    settings: &Settings,
    resource: Vec<(String, String)>,
    scope: &str,
) -> Result<Arc<Queue>, String> {
    let client = reqwest::Client::builder()
        .timeout(settings.export_timeout)
        .build()
        .map_err(|e| format!("the collector's HTTP client: {e}"))?;
    let exporter = Exporter {
        client,
        endpoint: settings.endpoint.clone(),
        encoder: Encoder::new(&resource, scope),
    };
    let queue = Arc::new(Queue {
        spans: Mutex::new(Vec::with_capacity(2 * settings.batch_spans)),
        capacity: settings.queue_spans,
        exporting: AtomicUsize::new(0),
        batch: settings.batch_spans,
        woken: AtomicBool::new(false),
        dropping: AtomicBool::new(false),
        flushes: Mutex::new(Vec::new()),
        closed: AtomicBool::new(false),
        closing: AtomicBool::new(false),
        gone: AtomicBool::new(false),
        thread: OnceLock::new(),
    });
    let batching = Batching {
        flush: settings.flush,
        timeout: settings.export_timeout,
    };
    let theirs = queue.clone();
    let handle = std::thread::Builder::new()
        .name("mcp-edge-trace-export".into())
        .spawn(move || {
            // However the thread ends (a panic included), the queue knows.
            let _gone = Gone(&theirs);
            export(&exporter, &theirs, &batching);
        })
        .map_err(|e| format!("the export thread: {e}"))?;
    let _ = queue.thread.set(handle.thread().clone());
    Ok(queue)
}

/// The lock's contents even after a panic elsewhere (a vector of spans stays whole).
fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Queue {
    /// Queue an ended span, or drop it (counted) when the queue is full.
    pub fn push(&self, span: Span) {
        if self.gone.load(Ordering::Acquire) {
            metrics::get().span_dropped(SpanDrop::ExportFailed, 1);
            if !self.dropping.swap(true, Ordering::Relaxed) {
                log::error!("tracing: the export thread has ended; spans are dropped and counted");
            }
            return;
        }
        let queued = {
            let mut spans = locked(&self.spans);
            if spans.len() + self.exporting.load(Ordering::Relaxed) < self.capacity {
                spans.push(span);
                Some(spans.len())
            } else {
                None
            }
        };
        match queued {
            Some(n) => {
                if n >= self.batch && !self.woken.swap(true, Ordering::AcqRel) {
                    self.wake();
                }
                if self.dropping.load(Ordering::Relaxed)
                    && self.dropping.swap(false, Ordering::Relaxed)
                {
                    log::info!("tracing: the span queue has room again");
                }
            }
            None => {
                metrics::get().span_dropped(SpanDrop::QueueFull, 1);
                if !self.dropping.swap(true, Ordering::Relaxed) {
                    log::warn!("tracing: the span queue is full (the collector is slow or down); spans are dropped and counted");
                }
            }
        }
    }

    /// Export what is queued (waiting at most `timeout`) and end the export thread; whether
    /// the thread said it was done in time.
    pub fn close(&self, timeout: Duration) -> bool {
        if self.closing.swap(true, Ordering::AcqRel) {
            return false;
        }
        let (done, wait) = mpsc::sync_channel(1);
        {
            // Asked before the close is said, under the same lock the thread takes the
            // flushes with: the thread that sees `closed` answers this one. A thread already
            // gone never will (its guard emptied the list and this is not added).
            let mut flushes = locked(&self.flushes);
            if self.gone.load(Ordering::Acquire) {
                return false;
            }
            flushes.push(done);
            self.closed.store(true, Ordering::Release);
        }
        self.wake();
        wait.recv_timeout(timeout).is_ok()
    }

    fn wake(&self) {
        if let Some(t) = self.thread.get() {
            t.unpark();
        }
    }

    /// Whether the export thread has work now: a full batch, a flush asked for, the close.
    fn ready(&self) -> bool {
        self.closed.load(Ordering::Acquire)
            || !locked(&self.flushes).is_empty()
            || locked(&self.spans).len() >= self.batch
    }

    /// Everything queued into `into` (empty; its room is kept for the next pushes), counted
    /// as being exported.
    fn take(&self, into: &mut Vec<Span>) {
        let mut spans = locked(&self.spans);
        std::mem::swap(&mut *spans, into);
        self.exporting.store(into.len(), Ordering::Relaxed);
    }
}

/// Marks the queue's export thread as ended when dropped, answering whoever waits for it.
struct Gone<'a>(&'a Queue);

impl Drop for Gone<'_> {
    fn drop(&mut self) {
        let mut flushes = locked(&self.0.flushes);
        self.0.gone.store(true, Ordering::Release);
        // Dropping the senders ends every wait at once.
        flushes.clear();
        drop(flushes);
        // What was queued and will never be sent (pushed after the last take, or all of it
        // when the thread could not start its runtime) is counted.
        let left = std::mem::take(&mut *locked(&self.0.spans)).len();
        if left > 0 {
            metrics::get().span_dropped(SpanDrop::ExportFailed, left as u64);
        }
    }
}

/// How the export thread batches.
struct Batching {
    flush: Duration,
    timeout: Duration,
}

/// The export thread: what is queued, in batches, to the collector, until the queue closes.
fn export(exporter: &Exporter, queue: &Queue, b: &Batching) {
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        log::error!("tracing: cannot start the export runtime; spans are dropped");
        // The queue fills and drops (counted) from here on.
        return;
    };
    let mut failing = false;
    // The queue's other buffer: swapped in whole, emptied after the export, room kept.
    let mut spans = Vec::with_capacity(2 * queue.batch);
    loop {
        let deadline = Instant::now() + b.flush;
        loop {
            // Cleared before looking: a push after the look wakes the park below.
            queue.woken.store(false, Ordering::Release);
            if queue.ready() {
                break;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            std::thread::park_timeout(left);
        }
        let (flushes, closed) = {
            let mut flushes = locked(&queue.flushes);
            (
                std::mem::take(&mut *flushes),
                queue.closed.load(Ordering::Acquire),
            )
        };
        queue.take(&mut spans);
        for batch in spans.chunks(queue.batch.max(1)) {
            send(&runtime, exporter, batch, b.timeout, &mut failing);
        }
        spans.clear();
        queue.exporting.store(0, Ordering::Relaxed);
        for done in flushes {
            let _ = done.try_send(());
        }
        if closed {
            return;
        }
    }
}

/// One export, bounded; a failure drops the batch (counted, logged once per episode).
fn send(
    runtime: &tokio::runtime::Runtime,
    exporter: &Exporter,
    spans: &[Span],
    timeout: Duration,
    failing: &mut bool,
) {
    let n = spans.len() as u64;
    let body = exporter.encoder.encode(spans);
    let result =
        runtime.block_on(async { tokio::time::timeout(timeout, exporter.post(body)).await });
    let m = metrics::get();
    match result {
        Ok(Ok(())) => {
            m.span_exported(n);
            if std::mem::take(failing) {
                log::info!("tracing: the collector takes spans again");
            }
        }
        Ok(Err(e)) => {
            m.span_dropped(SpanDrop::ExportFailed, n);
            if !std::mem::replace(failing, true) {
                log::warn!("tracing: exporting spans failed ({e}); spans are dropped and counted until an export works");
            }
        }
        Err(_) => {
            m.span_dropped(SpanDrop::ExportFailed, n);
            if !std::mem::replace(failing, true) {
                log::warn!(
                    "tracing: exporting spans failed (no answer within {} ms); spans are dropped and counted until an export works",
                    timeout.as_millis()
                );
            }
        }
    }
}

/// Where the batches go: the collector's traces URL, over the edge's own reqwest (rustls;
/// its timeout bounds the whole exchange).
struct Exporter {
    client: reqwest::Client,
    endpoint: String,
    encoder: Encoder,
}

impl Exporter {
    /// One export: 2xx is taken; anything else (a refusal, a partial failure's 4xx/5xx) is
    /// a failure.
    async fn post(&self, body: Vec<u8>) -> Result<(), String> {
        let resp = self
            .client
            .post(&self.endpoint)
            .header(http::header::CONTENT_TYPE, "application/x-protobuf")
            .body(body)
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let status = resp.status();
        // The answer is a few bytes (an empty or partial-success message): not read.
        drop(resp);
        if status.is_success() {
            Ok(())
        } else {
            Err(format!("the collector answered {status}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::tracing::{Parent, Sampler};
    use opentelemetry::trace::SpanKind;
    use std::time::SystemTime;

    fn settings(endpoint: String, queue_spans: usize, batch_spans: usize) -> Settings {
        Settings {
            endpoint,
            sample_ratio: 1.0,
            queue_spans,
            batch_spans,
            flush: Duration::from_millis(20),
            export_timeout: Duration::from_secs(30),
            service_name: "test".into(),
        }
    }

    fn span() -> Span {
        let all = Sampler::ratio(1.0);
        Span::start(all, Parent::Root, SpanKind::Server, "s", SystemTime::now())
    }

    /// Wait for `done` to hold (another thread makes it true), at most 30 s.
    fn until(what: &str, done: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !done() {
            assert!(Instant::now() < deadline, "waited 30 s for: {what}");
            std::thread::yield_now();
        }
    }

    fn held(q: &Queue) -> usize {
        locked(&q.spans).len() + q.exporting.load(Ordering::Relaxed)
    }

    #[test]
    fn close_is_answered_and_a_span_after_it_is_not_kept() {
        // A collector that refuses: every export fails at once.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .unwrap()
            .port();
        let q = start(
            &settings(format!("http://127.0.0.1:{port}/v1/traces"), 64, 4),
            Vec::new(),
            "s",
        )
        .unwrap();
        for _ in 0..10 {
            q.push(span());
        }
        assert!(
            q.close(Duration::from_secs(60)),
            "the export thread answers the close"
        );
        // It answers, then ends.
        until("the export thread ends", || q.gone.load(Ordering::Acquire));
        assert!(!q.close(Duration::from_secs(60)), "once is enough");
        q.push(span());
        assert_eq!(held(&q), 0, "nothing is kept for a thread that has ended");
    }

    #[test]
    fn a_stalled_collector_holds_at_most_queue_spans() {
        // A collector that takes the connection and never answers.
        let stalled = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = stalled.local_addr().unwrap().port();
        let q = start(
            &settings(format!("http://127.0.0.1:{port}/v1/traces"), 8, 4),
            Vec::new(),
            "s",
        )
        .unwrap();
        // The first full batch is taken and stalls in its export.
        for _ in 0..4 {
            q.push(span());
        }
        until("the batch is taken", || {
            q.exporting.load(Ordering::Relaxed) > 0
        });
        for _ in 0..100 {
            q.push(span());
            assert!(held(&q) <= 8, "{} held", held(&q));
        }
        assert_eq!(held(&q), 8, "the queue filled to its bound, and no further");
        drop(stalled);
    }
}
