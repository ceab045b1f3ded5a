//! OpenTelemetry traces: the spans the `trace` stage makes (`proxy/stages/trace.rs`, with
//! [`Span`] of [`span`]), and their export to a collector (OTLP over HTTP, protobuf) off the
//! request path.
//!
//! A span that ends goes into a bounded queue; a thread of its own takes them in batches to
//! the collector (encoded by [`otlp`]), each export bounded by `export_timeout_ms`,
//! never retried. A full queue and a failed export drop spans: both are counted
//! (`mcp_edge_trace_spans_dropped_total{reason}`) and logged once per episode (and once when
//! exports work again). Nothing on the request path waits for the collector: ending a span is
//! a push under a lock held for that push alone.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

mod export;
mod otlp;
mod span;

pub use span::{Attribute, Parent, Sampler, Span, Value};

use export::Queue;

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

/// The edge's tracer: how it samples, and the queue to the export thread.
pub struct Tracing {
    sampler: Sampler,
    queue: Arc<Queue>,
}

impl std::fmt::Debug for Tracing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tracing")
    }
}

impl Tracing {
    /// The tracer, and the thread that exports what it ends.
    pub fn start(settings: &Settings) -> Result<Arc<Tracing>, String> {
        let queue = export::start(settings, resource(settings), SCOPE)?;
        Ok(Arc::new(Tracing {
            sampler: Sampler::ratio(settings.sample_ratio),
            queue,
        }))
    }

    /// A span started now-or-earlier (`start`), sampled as configured.
    pub fn span(
        &self,
        parent: Parent<'_>,
        kind: opentelemetry::trace::SpanKind,
        name: impl Into<std::borrow::Cow<'static, str>>,
        start: SystemTime,
    ) -> Span {
        Span::start(self.sampler, parent, kind, name, start)
    }

    /// End `span` now: a sampled one goes to the export queue.
    pub fn end(&self, mut span: Span) {
        if span.is_recording() {
            span.end = SystemTime::now();
            self.queue.push(span);
        }
    }

    /// Export what is queued (waiting at most `timeout`), then stop exporting.
    pub fn shutdown(&self, timeout: Duration) {
        self.queue.close(timeout);
    }
}

impl Drop for Tracing {
    fn drop(&mut self) {
        self.queue.close(Duration::from_secs(1));
    }
}

/// The instrumentation scope of the edge's spans.
const SCOPE: &str = "mcp-edge";

/// `service.name`, `service.version`, the `telemetry.sdk.*` triple, where the replica runs
/// (the Kubernetes Downward API's `POD_NAME`, `POD_NAMESPACE`, `NODE_NAME`), and what
/// `OTEL_RESOURCE_ATTRIBUTES` adds (`key=value,…`, percent-encoded; the edge's own keys win).
fn resource(settings: &Settings) -> Vec<(String, String)> {
    resource_from(settings, |var| std::env::var(var).ok())
}

/// [`resource`] with the environment's variables from `var`.
fn resource_from(
    settings: &Settings,
    var: impl Fn(&str) -> Option<String>,
) -> Vec<(String, String)> {
    let env = |name: &str| var(name).filter(|v| !v.is_empty());
    let name = env("OTEL_SERVICE_NAME").unwrap_or_else(|| settings.service_name.clone());
    let version = env!("CARGO_PKG_VERSION");
    let mut ours: Vec<(&str, String)> = vec![
        ("service.name", name),
        ("service.version", version.to_owned()),
        ("telemetry.sdk.name", "mcp-edge".to_owned()),
        ("telemetry.sdk.language", "rust".to_owned()),
        ("telemetry.sdk.version", version.to_owned()),
    ];
    for (var, key) in [
        ("POD_NAME", "k8s.pod.name"),
        ("POD_NAMESPACE", "k8s.namespace.name"),
        ("NODE_NAME", "k8s.node.name"),
        ("POD_NAME", "service.instance.id"),
    ] {
        if let Some(v) = env(var) {
            ours.push((key, v));
        }
    }
    let mut attributes: Vec<(String, String)> = Vec::new();
    // A key given twice: the last one (a resource holds each key once).
    for (k, v) in
        env("OTEL_RESOURCE_ATTRIBUTES").map_or_else(Vec::new, |v| environment_attributes(&v))
    {
        attributes.retain(|(seen, _)| *seen != k);
        attributes.push((k, v));
    }
    attributes.retain(|(k, _)| !ours.iter().any(|(o, _)| o == k));
    attributes.extend(ours.into_iter().map(|(k, v)| (k.to_owned(), v)));
    attributes
}

/// `OTEL_RESOURCE_ATTRIBUTES`: `key=value` pairs separated by commas, percent-decoded; a pair
/// without `=` or with an empty key is skipped.
fn environment_attributes(text: &str) -> Vec<(String, String)> {
    text.split(',')
        .filter_map(|pair| {
            let (k, v) = pair.split_once('=')?;
            let k = percent_decode(k.trim());
            (!k.is_empty()).then(|| (k, percent_decode(v.trim())))
        })
        .collect()
}

fn percent_decode(text: &str) -> String {
    percent_encoding::percent_decode_str(text)
        .decode_utf8_lossy()
        .into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn environment_attributes_are_decoded_and_bad_pairs_skipped() {
        assert_eq!(
            environment_attributes("deployment.environment=prod, team=a%2Cb,novalue,=x,k=%zz"),
            vec![
                ("deployment.environment".to_owned(), "prod".to_owned()),
                ("team".to_owned(), "a,b".to_owned()),
                ("k".to_owned(), "%zz".to_owned()),
            ]
        );
    }

    #[test]
    fn the_resource_holds_each_key_once_and_the_edges_own_win() {
        let settings = Settings {
            endpoint: "http://c/v1/traces".into(),
            sample_ratio: 1.0,
            queue_spans: 1,
            batch_spans: 1,
            flush: Duration::from_secs(1),
            export_timeout: Duration::from_secs(1),
            service_name: "edge".into(),
        };
        let r = resource_from(&settings, |var| match var {
            "OTEL_RESOURCE_ATTRIBUTES" => Some("a=1,service.name=x,a=2,k8s.pod.name=y".into()),
            "POD_NAME" => Some("p-0".into()),
            _ => None,
        });
        let get = |k: &str| {
            let all: Vec<&String> = r
                .iter()
                .filter(|(key, _)| key == k)
                .map(|(_, v)| v)
                .collect();
            assert!(all.len() <= 1, "{k} twice: {r:?}");
            all.first().map(|v| v.as_str())
        };
        assert_eq!(get("a"), Some("2"), "the last one");
        assert_eq!(get("service.name"), Some("edge"));
        assert_eq!(get("k8s.pod.name"), Some("p-0"));
        assert_eq!(get("service.instance.id"), Some("p-0"));
        assert_eq!(get("k8s.node.name"), None);
    }
}
