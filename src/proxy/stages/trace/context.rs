//! W3C Trace Context in HTTP headers: the client's span read from `traceparent` /
//! `tracestate`, and the edge's CLIENT span written for the member.

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{SpanContext, TraceContextExt, TraceFlags, TraceState};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use pingora::http::RequestHeader;

/// The longest `tracestate` continued.
const MAX_STATE: usize = 512;

/// The client's span, from a valid `traceparent` (and its `tracestate`).
pub fn remote_parent(req: &RequestHeader) -> Option<SpanContext> {
    if !req.headers.contains_key("traceparent") {
        return None;
    }
    let extractor = Headers(&req.headers);
    let cx = TraceContextPropagator::new().extract(&extractor);
    let sc = cx.span().span_context().clone();
    if !sc.is_valid() {
        return None;
    }
    // W3C lets a hop drop a state it will not carry: at most 512 bytes are continued.
    if sc.trace_state().header().len() > MAX_STATE {
        return Some(SpanContext::new(
            sc.trace_id(),
            sc.span_id(),
            sc.trace_flags(),
            true,
            TraceState::NONE,
        ));
    }
    Some(sc)
}

/// A request's headers as the propagator reads them.
struct Headers<'a>(&'a http::HeaderMap);

impl opentelemetry::propagation::Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(http::HeaderName::as_str).collect()
    }
}

/// The member's `traceparent` (and `tracestate`, when there is one): the CLIENT span.
pub fn inject(head: &mut RequestHeader, sc: &SpanContext) -> pingora::Result<()> {
    head.insert_header("traceparent", traceparent(sc))?;
    let state = sc.trace_state().header();
    if state.is_empty() {
        head.remove_header("tracestate");
    } else {
        head.insert_header("tracestate", state)?;
    }
    Ok(())
}

/// `00-<trace id>-<span id>-<flags>` (W3C Trace Context, version 00; only the sampled flag).
fn traceparent(sc: &SpanContext) -> http::HeaderValue {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = [0u8; 55];
    out[..3].copy_from_slice(b"00-");
    let flags = (sc.trace_flags() & TraceFlags::SAMPLED).to_u8();
    let (trace, span) = (sc.trace_id().to_bytes(), sc.span_id().to_bytes());
    let parts: [(&[u8], usize); 3] = [(&trace, 3), (&span, 36), (&[flags], 53)];
    for (bytes, at) in parts {
        for (i, b) in bytes.iter().enumerate() {
            out[at + 2 * i] = HEX[usize::from(b >> 4)];
            out[at + 2 * i + 1] = HEX[usize::from(b & 0xf)];
        }
    }
    out[35] = b'-';
    out[52] = b'-';
    // Hex digits and dashes are a valid header value.
    http::HeaderValue::from_bytes(&out).unwrap_or_else(|_| http::HeaderValue::from_static(""))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_member_gets_the_client_span_and_its_state() {
        let mut head = RequestHeader::build("POST", b"/mcp", None).unwrap();
        head.insert_header(
            "traceparent",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        )
        .unwrap();
        head.insert_header("tracestate", "vendor=1").unwrap();
        let sc = remote_parent(&head).unwrap();
        assert_eq!(sc.trace_state().header(), "vendor=1");
        let ours = SpanContext::new(
            sc.trace_id(),
            opentelemetry::trace::SpanId::from_hex("00f067aa0ba902b7").unwrap(),
            TraceFlags::default(),
            false,
            Default::default(),
        );
        inject(&mut head, &ours).unwrap();
        assert_eq!(
            head.headers.get("traceparent").unwrap(),
            "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-00"
        );
        assert!(
            head.headers.get("tracestate").is_none(),
            "no state: none sent"
        );
        head.insert_header(
            "traceparent",
            "00-00000000000000000000000000000000-b7ad6b7169203331-01",
        )
        .unwrap();
        assert!(
            remote_parent(&head).is_none(),
            "an all-zero trace id is no parent"
        );
    }
}
