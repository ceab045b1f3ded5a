//! W3C Trace Context in HTTP headers: the client's span read from `traceparent` /
//! `tracestate`, and the edge's CLIENT span written for the member.

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use pingora::http::RequestHeader;

/// The longest `tracestate` continued.
const MAX_STATE: usize = 512;

/// The W3C headers, by their names made once (not parsed per request).
static TRACEPARENT: http::HeaderName = http::HeaderName::from_static("traceparent");
static TRACESTATE: http::HeaderName = http::HeaderName::from_static("tracestate");

/// The client's span, from a valid `traceparent` (and its `tracestate`).
pub fn remote_parent(req: &RequestHeader) -> Option<SpanContext> {
    if !req.headers.contains_key(&TRACEPARENT) {
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
    head.insert_header(TRACEPARENT.clone(), traceparent(sc))?;
    let state = sc.trace_state().header();
    if !state.is_empty() {
        head.insert_header(TRACESTATE.clone(), state)?;
    } else if head.headers.contains_key(&TRACESTATE) {
        head.remove_header(&TRACESTATE);
    }
    Ok(())
}

/// `00-<trace id>-<span id>-<flags>` (W3C Trace Context, version 00; only the sampled flag).
fn traceparent(sc: &SpanContext) -> http::HeaderValue {
    let mut out = [0u8; 55];
    out[..3].copy_from_slice(b"00-");
    let flags = (sc.trace_flags() & TraceFlags::SAMPLED).to_u8();
    hex_into(&mut out[3..35], &sc.trace_id().to_bytes());
    out[35] = b'-';
    hex_into(&mut out[36..52], &sc.span_id().to_bytes());
    out[52] = b'-';
    hex_into(&mut out[53..], &[flags]);
    // Hex digits and dashes are a valid header value.
    http::HeaderValue::from_bytes(&out).unwrap_or_else(|_| http::HeaderValue::from_static(""))
}

/// A trace id in lower-case hex, without a formatter.
pub fn trace_hex(id: TraceId) -> [u8; 32] {
    let mut out = [0u8; 32];
    hex_into(&mut out, &id.to_bytes());
    out
}

/// A span id in lower-case hex, without a formatter.
pub fn span_hex(id: SpanId) -> [u8; 16] {
    let mut out = [0u8; 16];
    hex_into(&mut out, &id.to_bytes());
    out
}

/// `bytes` in lower-case hex into `out` (twice their length).
fn hex_into(out: &mut [u8], bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for (pair, b) in out.chunks_exact_mut(2).zip(bytes) {
        pair[0] = DIGITS[usize::from(b >> 4)];
        pair[1] = DIGITS[usize::from(b & 0xf)];
    }
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
        let state = SpanContext::new(
            sc.trace_id(),
            sc.span_id(),
            TraceFlags::SAMPLED,
            false,
            TraceState::from_key_value([("e", "2")]).unwrap(),
        );
        inject(&mut head, &state).unwrap();
        assert_eq!(head.headers.get("tracestate").unwrap(), "e=2");
        assert!(head
            .headers
            .get("traceparent")
            .unwrap()
            .to_str()
            .unwrap()
            .ends_with("-01"));
        assert_eq!(
            &trace_hex(sc.trace_id()),
            b"0af7651916cd43dd8448eb211c80319c"
        );
        assert_eq!(&span_hex(sc.span_id()), b"b7ad6b7169203331");
    }
}
