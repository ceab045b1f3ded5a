//! `[tracing]`: checked into the export's settings ([`crate::ops::tracing::Settings`]).

use std::time::Duration;

use super::file::TracingSection;
use super::Errors;
use crate::ops::tracing::Settings;

pub(super) fn tracing(section: Option<&TracingSection>, errs: &mut Errors) -> Option<Settings> {
    let t = section?;
    let before = errs.len();
    match http::Uri::try_from(t.endpoint.as_str()) {
        Ok(uri) if matches!(uri.scheme_str(), Some("http" | "https")) && uri.host().is_some() => {}
        _ => errs.push(format!(
            "tracing.endpoint: '{}' is not an http:// or https:// URL (the collector's traces URL, e.g. http://otel-collector:4318/v1/traces)",
            t.endpoint
        )),
    }
    if !t.endpoint.trim_end_matches('/').ends_with("/v1/traces") {
        log::warn!(
            "tracing.endpoint: '{}' does not end in /v1/traces, the OTLP/HTTP traces path; it is used as written",
            t.endpoint
        );
    }
    if !(0.0..=1.0).contains(&t.sample_ratio) {
        errs.push(format!(
            "tracing.sample_ratio: {} is not between 0 and 1",
            t.sample_ratio
        ));
    }
    if t.batch_spans > t.queue_spans {
        errs.push(format!(
            "tracing.batch_spans: {} is more than queue_spans ({})",
            t.batch_spans, t.queue_spans
        ));
    }
    if t.service_name.trim().is_empty() {
        errs.push("tracing.service_name: must not be empty".to_string());
    }
    if errs.len() > before {
        return None;
    }
    Some(Settings {
        endpoint: t.endpoint.clone(),
        sample_ratio: t.sample_ratio,
        queue_spans: t.queue_spans.get(),
        batch_spans: t.batch_spans.get(),
        flush: Duration::from_millis(t.flush_ms.get()),
        export_timeout: Duration::from_millis(t.export_timeout_ms.get()),
        service_name: t.service_name.clone(),
    })
}
