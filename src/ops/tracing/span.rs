//! The edge's own spans: what one OTLP `Span` message carries, made and ended by the `trace`
//! stage and handed to the export queue whole.
//!
//! Why not the OpenTelemetry SDK's spans (`opentelemetry_sdk::trace`): a request's two spans
//! cost about 12k instructions in the SDK's machinery alone (builders, contexts, the sampler's
//! result, the `SpanData` each processor gets, attribute vectors re-collected at the end),
//! more than the rest of the tracing together (`docs/benchmarks.md`, "Tracing"). The edge
//! needs a fixed, small part of it: two span kinds, attributes with static keys, one link, an
//! error status. The value types of the W3C context (`SpanContext`, `TraceId`, `SpanId`,
//! `TraceState`) and the `traceparent` parser remain the `opentelemetry` crates'; sampling
//! follows the SDK's `ParentBased(TraceIdRatioBased)` to the bit.

use std::borrow::Cow;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::SystemTime;

use opentelemetry::trace::{SpanContext, SpanId, SpanKind, TraceFlags, TraceId, TraceState};

/// An attribute's value. Text the edge already holds is moved or shared, never copied twice;
/// an address is written as text only at export, off the request path.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Static(&'static str),
    Text(String),
    Shared(Arc<str>),
    Int(i64),
    Bool(bool),
    Ip(IpAddr),
}

impl From<&'static str> for Value {
    fn from(v: &'static str) -> Value {
        Value::Static(v)
    }
}

impl From<String> for Value {
    fn from(v: String) -> Value {
        Value::Text(v)
    }
}

impl From<Arc<str>> for Value {
    fn from(v: Arc<str>) -> Value {
        Value::Shared(v)
    }
}

impl From<i64> for Value {
    fn from(v: i64) -> Value {
        Value::Int(v)
    }
}

impl From<bool> for Value {
    fn from(v: bool) -> Value {
        Value::Bool(v)
    }
}

impl From<IpAddr> for Value {
    fn from(v: IpAddr) -> Value {
        Value::Ip(v)
    }
}

/// A span attribute: its key (always one of the edge's own, static) and value.
pub type Attribute = (&'static str, Value);

/// What a new span's trace continues.
#[derive(Debug, Clone, Copy)]
pub enum Parent<'a> {
    /// None: the span starts a trace.
    Root,
    /// A client's span, from its `traceparent`.
    Remote(&'a SpanContext),
    /// One of the edge's own spans.
    Local(&'a SpanContext),
}

/// One span, from its start to its export.
#[derive(Debug)]
pub struct Span {
    pub context: SpanContext,
    /// The parent's id and whether it is remote (a client's).
    pub parent: Option<(SpanId, bool)>,
    pub kind: SpanKind,
    pub name: Cow<'static, str>,
    pub start: SystemTime,
    /// Set when the span ends.
    pub end: SystemTime,
    pub attributes: Vec<Attribute>,
    /// The client's span, when the edge starts a trace of its own instead of continuing it.
    pub link: Option<SpanContext>,
    /// The status: an error and its description, or unset.
    pub error: Option<String>,
}

impl Span {
    /// A span of `kind` named `name`, started at `start`: sampled as `sampler` decides with its
    /// parent, a new span id (and trace id, for a root). Only a sampled span records; one that
    /// does not still has its ids, for the member's `traceparent` and the access log.
    pub fn start(
        sampler: Sampler,
        parent: Parent<'_>,
        kind: SpanKind,
        name: impl Into<Cow<'static, str>>,
        start: SystemTime,
    ) -> Span {
        let (trace_id, sampled, state, parent) = match parent {
            Parent::Root => {
                let trace_id = new_trace_id();
                (trace_id, sampler.samples(trace_id), TraceState::NONE, None)
            }
            Parent::Remote(p) | Parent::Local(p) => (
                p.trace_id(),
                p.is_sampled(),
                p.trace_state().clone(),
                Some((p.span_id(), matches!(parent, Parent::Remote(_)))),
            ),
        };
        let flags = if sampled {
            TraceFlags::SAMPLED
        } else {
            TraceFlags::default()
        };
        Span {
            context: SpanContext::new(trace_id, new_span_id(), flags, false, state),
            parent,
            kind,
            name: name.into(),
            start,
            end: start,
            attributes: Vec::new(),
            link: None,
            error: None,
        }
    }

    /// Whether the span is sampled (recorded and exported); callers skip building attributes
    /// for one that is not.
    pub fn is_recording(&self) -> bool {
        self.context.is_sampled()
    }

    pub fn set(&mut self, key: &'static str, value: impl Into<Value>) {
        self.attributes.push((key, value.into()));
    }

    pub fn extend(&mut self, attributes: impl IntoIterator<Item = Attribute>) {
        self.attributes.extend(attributes);
    }

    pub fn fail(&mut self, description: String) {
        self.error = Some(description);
    }
}

/// The sampling of traces the edge starts: `ParentBased(TraceIdRatioBased(ratio))` as the
/// OpenTelemetry SDK computes it (a continued trace keeps its parent's decision).
#[derive(Debug, Clone, Copy)]
pub struct Sampler {
    /// Trace ids whose lower 63 bits are below this are sampled; `None`: every one.
    bound: Option<u64>,
}

impl Sampler {
    pub fn ratio(ratio: f64) -> Sampler {
        if ratio >= 1.0 {
            return Sampler { bound: None };
        }
        // The SDK's arithmetic (`TraceIdRatioBased`), so the edge and an SDK at the same ratio
        // decide alike on the same trace id.
        let bound = (ratio.max(0.0) * (1u64 << 63) as f64) as u64;
        Sampler { bound: Some(bound) }
    }

    fn samples(self, trace_id: TraceId) -> bool {
        let Some(bound) = self.bound else {
            return true;
        };
        let bytes = trace_id.to_bytes();
        let mut low = [0u8; 8];
        low.copy_from_slice(&bytes[8..]);
        (u64::from_be_bytes(low) >> 1) < bound
    }
}

thread_local! {
    /// Each thread's generator of ids, seeded from the operating system's randomness (through
    /// `ring`), not from the clock as `fastrand`'s own would be.
    static IDS: std::cell::RefCell<fastrand::Rng> = std::cell::RefCell::new(seeded());
}

fn seeded() -> fastrand::Rng {
    use ring::rand::SecureRandom as _;
    let mut seed = [0u8; 8];
    if ring::rand::SystemRandom::new().fill(&mut seed).is_err() {
        // No system randomness (it does not fail on Linux): the clock's, as fastrand's own.
        return fastrand::Rng::new();
    }
    fastrand::Rng::with_seed(u64::from_le_bytes(seed))
}

/// A random trace id, never the invalid all-zero one.
fn new_trace_id() -> TraceId {
    IDS.with_borrow_mut(|rng| loop {
        let id = rng.u128(..);
        if id != 0 {
            return TraceId::from(id);
        }
    })
}

/// A random span id, never the invalid all-zero one.
fn new_span_id() -> SpanId {
    IDS.with_borrow_mut(|rng| loop {
        let id = rng.u64(..);
        if id != 0 {
            return SpanId::from(id);
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn remote(sampled: bool) -> SpanContext {
        SpanContext::new(
            TraceId::from_hex("0af7651916cd43dd8448eb211c80319c").unwrap(),
            SpanId::from_hex("b7ad6b7169203331").unwrap(),
            if sampled {
                TraceFlags::SAMPLED
            } else {
                TraceFlags::default()
            },
            true,
            TraceState::from_key_value([("v", "1")]).unwrap(),
        )
    }

    #[test]
    fn a_continued_trace_keeps_its_parent_decision_and_state() {
        let never = Sampler::ratio(0.0);
        for sampled in [true, false] {
            let parent = remote(sampled);
            let s = Span::start(
                never,
                Parent::Remote(&parent),
                SpanKind::Server,
                "x",
                SystemTime::now(),
            );
            assert_eq!(s.is_recording(), sampled);
            assert_eq!(s.context.trace_id(), parent.trace_id());
            assert_ne!(s.context.span_id(), parent.span_id());
            assert_eq!(s.parent, Some((parent.span_id(), true)));
            assert_eq!(s.context.trace_state().header(), "v=1");
        }
        let local = Span::start(
            never,
            Parent::Local(&remote(true)),
            SpanKind::Client,
            "x",
            SystemTime::now(),
        );
        assert_eq!(local.parent.map(|p| p.1), Some(false));
    }

    #[test]
    fn roots_are_sampled_by_ratio_like_the_sdk() {
        let (all, none) = (Sampler::ratio(1.0), Sampler::ratio(0.0));
        let start = || Span::start(all, Parent::Root, SpanKind::Server, "x", SystemTime::now());
        let a = start();
        assert!(a.is_recording() && a.parent.is_none());
        assert_ne!(a.context.trace_id(), start().context.trace_id());
        let n = Span::start(none, Parent::Root, SpanKind::Server, "x", SystemTime::now());
        assert!(!n.is_recording() && n.context.is_valid());
        // The SDK's rule on the lower 63 bits: 0x…7fff…/2 is just under half.
        let half = Sampler::ratio(0.5);
        let id = |low: u64| TraceId::from(u128::from(low));
        assert!(half.samples(id(0x7fff_ffff_ffff_fffe)));
        assert!(!half.samples(id(0x8000_0000_0000_0000)));
        let sampled = (0..4000).filter(|_| half.samples(new_trace_id())).count();
        assert!((1600..2400).contains(&sampled), "{sampled} of 4000 at 0.5");
    }
}
