//! A batch of spans as an OTLP/HTTP export body: the protobuf `ExportTraceServiceRequest` of
//! the OpenTelemetry protocol (`opentelemetry/proto/collector/trace/v1/trace_service.proto`
//! and the `trace`, `common` and `resource` messages it holds), written straight from the
//! edge's own [`Span`]s.
//!
//! Why not `opentelemetry-otlp`'s exporter: it converts every span into owned protobuf
//! structs first (the `opentelemetry-proto` types: a `String` per attribute key and value),
//! then measures and encodes them with `prost`: 22.5k instructions per span against 3.3k
//! here, more than all the rest of a request's tracing (`docs/benchmarks.md`, "Tracing").
//! This writes each field once into one buffer, the resource and the scope encoded once for
//! the exporter's life. The tests decode what it writes with the official definitions
//! (`opentelemetry-proto` here, the Python package in `tests/tracing.rs`).

use std::time::{SystemTime, UNIX_EPOCH};

use std::io::Write as _;
use std::net::IpAddr;

use opentelemetry::trace::{SpanContext, SpanKind};

use super::span::{Span, Value};

/// Protobuf wire types.
const VARINT: u8 = 0;
const FIXED64: u8 = 1;
const LEN: u8 = 2;
const FIXED32: u8 = 5;

/// `SpanFlags`: the context's remote bit is known, and set.
const HAS_IS_REMOTE: u32 = 0x100;
const IS_REMOTE: u32 = 0x200;

/// Encodes batches for one resource and instrumentation scope.
#[derive(Debug)]
pub struct Encoder {
    /// `ResourceSpans.resource` (field 1), whole.
    resource: Vec<u8>,
    /// `ScopeSpans.scope` (field 1), whole.
    scope: Vec<u8>,
}

impl Encoder {
    pub fn new(resource: &[(String, String)], scope_name: &str) -> Encoder {
        let mut body = Vec::new();
        for (k, v) in resource {
            nested(&mut body, 1, |out| {
                len_field(out, 1, k.as_bytes());
                nested(out, 2, |out| len_field(out, 1, v.as_bytes()));
            });
        }
        let mut resource = Vec::new();
        len_field(&mut resource, 1, &body);
        let mut name = Vec::new();
        len_field(&mut name, 1, scope_name.as_bytes());
        let mut scope = Vec::new();
        len_field(&mut scope, 1, &name);
        Encoder { resource, scope }
    }

    /// The export body for `spans`.
    pub fn encode(&self, spans: &[Span]) -> Vec<u8> {
        // Each span is written once into `bodies`, its length known after (one pass).
        let mut bodies = Vec::with_capacity(spans.len() * 512);
        let mut ends = Vec::with_capacity(spans.len());
        for span in spans {
            write_span(&mut bodies, span);
            ends.push(bodies.len());
        }
        let mut spans_len = 0;
        let mut start = 0;
        for end in &ends {
            spans_len += field_len(2, end - start);
            start = *end;
        }
        let scope_spans = self.scope.len() + spans_len;
        let resource_spans = self.resource.len() + field_len(2, scope_spans);
        let mut out = Vec::with_capacity(field_len(1, resource_spans));
        tag(&mut out, 1, LEN);
        varint(&mut out, resource_spans as u64);
        out.extend_from_slice(&self.resource);
        tag(&mut out, 2, LEN);
        varint(&mut out, scope_spans as u64);
        out.extend_from_slice(&self.scope);
        let mut start = 0;
        for end in ends {
            tag(&mut out, 2, LEN);
            varint(&mut out, (end - start) as u64);
            out.extend_from_slice(&bodies[start..end]);
            start = end;
        }
        out
    }
}

/// A length-delimited field whose body `write` appends, its length written in front once
/// known: one byte is kept for it, and the body moved only in the rare case it needs more.
fn nested(out: &mut Vec<u8>, field: u32, write: impl FnOnce(&mut Vec<u8>)) {
    tag(out, field, LEN);
    let at = out.len();
    out.push(0);
    write(out);
    let len = out.len() - at - 1;
    if len < 0x80 {
        out[at] = len as u8;
    } else {
        let mut prefix = Vec::with_capacity(5);
        varint(&mut prefix, len as u64);
        out.splice(at..=at, prefix);
    }
}

fn write_span(out: &mut Vec<u8>, s: &Span) {
    let sc = &s.context;
    len_field(out, 1, &sc.trace_id().to_bytes());
    len_field(out, 2, &sc.span_id().to_bytes());
    let state = sc.trace_state().header();
    if !state.is_empty() {
        len_field(out, 3, state.as_bytes());
    }
    if let Some((parent, _)) = s.parent {
        len_field(out, 4, &parent.to_bytes());
    }
    len_field(out, 5, s.name.as_bytes());
    tag(out, 6, VARINT);
    varint(out, kind(&s.kind));
    tag(out, 7, FIXED64);
    out.extend_from_slice(&nanos(s.start).to_le_bytes());
    tag(out, 8, FIXED64);
    out.extend_from_slice(&nanos(s.end).to_le_bytes());
    for (key, value) in &s.attributes {
        key_value(out, 9, key, value);
    }
    if let Some(link) = &s.link {
        nested(out, 13, |out| write_link(out, link));
    }
    if let Some(description) = &s.error {
        // `Status`: message = 2, code = 3 (2: error).
        nested(out, 15, |out| {
            if !description.is_empty() {
                len_field(out, 2, description.as_bytes());
            }
            tag(out, 3, VARINT);
            varint(out, 2);
        });
    }
    let mut flags = u32::from(sc.trace_flags().to_u8()) | HAS_IS_REMOTE;
    if s.parent.is_some_and(|(_, remote)| remote) {
        flags |= IS_REMOTE;
    }
    tag(out, 16, FIXED32);
    out.extend_from_slice(&flags.to_le_bytes());
}

/// A `Span.Link`'s body: a remote span's context.
fn write_link(out: &mut Vec<u8>, sc: &SpanContext) {
    len_field(out, 1, &sc.trace_id().to_bytes());
    len_field(out, 2, &sc.span_id().to_bytes());
    let state = sc.trace_state().header();
    if !state.is_empty() {
        len_field(out, 3, state.as_bytes());
    }
    let mut flags = u32::from(sc.trace_flags().to_u8()) | HAS_IS_REMOTE;
    if sc.is_remote() {
        flags |= IS_REMOTE;
    }
    tag(out, 6, FIXED32);
    out.extend_from_slice(&flags.to_le_bytes());
}

fn kind(kind: &SpanKind) -> u64 {
    match kind {
        SpanKind::Internal => 1,
        SpanKind::Server => 2,
        SpanKind::Client => 3,
        SpanKind::Producer => 4,
        SpanKind::Consumer => 5,
    }
}

fn nanos(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// A `KeyValue` message as field `field`.
fn key_value(out: &mut Vec<u8>, field: u32, key: &str, value: &Value) {
    nested(out, field, |out| {
        len_field(out, 1, key.as_bytes());
        nested(out, 2, |out| any(out, value));
    });
}

/// An `AnyValue`'s body.
fn any(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::Static(s) => len_field(out, 1, s.as_bytes()),
        Value::Text(s) => len_field(out, 1, s.as_bytes()),
        Value::Shared(s) => len_field(out, 1, s.as_bytes()),
        Value::Bool(b) => {
            tag(out, 2, VARINT);
            varint(out, u64::from(*b));
        }
        Value::Int(i) => {
            tag(out, 3, VARINT);
            varint(out, *i as u64);
        }
        // An address as its text, written in place (at most 45 bytes: one length byte);
        // IPv4's dotted quad by hand (the formatter costs more than the rest of the span).
        Value::Ip(IpAddr::V4(ip)) => nested(out, 1, |out| {
            for (i, octet) in ip.octets().into_iter().enumerate() {
                if i > 0 {
                    out.push(b'.');
                }
                if octet >= 100 {
                    out.push(b'0' + octet / 100);
                }
                if octet >= 10 {
                    out.push(b'0' + octet / 10 % 10);
                }
                out.push(b'0' + octet % 10);
            }
        }),
        Value::Ip(ip) => nested(out, 1, |out| {
            let _ = write!(out, "{ip}");
        }),
    }
}

fn tag(out: &mut Vec<u8>, field: u32, wire: u8) {
    varint(out, (u64::from(field) << 3) | u64::from(wire));
}

fn len_field(out: &mut Vec<u8>, field: u32, bytes: &[u8]) {
    tag(out, field, LEN);
    varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// A length-delimited field's whole length: tag, length, body.
fn field_len(field: u32, len: usize) -> usize {
    varint_len(u64::from(field) << 3) + varint_len(len as u64) + len
}

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn varint_len(v: u64) -> usize {
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::{SpanId, TraceFlags, TraceId, TraceState};
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::common::v1::any_value;
    use prost::Message;

    fn span(
        name: &'static str,
        parent: Option<SpanId>,
        attributes: Vec<(&'static str, Value)>,
        error: Option<&str>,
    ) -> Span {
        let context = SpanContext::new(
            TraceId::from_hex("0af7651916cd43dd8448eb211c80319c").unwrap(),
            SpanId::from_hex("b7ad6b7169203331").unwrap(),
            TraceFlags::SAMPLED,
            false,
            TraceState::from_key_value([("a", "1")]).unwrap(),
        );
        let link = SpanContext::new(
            TraceId::from_hex("11111111111111111111111111111111").unwrap(),
            SpanId::from_hex("2222222222222222").unwrap(),
            TraceFlags::SAMPLED,
            true,
            TraceState::NONE,
        );
        Span {
            context,
            parent: parent.map(|p| (p, true)),
            kind: SpanKind::Server,
            name: name.into(),
            start: UNIX_EPOCH + std::time::Duration::from_nanos(1_000_000_007),
            end: UNIX_EPOCH + std::time::Duration::from_nanos(2_000_000_009),
            attributes,
            link: parent.map(|_| link),
            error: error.map(str::to_owned),
        }
    }

    /// Two spans encoded, and read back with the official definitions.
    fn decoded() -> ExportTraceServiceRequest {
        let resource = vec![
            ("service.name".to_owned(), "edge".to_owned()),
            ("k8s.pod.name".to_owned(), "p-1".to_owned()),
        ];
        let encoder = Encoder::new(&resource, "mcp-edge");
        let spans = vec![
            span(
                "tools/call echo",
                Some(SpanId::from_hex("00f067aa0ba902b7").unwrap()),
                vec![
                    ("mcp.method.name", Value::Static("tools/call")),
                    ("server.port", Value::Int(8080)),
                    ("negative", Value::Int(-5)),
                    ("mcp.edge.bridged", Value::Bool(true)),
                    ("client.address", Value::Ip("2001:db8::1".parse().unwrap())),
                    ("server.address", Value::Ip("10.0.105.7".parse().unwrap())),
                    ("peer", Value::Ip("192.168.0.255".parse().unwrap())),
                    ("shared", Value::Shared("s".into())),
                    ("long", Value::Text("x".repeat(300))),
                ],
                Some("boom"),
            ),
            span("tools/list", None, Vec::new(), None),
        ];
        ExportTraceServiceRequest::decode(encoder.encode(&spans).as_slice()).unwrap()
    }

    #[test]
    fn the_resource_and_the_scope_are_read_back() {
        let request = decoded();
        assert_eq!(request.resource_spans.len(), 1);
        let rs = &request.resource_spans[0];
        let res: Vec<(String, Option<any_value::Value>)> = rs
            .resource
            .as_ref()
            .unwrap()
            .attributes
            .iter()
            .map(|kv| (kv.key.clone(), kv.value.clone().and_then(|v| v.value)))
            .collect();
        let text = |v: &str| Some(any_value::Value::StringValue(v.into()));
        assert!(
            res.contains(&("service.name".into(), text("edge"))),
            "{res:?}"
        );
        assert!(
            res.contains(&("k8s.pod.name".into(), text("p-1"))),
            "{res:?}"
        );
        let ss = &rs.scope_spans[0];
        assert_eq!(ss.scope.as_ref().unwrap().name, "mcp-edge");
        assert_eq!(ss.spans.len(), 2);
        let empty = Encoder::new(&[], "s").encode(&[]);
        let empty = ExportTraceServiceRequest::decode(empty.as_slice()).unwrap();
        assert!(empty.resource_spans[0].scope_spans[0].spans.is_empty());
    }

    #[test]
    fn every_span_field_is_read_back() {
        let request = decoded();
        let spans = &request.resource_spans[0].scope_spans[0].spans;
        let first = &spans[0];
        assert_eq!(first.name, "tools/call echo");
        assert_eq!(hex(&first.trace_id), "0af7651916cd43dd8448eb211c80319c");
        assert_eq!(hex(&first.span_id), "b7ad6b7169203331");
        assert_eq!(hex(&first.parent_span_id), "00f067aa0ba902b7");
        assert_eq!(first.trace_state, "a=1");
        assert_eq!(first.kind, 2);
        assert_eq!(first.start_time_unix_nano, 1_000_000_007);
        assert_eq!(first.end_time_unix_nano, 2_000_000_009);
        assert_eq!(first.flags, 0x01 | 0x100 | 0x200);
        let status = first.status.as_ref().unwrap();
        assert_eq!((status.code, status.message.as_str()), (2, "boom"));
        let link = &first.links[0];
        assert_eq!(hex(&link.trace_id), "11111111111111111111111111111111");
        assert_eq!(link.flags, 0x01 | 0x100 | 0x200);
        let second = &spans[1];
        assert!(second.parent_span_id.is_empty(), "a root");
        assert_eq!(second.flags, 0x01 | 0x100, "a root's parent is not remote");
        assert!(second.links.is_empty());
        assert!(second.status.as_ref().is_none_or(|s| s.code == 0));
    }

    #[test]
    fn every_attribute_kind_is_read_back() {
        let request = decoded();
        let first = &request.resource_spans[0].scope_spans[0].spans[0];
        let attr = |k: &str| {
            first
                .attributes
                .iter()
                .find(|kv| kv.key == k)
                .and_then(|kv| kv.value.clone())
                .and_then(|v| v.value)
        };
        use any_value::Value as V;
        assert_eq!(
            attr("mcp.method.name"),
            Some(V::StringValue("tools/call".into()))
        );
        assert_eq!(attr("server.port"), Some(V::IntValue(8080)));
        assert_eq!(attr("negative"), Some(V::IntValue(-5)));
        assert_eq!(attr("mcp.edge.bridged"), Some(V::BoolValue(true)));
        assert_eq!(
            attr("client.address"),
            Some(V::StringValue("2001:db8::1".into()))
        );
        assert_eq!(attr("shared"), Some(V::StringValue("s".into())));
        let text = |k: &str| match attr(k) {
            Some(V::StringValue(s)) => s,
            other => panic!("{other:?}"),
        };
        assert_eq!(text("server.address"), "10.0.105.7");
        assert_eq!(text("peer"), "192.168.0.255");
        assert_eq!(attr("long"), Some(V::StringValue("x".repeat(300))));
    }

    #[test]
    fn varint_lengths() {
        for v in [
            0u64,
            1,
            127,
            128,
            16_383,
            16_384,
            u64::from(u32::MAX),
            u64::MAX,
        ] {
            let mut b = Vec::new();
            varint(&mut b, v);
            assert_eq!(b.len(), varint_len(v), "{v}");
        }
    }

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }
}
