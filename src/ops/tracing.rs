//! OpenTelemetry traces: the tracer the `trace` stage makes its spans with
//! (`proxy/stages/trace.rs`), and their export to a collector (OTLP over HTTP, protobuf) off
//! the request path.
//!
//! A span that ends goes into a bounded queue ([`Queue`]); a thread of its own takes them in
//! batches to the collector (encoded by [`super::otlp`]), each export bounded by
//! `export_timeout_ms`, never retried. A full
//! queue and a failed export drop spans: both are counted
//! (`mcp_edge_trace_spans_dropped_total{reason}`) and logged once per episode (and once when
//! exports work again). Nothing on the request path waits for the collector: ending a span is
//! a `try_send`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use opentelemetry::trace::TracerProvider as _;
use opentelemetry::KeyValue;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{Sampler, SdkTracer, SdkTracerProvider, SpanData, SpanProcessor};
use opentelemetry_sdk::Resource;

use super::otlp::Encoder;
use crate::metrics::{self, SpanDrop};

/// `[tracing]`, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// The collector's OTLP/HTTP traces URL (`…/v1/traces`).
    pub endpoint: String,
    /// Of the requests that start a trace at the edge, the share traced; a parent's decision
    /// stands for the requests whose trace context the edge continues.
    pub sample_ratio: f64,
    /// Ended spans waiting for export at most; more are dropped.
    pub queue_spans: usize,
    /// Spans per export at most.
    pub batch_spans: usize,
    /// How long spans wait for a batch to fill before it goes anyway.
    pub flush: Duration,
    /// The longest one export may take.
    pub export_timeout: Duration,
    /// `service.name` (also from `OTEL_SERVICE_NAME`).
    pub service_name: String,
}

/// The edge's tracer, and its provider (whose drop ends the export).
pub struct Tracing {
    pub tracer: SdkTracer,
    provider: SdkTracerProvider,
}

impl std::fmt::Debug for Tracing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tracing")
    }
}

impl Tracing {
    /// Export what is queued (waiting at most `timeout`), then stop exporting.
    pub fn shutdown(&self, timeout: Duration) {
        let _ = self.provider.shutdown_with_timeout(timeout);
    }
}

impl Drop for Tracing {
    fn drop(&mut self) {
        let _ = self.provider.shutdown_with_timeout(Duration::from_secs(1));
    }
}

impl Tracing {
    /// The tracer, and the thread that exports what it ends.
    pub fn start(settings: &Settings) -> Result<Arc<Tracing>, String> {
        let client = reqwest::Client::builder()
            .timeout(settings.export_timeout)
            .build()
            .map_err(|e| format!("the collector's HTTP client: {e}"))?;
        let resource = resource(settings);
        let exporter = Exporter {
            client,
            endpoint: settings.endpoint.clone(),
            encoder: Encoder::new(&resource, SCOPE),
        };
        let (tx, rx) = mpsc::sync_channel(settings.queue_spans);
        let batch = Batching {
            batch: settings.batch_spans,
            flush: settings.flush,
            timeout: settings.export_timeout,
        };
        std::thread::Builder::new()
            .name("mcp-edge-trace-export".into())
            .spawn(move || export(exporter, rx, batch))
            .map_err(|e| format!("the export thread: {e}"))?;
        let sampler =
            Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(settings.sample_ratio)));
        let provider = SdkTracerProvider::builder()
            .with_span_processor(Queue {
                tx,
                dropping: AtomicBool::new(false),
            })
            .with_sampler(sampler)
            .with_resource(resource)
            .build();
        let tracer = provider.tracer(SCOPE);
        Ok(Arc::new(Tracing { tracer, provider }))
    }
}

/// The instrumentation scope of the edge's spans.
const SCOPE: &str = "mcp-edge";

/// `service.name`, `service.version`, and where the replica runs (the Kubernetes Downward
/// API's `POD_NAME`, `POD_NAMESPACE`, `NODE_NAME`).
fn resource(settings: &Settings) -> Resource {
    let mut attributes = vec![KeyValue::new("service.version", env!("CARGO_PKG_VERSION"))];
    for (var, key) in [
        ("POD_NAME", "k8s.pod.name"),
        ("POD_NAMESPACE", "k8s.namespace.name"),
        ("NODE_NAME", "k8s.node.name"),
    ] {
        if let Some(v) = std::env::var(var).ok().filter(|v| !v.is_empty()) {
            attributes.push(KeyValue::new(key, v));
        }
    }
    if let Some(pod) = std::env::var("POD_NAME").ok().filter(|v| !v.is_empty()) {
        attributes.push(KeyValue::new("service.instance.id", pod));
    }
    let name = std::env::var("OTEL_SERVICE_NAME")
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| settings.service_name.clone());
    Resource::builder()
        .with_service_name(name)
        .with_attributes(attributes)
        .build()
}

/// What the queue carries to the export thread.
enum Item {
    Span(Box<SpanData>),
    /// Export what is queued now, then say so.
    Flush(SyncSender<()>),
}

/// The span processor: ended spans into the bounded queue, never waiting.
#[derive(Debug)]
struct Queue {
    tx: SyncSender<Item>,
    /// The queue was full (logged once per episode).
    dropping: AtomicBool,
}

impl SpanProcessor for Queue {
    fn on_start(&self, _span: &mut opentelemetry_sdk::trace::Span, _cx: &opentelemetry::Context) {}

    fn on_end(&self, span: SpanData) {
        match self.tx.try_send(Item::Span(Box::new(span))) {
            Ok(()) => {
                if self.dropping.swap(false, Ordering::Relaxed) {
                    log::info!("tracing: the span queue has room again");
                }
            }
            Err(TrySendError::Full(_)) => {
                metrics::get().span_dropped(SpanDrop::QueueFull, 1);
                if !self.dropping.swap(true, Ordering::Relaxed) {
                    log::warn!("tracing: the span queue is full (the collector is slow or down); spans are dropped and counted");
                }
            }
            Err(TrySendError::Disconnected(_)) => {
                // The export thread is gone (it could not start its runtime): said once.
                metrics::get().span_dropped(SpanDrop::ExportFailed, 1);
                if !self.dropping.swap(true, Ordering::Relaxed) {
                    log::error!(
                        "tracing: the export thread is gone; spans are dropped and counted"
                    );
                }
            }
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        let (done, wait) = mpsc::sync_channel(1);
        self.tx
            .try_send(Item::Flush(done))
            .map_err(|_| OTelSdkError::InternalFailure("the span queue is full".into()))?;
        wait.recv_timeout(Duration::from_secs(5))
            .map_err(|_| OTelSdkError::Timeout(Duration::from_secs(5)))
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        let (done, wait) = mpsc::sync_channel(1);
        if self.tx.try_send(Item::Flush(done)).is_ok() {
            let _ = wait.recv_timeout(timeout);
        }
        Ok(())
    }
}

/// How the export thread batches.
struct Batching {
    batch: usize,
    flush: Duration,
    timeout: Duration,
}

/// The export thread: batches from the queue to the collector until the queue closes.
fn export(exporter: Exporter, rx: Receiver<Item>, b: Batching) {
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        log::error!("tracing: cannot start the export runtime; spans are dropped");
        return;
    };
    let mut failing = false;
    let mut batch: Vec<SpanData> = Vec::with_capacity(b.batch);
    loop {
        let deadline = Instant::now() + b.flush;
        let mut flushed = Vec::new();
        let mut closed = false;
        while batch.len() < b.batch {
            let wait = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(wait) {
                Ok(Item::Span(span)) => batch.push(*span),
                Ok(Item::Flush(done)) => {
                    flushed.push(done);
                    break;
                }
                Err(RecvTimeoutError::Timeout) => break,
                Err(RecvTimeoutError::Disconnected) => {
                    closed = true;
                    break;
                }
            }
        }
        if !batch.is_empty() {
            let spans = std::mem::replace(&mut batch, Vec::with_capacity(b.batch));
            send(&runtime, &exporter, spans, b.timeout, &mut failing);
        }
        for done in flushed {
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
    spans: Vec<SpanData>,
    timeout: Duration,
    failing: &mut bool,
) {
    let n = spans.len() as u64;
    let body = exporter.encoder.encode(&spans);
    drop(spans);
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
