//! The export of ended spans: a bounded queue the request path pushes to, and a thread that
//! takes it whole and sends it to the collector in batches.
//!
//! The queue is a vector under a lock held for one push (or one swap, on the export side).
//! The export thread is woken only when a batch is full, a flush is asked for, or the flush
//! interval passes, never per span: on a busy edge that is one wake-up per `batch_spans`
//! spans, where a channel wakes its receiver at every send.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, SyncSender};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::thread::Thread;
use std::time::{Duration, Instant};

use super::{Settings, Span};
use crate::metrics::{self, SpanDrop};
use crate::ops::otlp::Encoder;

/// Ended spans on their way to the export thread.
pub struct Queue {
    spans: Mutex<Vec<Span>>,
    /// Spans held at most; more are dropped.
    capacity: usize,
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
        spans: Mutex::new(Vec::with_capacity(settings.batch_spans)),
        capacity: settings.queue_spans,
        batch: settings.batch_spans,
        woken: AtomicBool::new(false),
        dropping: AtomicBool::new(false),
        flushes: Mutex::new(Vec::new()),
        closed: AtomicBool::new(false),
        thread: OnceLock::new(),
    });
    let batching = Batching {
        flush: settings.flush,
        timeout: settings.export_timeout,
    };
    let theirs = queue.clone();
    let handle = std::thread::Builder::new()
        .name("mcp-edge-trace-export".into())
        .spawn(move || export(&exporter, &theirs, &batching))
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
        let queued = {
            let mut spans = locked(&self.spans);
            if spans.len() < self.capacity {
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

    /// Export what is queued (waiting at most `timeout`) and end the export thread.
    pub fn close(&self, timeout: Duration) {
        if self.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        let (done, wait) = mpsc::sync_channel(1);
        locked(&self.flushes).push(done);
        self.wake();
        let _ = wait.recv_timeout(timeout);
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

    /// Everything queued, leaving the queue empty.
    fn take(&self) -> Vec<Span> {
        let fresh = Vec::with_capacity(self.batch);
        std::mem::replace(&mut *locked(&self.spans), fresh)
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
        let flushes = std::mem::take(&mut *locked(&queue.flushes));
        let closed = queue.closed.load(Ordering::Acquire);
        let spans = queue.take();
        for batch in spans.chunks(queue.batch.max(1)) {
            send(&runtime, exporter, batch, b.timeout, &mut failing);
        }
        drop(spans);
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
